package bootstrap_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/harmonykaas/harmony/agent/bootstrap"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// FuzzParseOVFEnvProperty checks ParseOVFEnvProperty on arbitrary documents
// and keys: it must not panic, must refuse a document over the size limit,
// must return no value with an error, and a value it finds must be exactly
// what a freshly written environment holding that value gives back, and
// must turn into an error when the key appears twice.
func FuzzParseOVFEnvProperty(f *testing.F) {
	key := v1.OVFPropertyKey
	enc := docBase64(f, testDoc(f, "node-1"))
	seeds := []struct {
		doc []byte
		key string
	}{
		{ovfEnv([2]string{"guestinfo.hostname", "node-1"}, [2]string{key, enc}), key},
		{ovfEnv([2]string{"hostname", "node-1"}), key},
		{ovfEnv([2]string{key, ""}), key},
		{ovfEnv([2]string{key, "a"}, [2]string{key, "b"}), key},
		{ovfEnv([2]string{key, "&<>\"'\t\n"}), key},
		{ovfEnv([2]string{"k", "v"}), "k"},
		{ovfEnvRaw(`<Property oe:key="harmony.bootstrap" oe:value="&#x41;&amp;"/>`), key},
		{ovfEnvRaw(`<Property key="harmony.bootstrap" value="unprefixed"/>`), key},
		{ovfEnvRaw(`<Property oe:key="harmony.bootstrap" oe:value="&bogus;"/>`), key},
		{[]byte(`<Environment xmlns="urn:other"/>`), key},
		{[]byte(`<Environment`), key},
		{[]byte("not xml"), key},
		{nil, ""},
	}
	for _, s := range seeds {
		f.Add(s.doc, s.key)
	}

	// padded is a reusable buffer of maxOVFEnvBytes+1 spaces, so that the
	// size check costs no allocation per input.
	var mu sync.Mutex
	padded := bytes.Repeat([]byte(" "), maxOVFEnvBytes+1)

	f.Fuzz(func(t *testing.T, doc []byte, key string) {
		value, err := bootstrap.ParseOVFEnvProperty(doc, key)
		if err != nil {
			if value != "" {
				t.Fatalf("returned %q along with error %v", value, err)
			}
			return
		}
		if len(doc) > maxOVFEnvBytes {
			t.Fatalf("accepted %d bytes, more than the limit", len(doc))
		}
		// The same document padded past the limit must be refused; the
		// decoder stops after the root element, so only the size counts.
		mu.Lock()
		copy(padded, doc)
		_, perr := bootstrap.ParseOVFEnvProperty(padded, key)
		copy(padded, bytes.Repeat([]byte(" "), len(doc)))
		mu.Unlock()
		if perr == nil {
			t.Fatal("accepted a document over the size limit")
		}
		if value == "" {
			return
		}
		// A found value came out of the document's attributes, so both it
		// and the key are legal XML text that a writer can put back.
		fresh := ovfEnv([2]string{"other", "x"}, [2]string{key, value})
		got, err := bootstrap.ParseOVFEnvProperty(fresh, key)
		if err != nil || got != value {
			t.Fatalf("rewritten environment gives %q, %v; want %q\n%s", got, err, value, fresh)
		}
		dup := ovfEnv([2]string{key, value}, [2]string{key, value})
		if got, err := bootstrap.ParseOVFEnvProperty(dup, key); err == nil || !strings.Contains(err.Error(), "twice") {
			t.Fatalf("duplicate key gives %q, %v; want an error", got, err)
		}
	})
}
