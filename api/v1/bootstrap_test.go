package v1_test

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		tb.Fatalf("marshal: %v", err)
	}
	return data
}

func TestDecodeBootstrap(t *testing.T) {
	f := mustFixtures(t)
	valid := mustJSON(t, validBootstrap(f))

	tests := []struct {
		name  string
		mut   func(b *v1.Bootstrap) // applied to validBootstrap; ignored if raw is set
		raw   []byte
		field string // okField, or the field the *FieldError must name
	}{
		{name: "valid", mut: func(*v1.Bootstrap) {}, field: okField},
		{name: "pin only", mut: func(b *v1.Bootstrap) { b.CABundle = "" }, field: okField},
		{name: "bundle only", mut: func(b *v1.Bootstrap) { b.CAPin = "" }, field: okField},
		// The agent clears the token once enrolled and reads the file again.
		{name: "token already used", mut: func(b *v1.Bootstrap) { b.Token = "" }, field: okField},
		{name: "bundle of two, pin of the second", mut: func(b *v1.Bootstrap) {
			b.CABundle = f.otherCAPEM + f.caPEM
		}, field: okField},
		{name: "surrounding whitespace", raw: []byte("\n\t " + string(valid) + "\n"), field: okField},
		{name: "base64", raw: []byte(base64.StdEncoding.EncodeToString(valid)), field: okField},
		{name: "base64 with trailing newline", raw: []byte(base64.StdEncoding.EncodeToString(valid) + "\n"), field: okField},
		{name: "exactly the size limit", raw: padTo(t, valid, v1.MaxBootstrapBytes), field: okField},

		{name: "wrong apiVersion", mut: func(b *v1.Bootstrap) { b.APIVersion = "harmony.dev/v2" }, field: "apiVersion"},
		{name: "wrong kind", mut: func(b *v1.Bootstrap) { b.Kind = "Role" }, field: "kind"},
		{name: "no controllers", mut: func(b *v1.Bootstrap) { b.Controllers = nil }, field: "controllers"},
		{name: "too many controllers", mut: func(b *v1.Bootstrap) {
			b.Controllers = nil
			for i := range 17 {
				b.Controllers = append(b.Controllers, fmt.Sprintf("https://c%d.example.com", i))
			}
		}, field: "controllers"},
		{name: "sixteen controllers", mut: func(b *v1.Bootstrap) {
			b.Controllers = nil
			for i := range 16 {
				b.Controllers = append(b.Controllers, fmt.Sprintf("https://c%d.example.com", i))
			}
		}, field: okField},
		{name: "http controller", mut: func(b *v1.Bootstrap) { b.Controllers[0] = "http://controller-1.example.com:8443" }, field: "controllers[0]"},
		{name: "controller with credentials", mut: func(b *v1.Bootstrap) { b.Controllers[1] = "https://admin:secret@10.0.0.2" }, field: "controllers[1]"},
		{name: "controller with path", mut: func(b *v1.Bootstrap) { b.Controllers[1] = "https://10.0.0.2/api" }, field: "controllers[1]"},
		{name: "controller with query", mut: func(b *v1.Bootstrap) { b.Controllers[0] = "https://c.example.com?x=1" }, field: "controllers[0]"},
		{name: "controller with fragment", mut: func(b *v1.Bootstrap) { b.Controllers[0] = "https://c.example.com#x" }, field: "controllers[0]"},
		{name: "controller without host", mut: func(b *v1.Bootstrap) { b.Controllers[0] = "https:///" }, field: "controllers[0]"},
		{name: "controller not a URL", mut: func(b *v1.Bootstrap) { b.Controllers[0] = "https://[::1" }, field: "controllers[0]"},
		{name: "no CA at all", mut: func(b *v1.Bootstrap) { b.CABundle, b.CAPin = "", "" }, field: "caBundle"},
		{name: "bundle not PEM", mut: func(b *v1.Bootstrap) { b.CABundle, b.CAPin = "not a certificate", "" }, field: "caBundle"},
		{name: "bundle holds a private key", mut: func(b *v1.Bootstrap) { b.CABundle, b.CAPin = f.caPEM+f.caKey, "" }, field: "caBundle"},
		{name: "bundle with trailing garbage", mut: func(b *v1.Bootstrap) { b.CABundle, b.CAPin = f.caPEM+"garbage", "" }, field: "caBundle"},
		{name: "bundle with corrupt DER", mut: func(b *v1.Bootstrap) {
			b.CABundle = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
			b.CAPin = ""
		}, field: "caBundle"},
		{name: "pin does not match bundle", mut: func(b *v1.Bootstrap) { b.CAPin = v1.CAPin(f.otherCA) }, field: "caPin"},
		{name: "pin in uppercase", mut: func(b *v1.Bootstrap) {
			b.CABundle, b.CAPin = "", "sha256:"+strings.ToUpper(strings.TrimPrefix(f.caPin, "sha256:"))
		}, field: "caPin"},
		{name: "pin without prefix", mut: func(b *v1.Bootstrap) { b.CABundle, b.CAPin = "", strings.TrimPrefix(f.caPin, "sha256:") }, field: "caPin"},
		{name: "pin too short", mut: func(b *v1.Bootstrap) { b.CABundle, b.CAPin = "", f.caPin[:len(f.caPin)-1] }, field: "caPin"},
		{name: "empty node name", mut: func(b *v1.Bootstrap) { b.NodeName = "" }, field: "nodeName"},
		{name: "uppercase node name", mut: func(b *v1.Bootstrap) { b.NodeName = "Node-1" }, field: "nodeName"},
		{name: "node name with underscore", mut: func(b *v1.Bootstrap) { b.NodeName = "node_1" }, field: "nodeName"},
		{name: "node name too long", mut: func(b *v1.Bootstrap) {
			b.NodeName = strings.Repeat(strings.Repeat("a", 63)+".", 4)[:254]
		}, field: "nodeName"},
		{name: "token without dot", mut: func(b *v1.Bootstrap) { b.Token = strings.Replace(f.token, ".", "", 1) }, field: "token"},
		{name: "token in uppercase", mut: func(b *v1.Bootstrap) { b.Token = strings.ToUpper(f.token) }, field: "token"},
		{name: "token secret too short", mut: func(b *v1.Bootstrap) { b.Token = f.token[:len(f.token)-1] }, field: "token"},

		{name: "unknown field", raw: []byte(`{"apiVersion":"harmony.dev/v1","kind":"Bootstrap","role":"master"}`), field: "role"},
		{name: "controllers as a string", raw: []byte(`{"apiVersion":"harmony.dev/v1","controllers":"https://c"}`), field: "controllers"},
		{name: "nodeName as a number", raw: []byte(`{"nodeName":7}`), field: "nodeName"},
		{name: "trailing data", raw: append(append([]byte{}, valid...), `{}`...), field: ""},
		{name: "two documents in base64", raw: []byte(base64.StdEncoding.EncodeToString(append(append([]byte{}, valid...), valid...))), field: ""},
		{name: "truncated JSON", raw: valid[:len(valid)-1], field: ""},
		{name: "empty", raw: []byte(" \n"), field: ""},
		{name: "neither JSON nor base64", raw: []byte("apiVersion: harmony.dev/v1"), field: ""},
		{name: "base64 of garbage", raw: []byte(base64.StdEncoding.EncodeToString([]byte("hello"))), field: ""},
		{name: "JSON array", raw: []byte(`[]`), field: ""},
		// Whitespace padding would be trimmed, so only the limit refuses it.
		{name: "one byte over the size limit", raw: padTo(t, valid, v1.MaxBootstrapBytes+1), field: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.raw
			if data == nil {
				b := validBootstrap(f)
				tc.mut(b)
				data = mustJSON(t, b)
			}
			got, err := v1.DecodeBootstrap(data)
			checkResult(t, err, tc.field)
			if err != nil {
				if got != nil {
					t.Errorf("returned a document along with error %v", err)
				}
				return
			}
			if err := got.Validate(); err != nil {
				t.Errorf("decoded document does not validate: %v", err)
			}
		})
	}
}

