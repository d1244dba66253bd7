package body

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// mapStore is a GuestinfoStore in memory that remembers which keys were
// asked for.
type mapStore struct {
	mu    sync.Mutex
	m     map[string]string
	asked []string
	fail  error
}

func newMapStore(kv ...string) *mapStore {
	s := &mapStore{m: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.m[kv[i]] = kv[i+1]
	}
	return s
}

func (s *mapStore) Get(_ context.Context, key string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, key)
	if s.fail != nil {
		return "", false, s.fail
	}
	v, ok := s.m[key]
	return v, ok, nil
}

func (s *mapStore) Set(_ context.Context, key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.m[key] = value
	return nil
}

func (s *mapStore) value(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	return v, ok
}

func (s *mapStore) wasAsked(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.asked {
		if k == key {
			return true
		}
	}
	return false
}

// serve starts a guestinfo server on a socket in a fresh directory and
// stops it when the test ends.
func serve(t *testing.T, store GuestinfoStore) string {
	t.Helper()
	// Unix socket paths are short (108 bytes): not t.TempDir's long names.
	dir, err := os.MkdirTemp("", "gi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s", GuestinfoSocketName)
	srv, err := ListenGuestinfo(path, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after cancel")
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left after Serve returned: %v", err)
		}
	})
	return path
}

// rpctool runs the stand-in's logic as the command would.
func rpctool(t *testing.T, socket string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code = RPCTool(ctx, socket, args, &o, &e)
	return o.String(), e.String(), code
}

func TestRPCToolGetSet(t *testing.T) {
	store := newMapStore("guestinfo.x", "a value")
	sock := serve(t, store)

	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}

	out, errOut, code := rpctool(t, sock, "info-get guestinfo.x")
	if code != 0 || out != "a value\n" || errOut != "" {
		t.Errorf("info-get = %q, %q, %d; want the value and a newline, exit 0", out, errOut, code)
	}
	// Like the real tool, only the first argument counts.
	if out, _, code := rpctool(t, sock, "info-get guestinfo.x", "ignored"); code != 0 || out != "a value\n" {
		t.Errorf("info-get with an extra argument = %q, %d", out, code)
	}

	out, errOut, code = rpctool(t, sock, "info-set guestinfo.y b c=d ")
	if code != 0 || out != "\n" || errOut != "" {
		t.Errorf("info-set = %q, %q, %d; want an empty answer, exit 0", out, errOut, code)
	}
	if v, ok := store.value("guestinfo.y"); !ok || v != "b c=d " {
		t.Errorf("stored %q, %v; want the value with its spaces", v, ok)
	}
	if out, _, code := rpctool(t, sock, "info-get guestinfo.y"); code != 0 || out != "b c=d \n" {
		t.Errorf("info-get after info-set = %q, %d", out, code)
	}
	// An empty value is a value.
	if _, _, code := rpctool(t, sock, "info-set guestinfo.z "); code != 0 {
		t.Errorf("info-set of an empty value: exit %d", code)
	}
	if v, ok := store.value("guestinfo.z"); !ok || v != "" {
		t.Errorf("stored %q, %v; want an empty value", v, ok)
	}
}

func TestRPCToolFailures(t *testing.T) {
	store := newMapStore()
	sock := serve(t, store)
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"missing key", []string{"info-get guestinfo.unset"}, "No value found\n"},
		{"no argument", nil, "rpctool syntax:"},
		{"unknown command", []string{"log hello"}, "Unknown command\n"},
		{"set without value", []string{"info-set guestinfo.x"}, "Two and exactly two arguments expected\n"},
		{"key outside guestinfo", []string{"info-get machine.id"}, "Invalid request: key"},
		{"get of the bare prefix", []string{"info-get guestinfo."}, "Invalid request: key"},
		{"key with a control byte", []string{"info-get guestinfo.a\tb"}, "Invalid request: key"},
		{"long key", []string{"info-get guestinfo." + strings.Repeat("k", MaxKeyLen)}, "Invalid request: key"},
		{"oversized value", []string{"info-set guestinfo.big " + strings.Repeat("v", MaxValueLen+1)}, "Invalid request: value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := rpctool(t, sock, tc.args...)
			if code != 1 || out != "" || !strings.HasPrefix(errOut, tc.msg) {
				t.Errorf("= %q, %q, %d; want exit 1 and stderr starting %q", out, errOut, code, tc.msg)
			}
		})
	}
	if _, ok := store.value("guestinfo.big"); ok {
		t.Error("an oversized value was stored")
	}
	// A value of exactly the limit passes.
	if _, errOut, code := rpctool(t, sock, "info-set guestinfo.big "+strings.Repeat("v", MaxValueLen)); code != 0 {
		t.Errorf("value of MaxValueLen: exit %d, %q", code, errOut)
	}
}

