package v1_test

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func validNodeSpec() *v1.NodeSpec {
	return &v1.NodeSpec{
		Name:     "node-1",
		Cluster:  "prod",
		Role:     v1.RoleWorker,
		IPs:      []string{"10.0.0.11"},
		DNSNames: []string{"node-1.example.com"},
		TokenTTL: "30m",
	}
}

func TestDecodeNodeSpec(t *testing.T) {
	valid := mustJSON(t, validNodeSpec())
	n := func(k int, f string) []string {
		var s []string
		for i := range k {
			s = append(s, fmt.Sprintf(f, i))
		}
		return s
	}
	tests := []struct {
		name  string
		mut   func(s *v1.NodeSpec)
		raw   []byte
		field string
		ttl   time.Duration // checked when field is okField
	}{
		{name: "valid", mut: func(*v1.NodeSpec) {}, field: okField, ttl: 30 * time.Minute},
		{name: "default TTL", mut: func(s *v1.NodeSpec) { s.TokenTTL = "" }, field: okField, ttl: v1.DefaultTokenTTL},
		{name: "32 IPs and 32 names", mut: func(s *v1.NodeSpec) {
			s.IPs, s.DNSNames = n(32, "10.0.0.%d"), n(32, "n%d")
		}, field: okField, ttl: 30 * time.Minute},
		{name: "exactly the size limit", raw: padTo(t, valid, v1.MaxAdminBytes), field: okField, ttl: 30 * time.Minute},

		{name: "empty name", mut: func(s *v1.NodeSpec) { s.Name = "" }, field: "name"},
		{name: "uppercase name", mut: func(s *v1.NodeSpec) { s.Name = "NODE-1" }, field: "name"},
		{name: "cluster with dot", mut: func(s *v1.NodeSpec) { s.Cluster = "a.b" }, field: "cluster"},
		{name: "empty cluster", mut: func(s *v1.NodeSpec) { s.Cluster = "" }, field: "cluster"},
		{name: "bad role", mut: func(s *v1.NodeSpec) { s.Role = "Worker" }, field: "role"},
		{name: "no IPs", mut: func(s *v1.NodeSpec) { s.IPs = nil }, field: "ips"},
		{name: "33 IPs", mut: func(s *v1.NodeSpec) { s.IPs = n(33, "10.0.0.%d") }, field: "ips"},
		{name: "33 DNS names", mut: func(s *v1.NodeSpec) { s.DNSNames = n(33, "n%d") }, field: "dnsNames"},
		{name: "bad IP", mut: func(s *v1.NodeSpec) { s.IPs = []string{"10.0.0.1", "10.0.0"} }, field: "ips[1]"},
		{name: "unspecified IPv4", mut: func(s *v1.NodeSpec) { s.IPs = []string{"0.0.0.0"} }, field: "ips[0]"},
		{name: "unspecified IPv6", mut: func(s *v1.NodeSpec) { s.IPs = []string{"::"} }, field: "ips[0]"},
		{name: "multicast", mut: func(s *v1.NodeSpec) { s.IPs = []string{"10.0.0.1", "224.0.0.18"} }, field: "ips[1]"},
		{name: "bad DNS name", mut: func(s *v1.NodeSpec) { s.DNSNames = []string{"node-1.example.com", "-x"} }, field: "dnsNames[1]"},
		{name: "bad TTL", mut: func(s *v1.NodeSpec) { s.TokenTTL = "1 day" }, field: "tokenTTL"},
		{name: "TTL too long", mut: func(s *v1.NodeSpec) { s.TokenTTL = "169h" }, field: "tokenTTL"},

		{name: "unknown field", raw: []byte(`{"name":"n","token":"x"}`), field: "token"},
		{name: "ips as a string", raw: []byte(`{"name":"n","ips":"10.0.0.1"}`), field: "ips"},
		{name: "trailing data", raw: append(append([]byte{}, valid...), "{"...), field: ""},
		{name: "one byte over the size limit", raw: padTo(t, valid, v1.MaxAdminBytes+1), field: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.raw
			if data == nil {
				s := validNodeSpec()
				tc.mut(s)
				data = mustJSON(t, s)
			}
			_, ttl, err := v1.DecodeNodeSpec(bytes.NewReader(data))
			checkResult(t, err, tc.field)
			if err == nil && ttl != tc.ttl {
				t.Errorf("ttl = %v, want %v", ttl, tc.ttl)
			}
		})
	}
}