// TestDecodeBootstrapFields checks that decoding keeps every field, in both
// the JSON and the guestinfo (base64) form.
func TestDecodeBootstrapFields(t *testing.T) {
	f := mustFixtures(t)
	want := validBootstrap(f)
	enc, err := want.EncodeGuestinfo()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := base64.StdEncoding.DecodeString(enc); err != nil {
		t.Fatalf("EncodeGuestinfo is not base64: %v", err)
	}
	for name, data := range map[string][]byte{"json": mustJSON(t, want), "guestinfo": []byte(enc)} {
		got, err := v1.DecodeBootstrap(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded %+v, want %+v", name, got, want)
		}
	}
}

// TestOversizeErrorIsFieldError checks the size refusal is also a
// *FieldError, with no field, as the package documents.
func TestOversizeErrorIsFieldError(t *testing.T) {
	_, err := v1.DecodeBootstrap(make([]byte, v1.MaxBootstrapBytes+1))
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v, want a size refusal", err)
	}
	if got := fieldOf(t, err); got != "" {
		t.Errorf("field = %q, want none", got)
	}
}

func TestValidateControllerURL(t *testing.T) {
	tests := []struct {
		url string
		ok  bool
	}{
		{url: "https://c.example.com", ok: true},
		{url: "https://c.example.com/", ok: true},
		{url: "https://c.example.com:8443", ok: true},
		{url: "https://10.0.0.1:8443", ok: true},
		{url: "https://[fd00::1]:8443", ok: true},
		{url: "http://c.example.com"},
		{url: "ftp://c.example.com"},
		{url: "c.example.com"},
		{url: "//c.example.com"},
		{url: "https:c.example.com"},
		{url: "https://"},
		{url: "https://:8443"},
		{url: "https://user@c.example.com"},
		{url: "https://user:pass@c.example.com"},
		{url: "https://c.example.com/api"},
		{url: "https://c.example.com//"},
		{url: "https://c.example.com?a=b"},
		{url: "https://c.example.com#frag"},
		{url: "https://c.example.com/%2F"},
		{url: "https://[::1"},
		{url: ""},
		// The agent joins base and path as strings
		// (agent/controlclient: TrimSuffix(base, "/") + path), so an
		// empty query or fragment swallows the API path.
		{url: "https://c.example.com?"},
		{url: "https://c.example.com#"},
		{url: "https://c.example.com:99999"},
		{url: "https://c.example.com:0"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			err := v1.ValidateControllerURL(tc.url)
			if tc.ok != (err == nil) {
				t.Fatalf("ValidateControllerURL(%q) = %v, want ok=%v", tc.url, err, tc.ok)
			}
		})
	}
}

