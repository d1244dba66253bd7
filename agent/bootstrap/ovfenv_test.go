package bootstrap_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/agent/bootstrap"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// maxOVFEnvBytes mirrors the unexported limit in ovfenv.go.
const maxOVFEnvBytes = 1 << 20

func TestParseOVFEnvProperty(t *testing.T) {
	const key = v1.OVFPropertyKey
	tests := []struct {
		name    string
		doc     []byte
		want    string
		wantErr bool
	}{
		{name: "present", doc: ovfEnv([2]string{"hostname", "node-1"}, [2]string{key, "abc="}), want: "abc="},
		{name: "absent", doc: ovfEnv([2]string{"hostname", "node-1"}), want: ""},
		{name: "no properties", doc: ovfEnv(), want: ""},
		{name: "empty value", doc: ovfEnv([2]string{key, ""}), want: ""},
		{name: "key is case sensitive", doc: ovfEnv([2]string{"Harmony.Bootstrap", "x"}), want: ""},
		{name: "entities decoded", doc: ovfEnv([2]string{key, `a&b<"c">`}), want: `a&b<"c">`},
		{name: "duplicate", doc: ovfEnv([2]string{key, "a"}, [2]string{key, "b"}), wantErr: true},
		{name: "duplicate, same value", doc: ovfEnv([2]string{key, "a"}, [2]string{key, "a"}), wantErr: true},
		{name: "duplicate, first empty", doc: ovfEnv([2]string{key, ""}, [2]string{key, "b"}), wantErr: true},
		{name: "truncated", doc: ovfEnv([2]string{key, "a"})[:200], wantErr: true},
		{name: "not XML", doc: []byte("harmony.bootstrap=abc"), wantErr: true},
		{name: "empty", doc: nil, wantErr: true},
		{name: "wrong namespace", doc: bytes.ReplaceAll(ovfEnv([2]string{key, "a"}), []byte(`xmlns="http://schemas.dmtf.org/ovf/environment/1"`), []byte(`xmlns="urn:other"`)), wantErr: true},
		{name: "unclosed attribute", doc: []byte(`<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:oe="http://schemas.dmtf.org/ovf/environment/1"><PropertySection><Property oe:key="harmony.bootstrap" oe:value="a/></PropertySection></Environment>`), wantErr: true},
		{name: "undefined entity", doc: ovfEnvRaw(`<Property oe:key="harmony.bootstrap" oe:value="&nbsp;"/>`), wantErr: true},
		{name: "oversized", doc: append(ovfEnv([2]string{key, "a"}), bytes.Repeat([]byte(" "), maxOVFEnvBytes)...), wantErr: true},
		{name: "exactly the limit", doc: padXML(ovfEnv([2]string{key, "a"}), maxOVFEnvBytes), want: "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bootstrap.ParseOVFEnvProperty(tc.doc, key)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseOVFEnvProperty = %q, want an error", got)
				}
				if got != "" {
					t.Errorf("returned %q along with error %v", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseOVFEnvProperty = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// ovfEnvRaw wraps raw Property elements in a minimal OVF environment.
func ovfEnvRaw(props string) []byte {
	return []byte(`<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:oe="http://schemas.dmtf.org/ovf/environment/1"><PropertySection>` +
		props + `</PropertySection></Environment>`)
}

// padXML appends whitespace after the root element up to n bytes; the
// decoder reads only the root element, so only the size can change the
// outcome.
func padXML(doc []byte, n int) []byte {
	return append(doc, bytes.Repeat([]byte(" "), n-len(doc))...)
}

func TestOVFEnvFromFile(t *testing.T) {
	ctx := context.Background()
	doc := testDoc(t, "node-1")
	enc := docBase64(t, doc)
	path := writeFile(t, ovfEnv([2]string{"guestinfo.hostname", "node-1"}, [2]string{v1.OVFPropertyKey, enc}), 0o644)
	o := bootstrap.OVFEnv{Path: path}

	data, err := o.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != enc {
		t.Fatalf("Read = %q, want the property's value", data)
	}
	if !strings.Contains(o.Name(), path) {
		t.Errorf("Name() = %q does not show the path", o.Name())
	}

	// Through Load, the property decodes into the document.
	found, err := bootstrap.Load(ctx, discard, []bootstrap.Source{
		bootstrap.File{Path: filepath.Join(t.TempDir(), "missing.json")}, o,
	})
	if err != nil {
		t.Fatal(err)
	}
	if found.Doc.NodeName != "node-1" || found.Doc.Token != testToken || found.Source != o {
		t.Errorf("Load found %+v from %v", found.Doc, found.Source)
	}
	// An OVF environment is read-only: ClearToken is a no-op, not a
	// failure that would stop enrollment.
	if err := o.ClearToken(ctx, found.Doc); err != nil {
		t.Errorf("ClearToken = %v", err)
	}
}

func TestOVFEnvRead(t *testing.T) {
	ctx := context.Background()
	enc := docBase64(t, testDoc(t, "node-1"))
	dir := t.TempDir()
	tests := []struct {
		name    string
		src     bootstrap.OVFEnv
		want    string
		absent  bool
		wantErr string // a part of the error, if one is expected
	}{
		{name: "file without the property", src: bootstrap.OVFEnv{Path: writeFile(t, ovfEnv([2]string{"hostname", "n"}), 0o644)}, absent: true},
		{name: "file with an empty property", src: bootstrap.OVFEnv{Path: writeFile(t, ovfEnv([2]string{v1.OVFPropertyKey, ""}), 0o644)}, absent: true},
		{name: "missing file", src: bootstrap.OVFEnv{Path: filepath.Join(dir, "ovf-env.xml")}, absent: true},
		{name: "empty file", src: bootstrap.OVFEnv{Path: writeFile(t, []byte("\n"), 0o644)}, absent: true},
		{name: "duplicate property", src: bootstrap.OVFEnv{Path: writeFile(t, ovfEnv([2]string{v1.OVFPropertyKey, enc}, [2]string{v1.OVFPropertyKey, enc}), 0o644)}, wantErr: "appears twice"},
		{name: "broken XML", src: bootstrap.OVFEnv{Path: writeFile(t, []byte("<Environment"), 0o644)}, wantErr: "OVF environment"},
		{name: "file too large", src: bootstrap.OVFEnv{Path: writeFile(t, padXML(ovfEnv([2]string{v1.OVFPropertyKey, enc}), maxOVFEnvBytes+1), 0o644)}, wantErr: "larger than"},
		{name: "guestinfo.ovfEnv", src: bootstrap.OVFEnv{Reader: newMemGuestinfo("guestinfo.ovfEnv", string(ovfEnv([2]string{v1.OVFPropertyKey, enc})))}, want: enc},
		{name: "guestinfo.ovfEnv unset", src: bootstrap.OVFEnv{Reader: newMemGuestinfo()}, absent: true},
		{name: "no transport", src: bootstrap.OVFEnv{}, absent: true},
		// The file transport takes precedence when both are configured.
		{name: "path before reader", src: bootstrap.OVFEnv{
			Path:   writeFile(t, ovfEnv([2]string{v1.OVFPropertyKey, "from-file"}), 0o644),
			Reader: newMemGuestinfo("guestinfo.ovfEnv", string(ovfEnv([2]string{v1.OVFPropertyKey, enc}))),
		}, want: "from-file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := tc.src.Read(ctx)
			switch {
			case tc.absent:
				if !errors.Is(err, bootstrap.ErrAbsent) {
					t.Fatalf("Read = %q, %v; want ErrAbsent", data, err)
				}
			case tc.wantErr != "":
				if err == nil || errors.Is(err, bootstrap.ErrAbsent) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Read = %q, %v; want an error with %q", data, err, tc.wantErr)
				}
			default:
				if err != nil || string(data) != tc.want {
					t.Fatalf("Read = %q, %v; want %q", data, err, tc.want)
				}
			}
		})
	}

	failing := newMemGuestinfo()
	failing.err = errors.New("rpc failed")
	if _, err := (bootstrap.OVFEnv{Reader: failing}).Read(ctx); !errors.Is(err, failing.err) {
		t.Errorf("Read with a failing reader = %v, want its error", err)
	}
	if name := (bootstrap.OVFEnv{Reader: failing}).Name(); !strings.Contains(name, "guestinfo.ovfEnv") {
		t.Errorf("Name() = %q does not show guestinfo.ovfEnv", name)
	}
}

// TestLoadStopsAtDuplicateOVFProperty: an ambiguous OVF environment is a
// broken document, and must not fall through to a later source.
func TestLoadStopsAtDuplicateOVFProperty(t *testing.T) {
	enc := docBase64(t, testDoc(t, "node-1"))
	o := bootstrap.OVFEnv{Path: writeFile(t, ovfEnv([2]string{v1.OVFPropertyKey, enc}, [2]string{v1.OVFPropertyKey, enc}), 0o644)}
	next := newMemGuestinfo(v1.GuestinfoKey, enc)
	_, err := bootstrap.Load(context.Background(), discard, []bootstrap.Source{o, bootstrap.Guestinfo{Reader: next}})
	if err == nil || errors.Is(err, bootstrap.ErrAbsent) || !strings.Contains(err.Error(), o.Name()) {
		t.Fatalf("Load = %v, want an error naming %q", err, o.Name())
	}
	if next.gets != 0 {
		t.Error("Load read the next source")
	}
}