// TestNodeSpecNormalisesIPs checks that Validate stores each address in
// its canonical form, so that certificate SANs and inventory lookups
// compare equal.
func TestNodeSpecNormalisesIPs(t *testing.T) {
	s := validNodeSpec()
	s.IPs = []string{"2001:0DB8:0000:0000:0000:0000:0000:0001", "10.0.0.11", "FD00::A", "::ffff:10.0.0.12"}
	if _, err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{"2001:db8::1", "10.0.0.11", "fd00::a", "::ffff:10.0.0.12"}
	if !reflect.DeepEqual(s.IPs, want) {
		t.Errorf("IPs = %q, want %q", s.IPs, want)
	}

	// DecodeNodeSpec returns the normalised spec too.
	got, _, err := v1.DecodeNodeSpec(strings.NewReader(`{"name":"n","cluster":"c","role":"master","ips":["FD00:0:0::1"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.IPs[0] != "fd00::1" {
		t.Errorf("decoded IP = %q, want fd00::1", got.IPs[0])
	}
}

func TestParseTokenTTL(t *testing.T) {
	tests := []struct {
		text string
		want time.Duration // 0: must fail
	}{
		{"", v1.DefaultTokenTTL},
		{"1s", time.Second},
		{"30m", 30 * time.Minute},
		{"2h", 2 * time.Hour},
		{"168h", 7 * 24 * time.Hour},
		{"167h59m59s", 7*24*time.Hour - time.Second},
		{"999ms", 0},
		{"0", 0},
		{"0s", 0},
		{"-1h", 0},
		{"168h0m0.001s", 0},
		{"169h", 0},
		{"1d", 0},
		{"30", 0},
		{"forever", 0},
		{"9999999999999h", 0},
	}
	for _, tc := range tests {
		got, err := v1.ParseTokenTTL(tc.text, "spec.ttl")
		if tc.want == 0 {
			if err == nil {
				t.Errorf("ParseTokenTTL(%q) = %v, want an error", tc.text, got)
				continue
			}
			if f := fieldOf(t, err); f != "spec.ttl" {
				t.Errorf("ParseTokenTTL(%q) names field %q, want the given one", tc.text, f)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseTokenTTL(%q) = %v, %v; want %v", tc.text, got, err, tc.want)
		}
	}
}

func TestDecodeTokenRequest(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		field string
		ttl   time.Duration
		pin   bool
	}{
		{name: "empty body means defaults", body: "", field: okField, ttl: v1.DefaultTokenTTL},
		{name: "empty object", body: "{}", field: okField, ttl: v1.DefaultTokenTTL},
		{name: "TTL and pin", body: `{"tokenTTL":"10m","caPinOnly":true}`, field: okField, ttl: 10 * time.Minute, pin: true},
		{name: "bad TTL", body: `{"tokenTTL":"10 minutes"}`, field: "tokenTTL"},
		{name: "TTL too short", body: `{"tokenTTL":"10ms"}`, field: "tokenTTL"},
		{name: "unknown field", body: `{"ttl":"10m"}`, field: "ttl"},
		{name: "pin as a string", body: `{"caPinOnly":"yes"}`, field: "caPinOnly"},
		{name: "trailing data", body: `{} {}`, field: ""},
		{name: "too large", body: "{}" + strings.Repeat(" ", v1.MaxAdminBytes-1), field: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, ttl, err := v1.DecodeTokenRequest(strings.NewReader(tc.body))
			checkResult(t, err, tc.field)
			if err != nil {
				return
			}
			if ttl != tc.ttl || req.CAPinOnly != tc.pin {
				t.Errorf("got ttl %v, pin %v; want %v, %v", ttl, req.CAPinOnly, tc.ttl, tc.pin)
			}
		})
	}
}

func TestDecodeRoleList(t *testing.T) {
	role := func(name string) v1.Role {
		r := validRole()
		r.NodeName = name
		return *r
	}
	list := func(roles ...v1.Role) []byte { return mustJSON(t, v1.RoleList{Items: roles}) }
	badVIP := role("node-2")
	badVIP.Cluster.VIP = "x"
	badKind := role("node-2")
	badKind.Kind = ""

	tests := []struct {
		name  string
		body  []byte
		field string
	}{
		{name: "two roles", body: list(role("node-1"), role("node-2")), field: okField},
		{name: "no items", body: list(), field: "items"},
		{name: "empty object", body: []byte(`{}`), field: "items"},
		{name: "duplicate node", body: list(role("node-1"), role("node-1")), field: "items[1].nodeName"},
		{name: "duplicate after a distinct one", body: list(role("a"), role("b"), role("a")), field: "items[2].nodeName"},
		{name: "invalid item is prefixed", body: list(role("node-1"), badVIP), field: "items[1].cluster.vip"},
		{name: "top-level field of an item", body: list(badKind), field: "items[0].kind"},
		{name: "unknown field", body: []byte(`{"items":[],"dryRun":true}`), field: "dryRun"},
		{name: "items as an object", body: []byte(`{"items":{}}`), field: "items"},
		{name: "trailing data", body: append(list(role("node-1")), "x"...), field: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v1.DecodeRoleList(bytes.NewReader(tc.body))
			checkResult(t, err, tc.field)
			if err == nil && len(got.Items) != 2 {
				t.Errorf("decoded %d items, want 2", len(got.Items))
			}
		})
	}
}

// TestDecodeRoleListTooLarge streams the body, so that the 64 MiB limit is
// tested without holding the input in memory twice.
func TestDecodeRoleListTooLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 64 MiB")
	}
	r := validRole()
	doc := mustJSON(t, v1.RoleList{Items: []v1.Role{*r}})
	const limit = 64 * v1.MaxRoleBytes
	for _, tc := range []struct {
		size int64
		ok   bool
	}{{limit, true}, {limit + 1, false}} {
		body := io.MultiReader(bytes.NewReader(doc), io.LimitReader(spaces{}, tc.size-int64(len(doc))))
		_, err := v1.DecodeRoleList(body)
		if tc.ok {
			if err != nil {
				t.Errorf("size %d: %v", tc.size, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("size %d: err = %v, want a size refusal", tc.size, err)
		}
	}
}

// spaces is an endless reader of JSON whitespace.
type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}
