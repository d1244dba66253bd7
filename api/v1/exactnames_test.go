package v1_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Two readers of one document must read the same document. encoding/json
// alone matches a key to a field whatever its case ("ROLE" sets role) and
// keeps the last of a key given twice; a proxy, an audit log or another
// JSON library may read the first, or neither. Each is refused, naming
// the key, at the top of a document and deep inside one.
func TestKeysMustMatchExactlyAndOnce(t *testing.T) {
	role := string(mustJSON(t, validRole()))
	status := string(mustJSON(t, validStatus()))
	for _, tc := range []struct {
		name, doc, field, problem string
		decode                    func(string) error
	}{
		{"a top-level key in another case", strings.Replace(role, `"role":"worker"`, `"ROLE":"worker"`, 1),
			"ROLE", `names are case-sensitive: "role"`, decodeRole},
		{"a nested key in another case", strings.Replace(role, `"vip":`, `"Vip":`, 1),
			"cluster.Vip", `names are case-sensitive: "vip"`, decodeRole},
		{"a key in an object of a list in another case", strings.Replace(role, `"name":"master-2"`, `"Name":"master-2"`, 1),
			"peers[1].Name", `names are case-sensitive: "name"`, decodeRole},
		{"a key given twice", strings.Replace(role, `"role":"worker"`, `"role":"master","role":"worker"`, 1),
			"role", "given twice", decodeRole},
		{"a nested key given twice", strings.Replace(role, `"vip":"10.0.0.100"`, `"vip":"10.0.0.100","vip":"10.0.0.200"`, 1),
			"cluster.vip", "given twice", decodeRole},
		{"a key given twice in a status", strings.Replace(status, `"phase":`, `"phase":"Failed","phase":`, 1),
			"phase", "given twice", decodeStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.doc == role || tc.doc == status {
				t.Fatal("the test document was not changed")
			}
			err := tc.decode(tc.doc)
			var fe *v1.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Problem, tc.problem) {
				t.Errorf("got %v, want field %q: ...%s", err, tc.field, tc.problem)
			}
		})
	}
	// The documents as they are decode.
	if err := decodeRole(role); err != nil {
		t.Fatalf("the valid role: %v", err)
	}
	if err := decodeStatus(status); err != nil {
		t.Fatalf("the valid status: %v", err)
	}
}

func decodeRole(doc string) error {
	_, err := v1.DecodeRole(bytes.NewReader([]byte(doc)))
	return err
}

func decodeStatus(doc string) error {
	_, err := v1.DecodeStatus(bytes.NewReader([]byte(doc)))
	return err
}