func TestValidateNodeName(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	name253 := label63 + "." + label63 + "." + label63 + "." + strings.Repeat("b", 61)
	tests := []struct {
		name string
		ok   bool
	}{
		{"node-1", true},
		{"n", true},
		{"0", true},
		{"node-1.example.com", true},
		{label63, true},
		{name253, true},
		{name253 + "b", false},
		{label63 + "a", false},
		{"", false},
		{"Node-1", false},
		{"node_1", false},
		{"-node", false},
		{"node-", false},
		{"node..1", false},
		{".node", false},
		{"node.", false},
		{"nöde", false},
		{"node 1", false},
	}
	for _, tc := range tests {
		if err := v1.ValidateNodeName(tc.name); tc.ok != (err == nil) {
			t.Errorf("ValidateNodeName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestSplitToken(t *testing.T) {
	id := "0123456789abcdef"
	secret := strings.Repeat("fedcba9876543210", 4)
	gotID, gotSecret, err := v1.SplitToken(id + "." + secret)
	if err != nil || gotID != id || gotSecret != secret {
		t.Fatalf("SplitToken = %q, %q, %v; want %q, %q, nil", gotID, gotSecret, err, id, secret)
	}
	for _, bad := range []string{
		"",
		id,
		id + ".",
		"." + secret,
		id + secret,
		id + "." + secret + "0",
		id[1:] + "." + secret,
		id + "0." + secret,
		strings.ToUpper(id) + "." + secret,
		id + "." + strings.ToUpper(secret),
		"0123456789abcdeg." + secret,
		id + "." + secret + "\n",
		" " + id + "." + secret,
		id + ":" + secret,
	} {
		if i, s, err := v1.SplitToken(bad); err == nil || i != "" || s != "" {
			t.Errorf("SplitToken(%q) = %q, %q, %v; want an error", bad, i, s, err)
		}
	}
}

func TestCAPin(t *testing.T) {
	f := mustFixtures(t)
	// The pin is kubeadm's discovery hash: SHA-256 of the DER
	// SubjectPublicKeyInfo, not of the whole certificate.
	spki, err := x509.MarshalPKIXPublicKey(f.ca.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	want := "sha256:" + hex.EncodeToString(sum[:])
	if got := v1.CAPin(f.ca); got != want {
		t.Errorf("CAPin = %q, want %q", got, want)
	}
	if v1.CAPin(f.ca) == v1.CAPin(f.otherCA) {
		t.Error("two CAs with different keys have the same pin")
	}
}

func TestPinMatchesAny(t *testing.T) {
	f := mustFixtures(t)
	pin := v1.CAPin(f.ca)
	tests := []struct {
		name  string
		pin   string
		certs []*x509.Certificate
		want  bool
	}{
		{"only cert", pin, []*x509.Certificate{f.ca}, true},
		{"second cert", pin, []*x509.Certificate{f.otherCA, f.ca}, true},
		{"other cert", pin, []*x509.Certificate{f.otherCA}, false},
		{"no certs", pin, nil, false},
		{"empty pin", "", []*x509.Certificate{f.ca}, false},
		{"uppercase pin", strings.ToUpper(pin), []*x509.Certificate{f.ca}, false},
		{"bare hex", strings.TrimPrefix(pin, "sha256:"), []*x509.Certificate{f.ca}, false},
	}
	for _, tc := range tests {
		if got := v1.PinMatchesAny(tc.pin, tc.certs); got != tc.want {
			t.Errorf("%s: PinMatchesAny = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestParseCertificatesPEM(t *testing.T) {
	f := mustFixtures(t)
	certs, err := v1.ParseCertificatesPEM([]byte(f.caPEM + f.otherCAPEM))
	if err != nil {
		t.Fatal(err)
	}
	if len(certs) != 2 || !certs[0].Equal(f.ca) || !certs[1].Equal(f.otherCA) {
		t.Fatalf("parsed %d certificates, want the CA and the other CA in order", len(certs))
	}
	if got := string(v1.EncodeCertificatesPEM(certs...)); got != f.caPEM+f.otherCAPEM {
		t.Errorf("EncodeCertificatesPEM does not invert ParseCertificatesPEM")
	}
	for name, bad := range map[string]string{
		"empty":          "",
		"no PEM":         "hello",
		"private key":    f.caKey,
		"cert then key":  f.caPEM + f.caKey,
		"trailing text":  f.caPEM + "x",
		"corrupt DER":    "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
		"unterminated":   strings.TrimSuffix(f.caPEM, "-----END CERTIFICATE-----\n"),
		"second corrupt": f.caPEM + "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
	} {
		if _, err := v1.ParseCertificatesPEM([]byte(bad)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
