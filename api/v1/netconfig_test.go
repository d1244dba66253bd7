package v1_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func validNetworkConfig() *v1.NetworkConfig {
	return &v1.NetworkConfig{
		APIVersion: v1.APIVersion, Kind: "NetworkConfig",
		Address: "198.18.10.21/24", Gateway: "198.18.10.1",
		DNS: []string{"198.18.10.53"}, Hostname: "w-1",
	}
}

func b64(s string) []byte { return []byte(base64.StdEncoding.EncodeToString([]byte(s))) }

func TestDecodeNetworkGuestinfo(t *testing.T) {
	want := validNetworkConfig()
	enc, err := want.EncodeGuestinfo()
	if err != nil {
		t.Fatal(err)
	}
	// vmware-rpctool's output may end in a newline.
	got, err := v1.DecodeNetworkGuestinfo([]byte(enc + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !semanticEqual(want, got) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}

	for name, tc := range map[string]struct {
		value []byte
		field string // "" for a document-level problem
		want  string
	}{
		"not base64":     {[]byte("{not base64"), "", "not base64"},
		"raw JSON":       {mustJSON(t, want), "", "not base64"},
		"empty":          {[]byte("  \n"), "", "empty"},
		"not JSON":       {b64("hello"), "", ""},
		"unknown field":  {b64(`{"apiVersion":"harmony.dev/v1","kind":"NetworkConfig","mtu":9000}`), "mtu", "unknown field"},
		"wrong kind":     {b64(`{"apiVersion":"harmony.dev/v1","kind":"Bootstrap"}`), "kind", ""},
		"bad address":    {b64(`{"apiVersion":"harmony.dev/v1","kind":"NetworkConfig","address":"198.18.10.21","gateway":"198.18.10.1","hostname":"w-1"}`), "address", "198.18.10.21"},
		"bad gateway":    {b64(`{"apiVersion":"harmony.dev/v1","kind":"NetworkConfig","address":"198.18.10.21/24","gateway":"198.18.11.1","hostname":"w-1"}`), "gateway", "198.18.11.1"},
		"bad dns":        {b64(`{"apiVersion":"harmony.dev/v1","kind":"NetworkConfig","address":"198.18.10.21/24","gateway":"198.18.10.1","dns":["x"],"hostname":"w-1"}`), "dns[0]", ""},
		"zoned dns":      {b64(`{"apiVersion":"harmony.dev/v1","kind":"NetworkConfig","address":"198.18.10.21/24","gateway":"198.18.10.1","dns":["fe80::1%x\n[Network]"],"hostname":"w-1"}`), "dns[0]", ""},
		"bad hostname":   {b64(`{"apiVersion":"harmony.dev/v1","kind":"NetworkConfig","address":"198.18.10.21/24","gateway":"198.18.10.1","hostname":"A B"}`), "hostname", ""},
		"over the limit": {bytes.Repeat([]byte("A"), v1.MaxBootstrapBytes+1), "", "larger than"},
	} {
		t.Run(name, func(t *testing.T) {
			n, err := v1.DecodeNetworkGuestinfo(tc.value)
			if err == nil || n != nil {
				t.Fatalf("got %+v, %v; want no config and an error", n, err)
			}
			var fe *v1.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %q carries no *v1.FieldError", err)
			}
			if fe.Field != tc.field {
				t.Errorf("field %q, want %q (error %q)", fe.Field, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// FuzzDecodeNetworkGuestinfo holds DecodeNetworkGuestinfo to the contract
// of every decoder of outside input (see fuzz_test.go).
func FuzzDecodeNetworkGuestinfo(f *testing.F) {
	valid := validNetworkConfig()
	enc, err := valid.EncodeGuestinfo()
	if err != nil {
		f.Fatal(err)
	}
	noDNS := *valid
	noDNS.DNS = nil
	encNoDNS, err := noDNS.EncodeGuestinfo()
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(enc))
	f.Add([]byte(enc + "\n"))
	f.Add([]byte(encNoDNS))
	f.Add(b64(`{"apiVersion":"harmony.dev/v1","kind":"NetworkConfig","address":"198.18.10.21/31","gateway":"198.18.10.20","dns":["::1"],"hostname":"n"}`))
	f.Add(b64(`{"apiVersion":"harmony.dev/v1","kind":"NetworkConfig","address":"198.18.10.21/24","gateway":"198.18.11.1","hostname":"w-1"}`))
	f.Add(b64(`{"apiVersion":"harmony.dev/v1","kind":"NetworkConfig","address":"::1/64"}`))
	f.Add(b64(`{"dns":"198.18.10.53"}`))
	f.Add(b64(`{}{}`))
	f.Add(mustJSON(f, valid))
	f.Add([]byte(enc[:len(enc)/2]))
	f.Add([]byte("!!"))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := v1.DecodeNetworkGuestinfo(data)
		if err != nil {
			if n != nil {
				t.Fatal("returned a config along with an error")
			}
			requireFieldError(t, err)
			return
		}
		if len(data) > v1.MaxBootstrapBytes {
			t.Fatalf("accepted %d bytes, more than MaxBootstrapBytes", len(data))
		}
		if _, err := v1.DecodeNetworkGuestinfo(overLimit(data, v1.MaxBootstrapBytes)); err == nil {
			t.Fatal("accepted the value padded past MaxBootstrapBytes")
		}
		if err := n.Validate(); err != nil {
			t.Fatalf("accepted a config that does not validate: %v", err)
		}
		g, err := n.EncodeGuestinfo()
		if err != nil {
			t.Fatal(err)
		}
		n2, err := v1.DecodeNetworkGuestinfo([]byte(g))
		if err != nil {
			t.Fatalf("re-encoding refused: %v\n%s", err, g)
		}
		if !semanticEqual(n, n2) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", n, n2)
		}
		if g2, _ := n2.EncodeGuestinfo(); g2 != g {
			t.Fatalf("encoding is not stable:\n%s\n%s", g, g2)
		}
	})
}
