package kubeconfig

import (
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	data, err := New("c1", "https://198.18.10.10:8443", []byte("CA"), "harmony:admin", []byte("CERT"), []byte("KEY")).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// The fields kubectl reads, by their file names, data base64-encoded.
	for _, want := range []string{"current-context: c1", "server: https://198.18.10.10:8443",
		"certificate-authority-data: Q0E=", "client-certificate-data: Q0VSVA==", "client-key-data: S0VZ", "user: harmony:admin"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("kubeconfig lacks %q:\n%s", want, data)
		}
	}
	c, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Clusters[0].Cluster.CAData) != "CA" || string(c.Users[0].User.KeyData) != "KEY" || c.Contexts[0].Context.User != "harmony:admin" {
		t.Errorf("parsed %+v", c)
	}
	for _, bad := range []string{"clusters: [", "apiVersion: v1\nusers: [{name: u}]\n", "clusters: [{name: c}]\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}
