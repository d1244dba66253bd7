package v1_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// The fuzz targets below share one contract, the one doc.go promises for
// every decoder of outside input: never panic; refuse input over the size
// limit; on failure return no value and an error carrying a *FieldError;
// on success return a value that validates and survives an encode/decode
// round trip unchanged.
//
// The size limit is checked by padding every accepted input with
// whitespace to one byte over the limit: the padded input must be refused.
// A large seed would do the same but stalls the fuzzer, which spends its
// time minimising 64 KiB inputs.

// overLimit returns data padded with JSON whitespace to limit+1 bytes.
func overLimit(data []byte, limit int) []byte {
	out := make([]byte, limit+1)
	copy(out, data)
	for i := len(data); i < len(out); i++ {
		out[i] = ' '
	}
	return out
}

// requireFieldError fails unless err carries a *v1.FieldError.
func requireFieldError(t *testing.T, err error) {
	t.Helper()
	var fe *v1.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %q (%T) carries no *v1.FieldError", err, err)
	}
}

func FuzzDecodeBootstrap(f *testing.F) {
	fx := mustFixtures(f)
	valid := validBootstrap(fx)
	validJSON := mustJSON(f, valid)
	enc, err := valid.EncodeGuestinfo()
	if err != nil {
		f.Fatal(err)
	}
	pinOnly := *valid
	pinOnly.CABundle, pinOnly.Token = "", ""

	f.Add(validJSON)
	f.Add([]byte(enc))
	f.Add([]byte(enc + "\n"))
	f.Add(mustJSON(f, &pinOnly))
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Bootstrap","controllers":["http://c"],"caPin":"sha256:00","nodeName":"N"}`))
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Bootstrap","extra":1}`))
	f.Add([]byte(`{"controllers":"https://c"}`))
	f.Add(append(append([]byte{}, validJSON...), '{'))
	f.Add(validJSON[:len(validJSON)/2])
	f.Add([]byte("bm90IGpzb24="))
	f.Add([]byte("!!"))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := v1.DecodeBootstrap(data)
		if err != nil {
			if b != nil {
				t.Fatal("returned a document along with an error")
			}
			requireFieldError(t, err)
			return
		}
		if len(data) > v1.MaxBootstrapBytes {
			t.Fatalf("accepted %d bytes, more than MaxBootstrapBytes", len(data))
		}
		if _, err := v1.DecodeBootstrap(overLimit(data, v1.MaxBootstrapBytes)); err == nil {
			t.Fatal("accepted the document padded past MaxBootstrapBytes")
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("accepted a document that does not validate: %v", err)
		}
		// Both wire forms must give back the same document.
		g, err := b.EncodeGuestinfo()
		if err != nil {
			t.Fatal(err)
		}
		for form, enc := range map[string][]byte{"json": mustJSON(t, b), "guestinfo": []byte(g)} {
			b2, err := v1.DecodeBootstrap(enc)
			if err != nil {
				t.Fatalf("%s re-encoding refused: %v\n%s", form, err, enc)
			}
			if !reflect.DeepEqual(b, b2) {
				t.Fatalf("%s round trip changed the document:\n%+v\n%+v", form, b, b2)
			}
		}
	})
}

