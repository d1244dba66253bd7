package bootstrap_test

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/agent/bootstrap"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

var discard = slog.New(slog.DiscardHandler)

func writeFile(t *testing.T, data []byte, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	// WriteFile's mode is filtered by the umask; set it exactly.
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFileAbsent(t *testing.T) {
	f := bootstrap.File{Path: filepath.Join(t.TempDir(), "missing.json")}
	data, err := f.Read(context.Background())
	if !errors.Is(err, bootstrap.ErrAbsent) || data != nil {
		t.Fatalf("Read = %q, %v; want ErrAbsent", data, err)
	}
	if !strings.Contains(f.Name(), f.Path) {
		t.Errorf("Name() = %q does not show the path", f.Name())
	}
}

func TestFileUnreadable(t *testing.T) {
	// A directory exists but cannot be read as a document: that is an
	// error, not absence, so that Load does not silently move on.
	f := bootstrap.File{Path: t.TempDir()}
	if _, err := f.Read(context.Background()); err == nil || errors.Is(err, bootstrap.ErrAbsent) {
		t.Fatalf("Read of a directory = %v, want an error other than ErrAbsent", err)
	}
}

func TestFileRead(t *testing.T) {
	want := docJSON(t, testDoc(t, "node-1"))
	f := bootstrap.File{Path: writeFile(t, want, 0o600)}
	got, err := f.Read(context.Background())
	if err != nil || string(got) != string(want) {
		t.Fatalf("Read = %q, %v; want the file's content", got, err)
	}
}

// TestFileReadBounded checks Read stops after one byte over the limit, so
// that a huge file neither exhausts memory nor slips under the decoder's
// size check.
func TestFileReadBounded(t *testing.T) {
	f := bootstrap.File{Path: writeFile(t, make([]byte, 4*v1.MaxBootstrapBytes), 0o600)}
	got, err := f.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != v1.MaxBootstrapBytes+1 {
		t.Fatalf("read %d bytes, want MaxBootstrapBytes+1", len(got))
	}
	if _, err := v1.DecodeBootstrap(got); err == nil {
		t.Fatal("DecodeBootstrap accepted what File read from an oversized file")
	}
}

func TestFileClearToken(t *testing.T) {
	for _, form := range []string{"json", "base64"} {
		t.Run(form, func(t *testing.T) {
			orig := testDoc(t, "node-1")
			content := docJSON(t, orig)
			if form == "base64" {
				content = []byte(docBase64(t, orig) + "\n")
			}
			const mode = 0o640 // not the 0600 default, to see that it is kept
			f := bootstrap.File{Path: writeFile(t, content, mode)}
			ctx := context.Background()

			data, err := f.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := v1.DecodeBootstrap(data)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.ClearToken(ctx, doc); err != nil {
				t.Fatal(err)
			}
			if doc.Token != testToken {
				t.Error("ClearToken changed the caller's document")
			}

			info, err := os.Stat(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode().Perm() != mode {
				t.Errorf("mode = %v, want %v", info.Mode().Perm(), os.FileMode(mode))
			}
			raw, err := os.ReadFile(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			_, secret, _ := v1.SplitToken(testToken)
			if strings.Contains(string(raw), secret) || strings.Contains(string(raw), `"token"`) {
				t.Fatalf("file still holds the token:\n%s", raw)
			}
			// Everything else is kept and the file is still a valid
			// document, so the agent can read it again after a restart.
			cleared, err := v1.DecodeBootstrap(raw)
			if err != nil {
				t.Fatalf("cleared file does not decode: %v\n%s", err, raw)
			}
			want := *orig
			want.Token = ""
			if !reflect.DeepEqual(cleared, &want) {
				t.Errorf("cleared document = %+v\nwant %+v", cleared, &want)
			}
			// No temporary file is left beside it.
			entries, err := os.ReadDir(filepath.Dir(f.Path))
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries after ClearToken, want 1", len(entries))
			}
		})
	}
}

func TestLoadFileWinsOverGuestinfo(t *testing.T) {
	file := bootstrap.File{Path: writeFile(t, docJSON(t, testDoc(t, "from-file")), 0o600)}
	gi := newMemGuestinfo(v1.GuestinfoKey, docBase64(t, testDoc(t, "from-guestinfo")))
	found, err := bootstrap.Load(context.Background(), discard, []bootstrap.Source{file, bootstrap.Guestinfo{Reader: gi}})
	if err != nil {
		t.Fatal(err)
	}
	if found.Doc.NodeName != "from-file" {
		t.Errorf("document of %q, want the file's", found.Doc.NodeName)
	}
	if _, ok := found.Source.(bootstrap.File); !ok {
		t.Errorf("source = %T, want bootstrap.File", found.Source)
	}
	if gi.gets != 0 {
		t.Errorf("guestinfo was read %d times after the file had a document", gi.gets)
	}
}

func TestLoadFallsThroughAbsentSources(t *testing.T) {
	file := bootstrap.File{Path: filepath.Join(t.TempDir(), "missing.json")}
	empty := bootstrap.Guestinfo{Reader: newMemGuestinfo()}
	gi := newMemGuestinfo(v1.GuestinfoKey, docBase64(t, testDoc(t, "from-guestinfo")))
	found, err := bootstrap.Load(context.Background(), discard, []bootstrap.Source{file, bootstrap.Guestinfo{}, empty, bootstrap.Guestinfo{Reader: gi}})
	if err != nil {
		t.Fatal(err)
	}
	if found.Doc.NodeName != "from-guestinfo" {
		t.Errorf("document of %q, want guestinfo's", found.Doc.NodeName)
	}
	if g, ok := found.Source.(bootstrap.Guestinfo); !ok || g.Reader != gi {
		t.Errorf("source = %#v, want the guestinfo that has the document", found.Source)
	}
}

func TestLoadStopsAtBrokenDocument(t *testing.T) {
	broken := testDoc(t, "Node-1") // uppercase: refused
	file := bootstrap.File{Path: writeFile(t, docJSON(t, broken), 0o600)}
	gi := newMemGuestinfo(v1.GuestinfoKey, docBase64(t, testDoc(t, "node-1")))
	found, err := bootstrap.Load(context.Background(), discard, []bootstrap.Source{file, bootstrap.Guestinfo{Reader: gi}})
	if err == nil {
		t.Fatalf("Load = %+v, want an error: falling through would hide the broken file", found.Doc)
	}
	if errors.Is(err, bootstrap.ErrAbsent) {
		t.Errorf("error %v wraps ErrAbsent", err)
	}
	if !strings.Contains(err.Error(), file.Name()) {
		t.Errorf("error %q does not name the source %q", err, file.Name())
	}
	var fe *v1.FieldError
	if !errors.As(err, &fe) || fe.Field != "nodeName" {
		t.Errorf("error %v does not carry the nodeName FieldError", err)
	}
	if gi.gets != 0 {
		t.Error("Load read the next source after a broken document")
	}
}

func TestLoadStopsAtReadError(t *testing.T) {
	failing := newMemGuestinfo()
	failing.err = errors.New("backdoor: permission denied")
	gi := bootstrap.Guestinfo{Reader: failing}
	next := newMemGuestinfo(v1.GuestinfoKey, docBase64(t, testDoc(t, "node-1")))
	_, err := bootstrap.Load(context.Background(), discard, []bootstrap.Source{gi, bootstrap.Guestinfo{Reader: next}})
	if err == nil || !errors.Is(err, failing.err) || !strings.Contains(err.Error(), gi.Name()) {
		t.Fatalf("Load = %v, want the read error, naming %q", err, gi.Name())
	}
	if next.gets != 0 {
		t.Error("Load read the next source after a read error")
	}
}

func TestLoadAllAbsent(t *testing.T) {
	file := bootstrap.File{Path: filepath.Join(t.TempDir(), "missing.json")}
	ovf := bootstrap.OVFEnv{Path: filepath.Join(t.TempDir(), "ovf-env.xml")}
	sources := []bootstrap.Source{file, bootstrap.Guestinfo{Reader: newMemGuestinfo()}, ovf}
	found, err := bootstrap.Load(context.Background(), discard, sources)
	if !errors.Is(err, bootstrap.ErrAbsent) || found != nil {
		t.Fatalf("Load = %v, %v; want an error wrapping ErrAbsent", found, err)
	}
	for _, s := range sources {
		if !strings.Contains(err.Error(), s.Name()) {
			t.Errorf("error %q does not list %q", err, s.Name())
		}
	}

	if _, err := bootstrap.Load(context.Background(), discard, nil); !errors.Is(err, bootstrap.ErrAbsent) {
		t.Errorf("Load with no sources = %v, want ErrAbsent", err)
	}
}

func TestGuestinfo(t *testing.T) {
	ctx := context.Background()
	doc := testDoc(t, "node-1")
	enc := docBase64(t, doc)

	for name, tc := range map[string]struct {
		reader bootstrap.GuestinfoReader
		absent bool
	}{
		"set":        {reader: newMemGuestinfo(v1.GuestinfoKey, enc)},
		"unset":      {reader: newMemGuestinfo(), absent: true},
		"blank":      {reader: newMemGuestinfo(v1.GuestinfoKey, " \n"), absent: true},
		"other key":  {reader: newMemGuestinfo("guestinfo.other", enc), absent: true},
		"not probed": {reader: nil, absent: true},
		"kept as is": {reader: newMemGuestinfo(v1.GuestinfoKey, "garbage")},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := bootstrap.Guestinfo{Reader: tc.reader}.Read(ctx)
			if tc.absent {
				if !errors.Is(err, bootstrap.ErrAbsent) {
					t.Fatalf("Read = %q, %v; want ErrAbsent", data, err)
				}
				return
			}
			// Read returns the raw value; judging it is DecodeBootstrap's job.
			if err != nil || len(data) == 0 {
				t.Fatalf("Read = %q, %v", data, err)
			}
		})
	}

	g := bootstrap.Guestinfo{Reader: newMemGuestinfo()}
	if !strings.Contains(g.Name(), v1.GuestinfoKey) {
		t.Errorf("Name() = %q does not show the key", g.Name())
	}
}

