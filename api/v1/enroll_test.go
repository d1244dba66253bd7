package v1_test

import (
	"bytes"
	"encoding/pem"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func TestParseCSR(t *testing.T) {
	f := mustFixtures(t)
	block, _ := pem.Decode([]byte(f.csrPEM))
	tests := []struct {
		name  string
		text  string
		field string
	}{
		{name: "valid", text: f.csrPEM, field: okField},
		{name: "valid with trailing newlines", text: f.csrPEM + "\n\n", field: okField},
		{name: "empty", text: "", field: "csr"},
		{name: "not PEM", text: "MIIB", field: "csr"},
		{name: "certificate instead", text: f.leafPEM, field: "csr"},
		{name: "legacy label", text: string(pem.EncodeToMemory(&pem.Block{Type: "NEW CERTIFICATE REQUEST", Bytes: block.Bytes})), field: "csr"},
		{name: "two CSRs", text: f.csrPEM + f.csrPEM, field: "csr"},
		{name: "CSR and key", text: f.csrPEM + f.leafKey, field: "csr"},
		{name: "trailing text", text: f.csrPEM + "x", field: "csr"},
		{name: "corrupt DER", text: v1.EncodeCSR([]byte{0x30, 0x03, 0x02, 0x01, 0x01}), field: "csr"},
		{name: "truncated DER", text: v1.EncodeCSR(block.Bytes[:len(block.Bytes)-4]), field: "csr"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			csr, err := v1.ParseCSR(tc.text)
			checkResult(t, err, tc.field)
			if err == nil && !bytes.Equal(csr.Raw, block.Bytes) {
				t.Error("parsed CSR is not the one given")
			}
		})
	}
}

func TestDecodeEnrollRequest(t *testing.T) {
	f := mustFixtures(t)
	valid := mustJSON(t, v1.EnrollRequest{Token: f.token, CSR: f.csrPEM})
	tests := []struct {
		name  string
		body  []byte
		field string
	}{
		{name: "valid", body: valid, field: okField},
		{name: "exactly the size limit", body: padTo(t, valid, v1.MaxEnrollBytes), field: okField},
		{name: "no token", body: mustJSON(t, v1.EnrollRequest{CSR: f.csrPEM}), field: "token"},
		{name: "no CSR", body: mustJSON(t, v1.EnrollRequest{Token: f.token}), field: "csr"},
		{name: "CSR is a certificate", body: mustJSON(t, v1.EnrollRequest{Token: f.token, CSR: f.leafPEM}), field: "csr"},
		{name: "unknown field", body: []byte(`{"token":"t","csr":"c","nodeName":"n"}`), field: "nodeName"},
		{name: "token as a number", body: []byte(`{"token":1,"csr":""}`), field: "token"},
		{name: "trailing data", body: append(append([]byte{}, valid...), valid...), field: ""},
		{name: "empty", body: nil, field: ""},
		{name: "one byte over the size limit", body: padTo(t, valid, v1.MaxEnrollBytes+1), field: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, csr, err := v1.DecodeEnrollRequest(bytes.NewReader(tc.body))
			checkResult(t, err, tc.field)
			if err != nil {
				if req != nil || csr != nil {
					t.Error("returned values along with an error")
				}
				return
			}
			if req.Token != f.token || req.CSR != f.csrPEM || csr.Subject.CommonName != "node-1" {
				t.Errorf("decoded %+v with CN %q", req, csr.Subject.CommonName)
			}
		})
	}
}

func TestDecodeRenewRequest(t *testing.T) {
	f := mustFixtures(t)
	csr, err := v1.DecodeRenewRequest(bytes.NewReader(mustJSON(t, v1.RenewRequest{CSR: f.csrPEM})))
	if err != nil || csr.Subject.CommonName != "node-1" {
		t.Fatalf("valid renewal: %v", err)
	}
	for name, tc := range map[string]struct{ body, field string }{
		"no CSR":        {`{}`, "csr"},
		"token present": {`{"csr":"x","token":"t"}`, "token"},
		"too large":     {`{}` + strings.Repeat(" ", v1.MaxEnrollBytes), ""},
	} {
		_, err := v1.DecodeRenewRequest(strings.NewReader(tc.body))
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if got := fieldOf(t, err); got != tc.field {
			t.Errorf("%s: field %q, want %q", name, got, tc.field)
		}
	}
}

func TestDecodeScraperCertRequest(t *testing.T) {
	f := mustFixtures(t)
	tests := []struct {
		name  string
		req   v1.ScraperCertRequest
		field string
	}{
		{name: "valid", req: v1.ScraperCertRequest{Name: "prometheus", CSR: f.csrPEM}, field: okField},
		{name: "no name", req: v1.ScraperCertRequest{CSR: f.csrPEM}, field: "name"},
		{name: "uppercase name", req: v1.ScraperCertRequest{Name: "Prometheus", CSR: f.csrPEM}, field: "name"},
		{name: "no CSR", req: v1.ScraperCertRequest{Name: "prometheus"}, field: "csr"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := v1.DecodeScraperCertRequest(bytes.NewReader(mustJSON(t, tc.req)))
			checkResult(t, err, tc.field)
		})
	}
}

// TestEnrollRequestString checks that request logs never print the secret
// half of a token.
func TestEnrollRequestString(t *testing.T) {
	f := mustFixtures(t)
	id, secret, err := v1.SplitToken(f.token)
	if err != nil {
		t.Fatal(err)
	}
	got := (&v1.EnrollRequest{Token: f.token, CSR: f.csrPEM}).String()
	if strings.Contains(got, secret) || !strings.Contains(got, id) {
		t.Errorf("String() = %q, want the token id %q and not the secret", got, id)
	}
	bad := (&v1.EnrollRequest{Token: "not-a-token-" + secret}).String()
	if strings.Contains(bad, secret) {
		t.Errorf("String() of a malformed token leaks it: %q", bad)
	}
}