func FuzzDecodeEnrollRequest(f *testing.F) {
	fx := mustFixtures(f)
	valid := mustJSON(f, v1.EnrollRequest{Token: fx.token, CSR: fx.csrPEM})
	f.Add(valid)
	f.Add(mustJSON(f, v1.EnrollRequest{Token: "x", CSR: fx.csrPEM}))
	f.Add(mustJSON(f, v1.EnrollRequest{CSR: fx.csrPEM}))
	f.Add(mustJSON(f, v1.EnrollRequest{Token: fx.token, CSR: fx.leafPEM}))
	f.Add(mustJSON(f, v1.EnrollRequest{Token: fx.token, CSR: fx.csrPEM + fx.csrPEM}))
	f.Add(mustJSON(f, v1.EnrollRequest{Token: fx.token, CSR: v1.EncodeCSR([]byte{0x30, 0})}))
	f.Add([]byte(`{"token":"","csr":""}`))
	f.Add([]byte(`{"token":1}`))
	f.Add([]byte(`{"token":"t","csr":"c","x":0}`))
	f.Add(append(append([]byte{}, valid...), valid...))
	f.Add([]byte(`null`))

	f.Fuzz(func(t *testing.T, data []byte) {
		req, csr, err := v1.DecodeEnrollRequest(bytes.NewReader(data))
		if err != nil {
			if req != nil || csr != nil {
				t.Fatal("returned values along with an error")
			}
			requireFieldError(t, err)
			return
		}
		if len(data) > v1.MaxEnrollBytes {
			t.Fatalf("accepted %d bytes, more than MaxEnrollBytes", len(data))
		}
		if _, _, err := v1.DecodeEnrollRequest(bytes.NewReader(overLimit(data, v1.MaxEnrollBytes))); err == nil {
			t.Fatal("accepted the document padded past MaxEnrollBytes")
		}
		if req.Token == "" || csr == nil {
			t.Fatalf("accepted a request without token or CSR: %+v", req)
		}
		again, err := v1.ParseCSR(req.CSR)
		if err != nil || !bytes.Equal(again.Raw, csr.Raw) {
			t.Fatalf("returned CSR is not the one in the request: %v", err)
		}
		req2, csr2, err := v1.DecodeEnrollRequest(bytes.NewReader(mustJSON(t, req)))
		if err != nil {
			t.Fatalf("re-encoding refused: %v", err)
		}
		if *req2 != *req || !bytes.Equal(csr2.Raw, csr.Raw) {
			t.Fatalf("round trip changed the request: %+v, %+v", req, req2)
		}
		// Logs must never show a well-formed token's secret.
		if _, secret, err := v1.SplitToken(req.Token); err == nil && strings.Contains(req.String(), secret) {
			t.Fatalf("String() leaks the token secret: %s", req.String())
		}
	})
}

func FuzzDecodeRole(f *testing.F) {
	fx := mustFixtures(f)
	worker := validRole()
	master := validRole()
	master.Role = v1.RoleMaster
	master.PKI = validPKI(fx)
	appliance := &v1.Role{APIVersion: v1.APIVersion, Kind: "Role", NodeName: "a", Role: v1.RoleAppliance, Cluster: v1.ClusterSettings{Name: "a"}}
	saOnly := validRole()
	saOnly.PKI = &v1.ClusterPKI{ServiceAccountKey: fx.caKey}
	overlap := validRole()
	overlap.Cluster.ServiceCIDR = overlap.Cluster.PodCIDR
	leaving := validRole()
	leaving.Role = v1.RoleMaster
	leaving.PKI = validPKI(fx)
	leaving.Leave = &v1.LeaveSettings{Deadline: time.Date(2025, 1, 1, 0, 10, 0, 0, time.UTC)}
	for _, r := range []*v1.Role{worker, master, appliance, saOnly, overlap, leaving} {
		f.Add(mustJSON(f, r))
	}
	workerJSON := mustJSON(f, worker)
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Role","nodeName":"n","role":"worker","cluster":{"name":"c","vrid":256}}`))
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Role","nodeName":"n","role":"worker","cluster":{"name":"c"},"updatedAt":"2025-01-01T00:00:00+01:00","peers":[]}`))
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Role","nodeName":"n","role":"worker","cluster":{"name":"c"},"etcd":{},"pki":{}}`))
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Role","nodeName":"n","role":"worker","cluster":{"name":"c"},"leave":{}}`))
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Role","nodeName":"n","role":"worker","cluster":{"name":"c"},"leave":{"deadline":"2025-01-01T00:10:00+01:00"}}`))
	f.Add([]byte(`{"cluster":{"vrid":"1"}}`))
	f.Add([]byte(`{"x":1}`))
	f.Add(append(append([]byte{}, workerJSON...), ']'))

	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := v1.DecodeRole(bytes.NewReader(data))
		if err != nil {
			if r != nil {
				t.Fatal("returned a role along with an error")
			}
			requireFieldError(t, err)
			return
		}
		if len(data) > v1.MaxRoleBytes {
			t.Fatalf("accepted %d bytes, more than MaxRoleBytes", len(data))
		}
		if _, err := v1.DecodeRole(bytes.NewReader(overLimit(data, v1.MaxRoleBytes))); err == nil {
			t.Fatal("accepted the document padded past MaxRoleBytes")
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted a role that does not validate: %v", err)
		}
		enc := mustJSON(t, r)
		r2, err := v1.DecodeRole(bytes.NewReader(enc))
		if err != nil {
			t.Fatalf("re-encoding refused: %v\n%s", err, enc)
		}
		if !semanticEqual(r, r2) {
			t.Fatalf("round trip changed the role:\n%+v\n%+v", r, r2)
		}
		if enc2 := mustJSON(t, r2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
		// Redacted must hide every key and leave the original alone.
		red := r.Redacted()
		if after := mustJSON(t, r); !bytes.Equal(enc, after) {
			t.Fatal("Redacted mutated the role")
		}
		if red.PKI != nil {
			for _, kp := range []*v1.KeyPair{red.PKI.ClusterCA, red.PKI.EtcdCA, red.PKI.FrontProxyCA} {
				if kp != nil && kp.Key != "REDACTED" {
					t.Fatalf("Redacted left a key: %q", kp.Key)
				}
			}
			if red.PKI.ServiceAccountKey != "" && red.PKI.ServiceAccountKey != "REDACTED" {
				t.Fatal("Redacted left the service account key")
			}
		}
	})
}

