package main

import (
	"bytes"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// The README's example documents must be what the controller accepts.
func TestExampleDocuments(t *testing.T) {
	data, err := readDocument("../../docs/examples/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v1.DecodeClusterSpec(bytes.NewReader(data)); err != nil {
		t.Errorf("docs/examples/cluster.yaml: %v", err)
	}
	data, err = readDocument("../../docs/examples/provider.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v1.DecodeProvider(bytes.NewReader(data)); err != nil {
		t.Errorf("docs/examples/provider.yaml: %v", err)
	}
	data, err = readDocument("../../docs/examples/appliance-provider.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v1.DecodeProvider(bytes.NewReader(data)); err != nil {
		t.Errorf("docs/examples/appliance-provider.yaml: %v", err)
	}
	data, err = readDocument("../../docs/examples/ldap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v1.DecodeLDAP(bytes.NewReader(data)); err != nil {
		t.Errorf("docs/examples/ldap.yaml: %v", err)
	}
	// A typo in a field name is refused by name, not ignored.
	if _, err := v1.DecodeClusterSpec(bytes.NewReader([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Cluster","name":"a","mastres":3}`))); err == nil {
		t.Error("unknown field accepted")
	}
}