func TestGuestinfoClearToken(t *testing.T) {
	ctx := context.Background()
	doc := testDoc(t, "node-1")
	m := newMemGuestinfo(v1.GuestinfoKey, docBase64(t, doc))
	g := bootstrap.Guestinfo{Reader: m}
	if err := g.ClearToken(ctx, doc); err != nil {
		t.Fatal(err)
	}
	if doc.Token == "" {
		t.Error("ClearToken changed the caller's document")
	}
	checkClearedGuestinfo(t, m.get(v1.GuestinfoKey), doc)
}

// checkClearedGuestinfo asserts that value is the guestinfo (base64) form
// of orig without its token.
func checkClearedGuestinfo(t *testing.T, value string, orig *v1.Bootstrap) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(value)
	if err != nil {
		t.Fatalf("written value is not base64: %v: %q", err, value)
	}
	if strings.Contains(string(raw), `"token"`) {
		t.Fatalf("written document still has a token: %s", raw)
	}
	cleared, err := v1.DecodeBootstrap([]byte(value))
	if err != nil {
		t.Fatalf("written document does not decode: %v", err)
	}
	want := *orig
	want.Token = ""
	if !reflect.DeepEqual(cleared, &want) {
		t.Errorf("written document = %+v\nwant %+v", cleared, &want)
	}
}