// The agent's RPCTool reader treats "No value found" as an unset key and
// anything else as an error; the store failing must be the latter.
func TestRPCToolStoreError(t *testing.T) {
	store := newMapStore("guestinfo.x", "v")
	store.fail = errors.New("vcsim is down")
	sock := serve(t, store)
	out, errOut, code := rpctool(t, sock, "info-get guestinfo.x")
	if code != 1 || out != "" || errOut != "Failed sending message to VMware.\n" {
		t.Errorf("= %q, %q, %d", out, errOut, code)
	}
	if _, _, code := rpctool(t, sock, "info-set guestinfo.x w"); code != 1 {
		t.Errorf("info-set with a failing store: exit %d", code)
	}
}

func TestRPCToolNoServer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "absent.sock")
	out, errOut, code := rpctool(t, sock, "info-get guestinfo.x")
	if code != 1 || out != "" || !strings.HasPrefix(errOut, "Failed sending message to VMware.\n") {
		t.Errorf("= %q, %q, %d", out, errOut, code)
	}
}

// rawExchange sends data as one request and returns the decoded answer.
func rawExchange(t *testing.T, sock string, data []byte) guestinfoResponse {
	t.Helper()
	resp, err := tryRawExchange(t, sock, data)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return resp
}

func tryRawExchange(t *testing.T, sock string, data []byte) (guestinfoResponse, error) {
	t.Helper()
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	// The server may stop reading at its limit and answer; a failed write
	// then is expected.
	conn.Write(data)
	conn.CloseWrite()
	var resp guestinfoResponse
	err = readMessage(conn, &resp)
	return resp, err
}

// The server checks requests itself: the client in the body is not
// trusted.
func TestGuestinfoServerRefuses(t *testing.T) {
	store := newMapStore("guestinfo.x", "v")
	sock := serve(t, store)
	enc := func(r guestinfoRequest) []byte {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
		msg  string
	}{
		{"not JSON", []byte("info-get guestinfo.x"), "Unknown command"},
		{"two values", []byte(`{"op":"get","key":"guestinfo.x"}{"op":"get","key":"guestinfo.x"}`), "Unknown command"},
		{"unknown field", []byte(`{"op":"get","key":"guestinfo.x","path":"/etc"}`), "Unknown command"},
		{"bad op", enc(guestinfoRequest{Op: "delete", Key: "guestinfo.x"}), "Invalid request: op"},
		{"bad key", enc(guestinfoRequest{Op: "set", Key: "tools.x", Value: "v"}), "Invalid request: key"},
		{"get with value", enc(guestinfoRequest{Op: "get", Key: "guestinfo.x", Value: "v"}), "Invalid request: get"},
		{"oversized value", enc(guestinfoRequest{Op: "set", Key: "guestinfo.x", Value: strings.Repeat("v", MaxValueLen+1)}), "Invalid request: value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := rawExchange(t, sock, tc.data)
			if resp.OK || !strings.HasPrefix(resp.Error, tc.msg) {
				t.Errorf("answer %+v, want a failure starting %q", resp, tc.msg)
			}
		})
	}
	// Past its limit the server stops reading and answers; closing with
	// unread bytes resets the connection, so the answer may be lost. It
	// must not be a success.
	big := append([]byte(`{"op":"set","key":"guestinfo.x","value":"`), bytes.Repeat([]byte("w"), maxMessage)...)
	if resp, err := tryRawExchange(t, sock, append(big, `"}`...)); err == nil && (resp.OK || resp.Error != "Unknown command") {
		t.Errorf("oversized message: answer %+v, want a failure or a reset", resp)
	}
	if v, _ := store.value("guestinfo.x"); v != "v" {
		t.Errorf("guestinfo.x = %q after refused requests", v)
	}
	// A well-formed request still works afterwards.
	if resp := rawExchange(t, sock, enc(guestinfoRequest{Op: "get", Key: "guestinfo.x"})); !resp.OK || resp.Value != "v" {
		t.Errorf("get = %+v", resp)
	}
}

func TestListenGuestinfoReplacesStaleSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "gi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, GuestinfoSocketName)
	// A socket left by a crashed lab.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	srv, err := ListenGuestinfo(path, newMapStore(), nil)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	srv.Close()

	// A regular file is not replaced.
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenGuestinfo(path, newMapStore(), nil); err == nil {
		t.Fatal("ListenGuestinfo replaced a regular file")
	}
}