func FuzzDecodeStatus(f *testing.F) {
	valid := mustJSON(f, validStatus())
	f.Add(valid)
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Status","phase":"Enrolled","observedRevision":0}`))
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Status","phase":"Ready","reportedAt":"2025-01-01T00:00:00.5-07:00","addresses":[],"components":[]}`))
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Status","phase":"Ready","components":[{"name":"Etcd","healthy":true}]}`))
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Status","phase":"Ready","addresses":["1.2.3"]}`))
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Status","phase":"Left","components":[{"name":"etcd","healthy":true,"phase":"Left"}]}`))
	f.Add([]byte(`{"observedRevision":-1}`))
	f.Add([]byte(`{"phase":1}`))
	f.Add([]byte(`{"reportedAt":"yesterday"}`))
	f.Add(append(append([]byte{}, valid...), valid...))

	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := v1.DecodeStatus(bytes.NewReader(data))
		if err != nil {
			if s != nil {
				t.Fatal("returned a status along with an error")
			}
			requireFieldError(t, err)
			return
		}
		if len(data) > v1.MaxStatusBytes {
			t.Fatalf("accepted %d bytes, more than MaxStatusBytes", len(data))
		}
		if _, err := v1.DecodeStatus(bytes.NewReader(overLimit(data, v1.MaxStatusBytes))); err == nil {
			t.Fatal("accepted the document padded past MaxStatusBytes")
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted a status that does not validate: %v", err)
		}
		enc := mustJSON(t, s)
		s2, err := v1.DecodeStatus(bytes.NewReader(enc))
		if err != nil {
			t.Fatalf("re-encoding refused: %v\n%s", err, enc)
		}
		if !semanticEqual(s, s2) {
			t.Fatalf("round trip changed the status:\n%+v\n%+v", s, s2)
		}
		if enc2 := mustJSON(t, s2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
	})
}

// TestFuzzSeedsDecode makes sure the valid seeds above really are valid,
// so that the fuzzers start from documents that reach every check.
func TestFuzzSeedsDecode(t *testing.T) {
	fx := mustFixtures(t)
	b := validBootstrap(fx)
	g, err := b.EncodeGuestinfo()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v1.DecodeBootstrap([]byte(g)); err != nil {
		t.Errorf("bootstrap seed: %v", err)
	}
	if _, err := base64.StdEncoding.DecodeString(g); err != nil {
		t.Errorf("guestinfo seed is not base64: %v", err)
	}
	if _, _, err := v1.DecodeEnrollRequest(bytes.NewReader(mustJSON(t, v1.EnrollRequest{Token: fx.token, CSR: fx.csrPEM}))); err != nil {
		t.Errorf("enroll seed: %v", err)
	}
	if _, err := v1.DecodeRole(bytes.NewReader(mustJSON(t, validRole()))); err != nil {
		t.Errorf("role seed: %v", err)
	}
	if _, err := v1.DecodeStatus(bytes.NewReader(mustJSON(t, validStatus()))); err != nil {
		t.Errorf("status seed: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(mustJSON(t, validStatus()), &m); err != nil || m["phase"] != "Ready" {
		t.Errorf("status seed JSON: %v %v", err, m)
	}
}
