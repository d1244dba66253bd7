package body

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Where the guestinfo socket is in a body. nspawn mounts a tmpfs on /run
// before it applies binds, so a directory bound here survives it; binding
// the directory rather than the socket file lets the server make a new
// socket without restarting the body. The agent's unit may write /run
// (ReadWritePaths=/run), though connecting needs no write access anyway.
const (
	GuestinfoDirInBody    = "/run/harmony-lab"
	GuestinfoSocketName   = "guestinfo.sock"
	GuestinfoSocketInBody = GuestinfoDirInBody + "/" + GuestinfoSocketName
	// RPCToolInBody is where a body finds the stand-in vmware-rpctool.
	RPCToolInBody = "/usr/bin/vmware-rpctool"
	// GuestinfoSocketEnv overrides the stand-in's socket path, for tests
	// on the host.
	GuestinfoSocketEnv = "HARMONY_GUESTINFO_SOCKET"
)

// Protocol bounds. vSphere keeps guestinfo in the VM's ExtraConfig, whose
// values are short strings; the largest we write is the bootstrap document
// (a CA bundle in base64), a few KiB.
const (
	MaxKeyLen   = 256
	MaxValueLen = 1 << 20
	// maxMessage bounds one request or response on the wire: a value, a
	// key and the JSON around them, with room for escaping.
	maxMessage = 2*MaxValueLen + 4096
	// guestinfoTimeout bounds one exchange, both sides.
	guestinfoTimeout = 10 * time.Second
)

// Messages the real VMX answers with, which the agent recognises
// (agent/bootstrap/guestinfo.go looks for "No value found").
const (
	msgNoValue      = "No value found"
	msgUnknown      = "Unknown command"
	msgNotSent      = "Failed sending message to VMware."
	msgTwoArguments = "Two and exactly two arguments expected"
)

// GuestinfoStore holds one VM's guestinfo keys. The lab implements it on
// the VM's ExtraConfig in vcsim.
type GuestinfoStore interface {
	// Get returns the key's value, or found false for an unset key.
	Get(ctx context.Context, key string) (value string, found bool, err error)
	Set(ctx context.Context, key, value string) error
}

// guestinfoRequest is what the stand-in sends: one per connection.
type guestinfoRequest struct {
	Op    string `json:"op"` // "get" or "set"
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

// guestinfoResponse is the server's answer. OK false is a failure of the
// RPC, with Error the VMX-like message the tool prints.
type guestinfoResponse struct {
	OK    bool   `json:"ok"`
	Value string `json:"value,omitempty"`
	Error string `json:"error,omitempty"`
}

// CheckGuestinfoKey accepts the keys a guest may use: guestinfo.*, of
// printable ASCII without spaces (a space ends the key in "info-set KEY
// VALUE").
func CheckGuestinfoKey(key string) error {
	const prefix = "guestinfo."
	if !strings.HasPrefix(key, prefix) || len(key) == len(prefix) {
		return fmt.Errorf("key %q: want guestinfo.NAME", clip(key))
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("key %q…: %d bytes, want at most %d", clip(key), len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("key %q: byte %d is not printable ASCII", clip(key), i)
		}
	}
	return nil
}

func checkRequest(r guestinfoRequest) error {
	if err := CheckGuestinfoKey(r.Key); err != nil {
		return err
	}
	switch r.Op {
	case "get":
		if r.Value != "" {
			return errors.New("get with a value")
		}
	case "set":
		if len(r.Value) > MaxValueLen {
			return fmt.Errorf("value of %s: %d bytes, want at most %d", r.Key, len(r.Value), MaxValueLen)
		}
	default:
		return fmt.Errorf("op %q: want get or set", clip(r.Op))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// GuestinfoServer answers the stand-in vmware-rpctool of one body.
type GuestinfoServer struct {
	path  string
	ln    *net.UnixListener
	store GuestinfoStore
	log   *slog.Logger
	wg    sync.WaitGroup
	once  sync.Once
}

// ListenGuestinfo makes the socket at path, mode 0600, replacing a stale
// one. Its directory is made 0700 if missing.
func ListenGuestinfo(path string, store GuestinfoStore, log *slog.Logger) (*GuestinfoServer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("guestinfo socket %s: exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on guestinfo socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return &GuestinfoServer{path: path, ln: ln, store: store, log: log.With("socket", path)}, nil
}

// ServeGuestinfo listens on path and serves until ctx is done.
func ServeGuestinfo(ctx context.Context, path string, store GuestinfoStore, log *slog.Logger) error {
	s, err := ListenGuestinfo(path, store, log)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Serve answers connections until ctx is done or Close is called, then
// waits for the answers under way and removes the socket.
func (s *GuestinfoServer) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	defer s.wg.Wait()
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			s.Close()
			return fmt.Errorf("accept on %s: %w", s.path, err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(ctx, conn)
		}()
	}
}

// Close stops accepting and removes the socket.
func (s *GuestinfoServer) Close() error {
	var err error
	s.once.Do(func() { err = s.ln.Close() })
	return err
}

func (s *GuestinfoServer) handle(ctx context.Context, conn *net.UnixConn) {
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, guestinfoTimeout)
	defer cancel()
	conn.SetDeadline(time.Now().Add(guestinfoTimeout))
	resp := s.answer(ctx, conn)
	if err := writeMessage(conn, resp); err != nil {
		s.log.Warn("guestinfo: write answer", "err", err)
	}
}

func (s *GuestinfoServer) answer(ctx context.Context, conn io.Reader) guestinfoResponse {
	var req guestinfoRequest
	if err := readMessage(conn, &req); err != nil {
		s.log.Warn("guestinfo: bad request", "err", err)
		return guestinfoResponse{Error: msgUnknown}
	}
	if err := checkRequest(req); err != nil {
		s.log.Warn("guestinfo: refused request", "err", err)
		return guestinfoResponse{Error: "Invalid request: " + err.Error()}
	}
	switch req.Op {
	case "get":
		v, found, err := s.store.Get(ctx, req.Key)
		if err != nil {
			s.log.Warn("guestinfo: get", "key", req.Key, "err", err)
			return guestinfoResponse{Error: msgNotSent}
		}
		if !found {
			return guestinfoResponse{Error: msgNoValue}
		}
		return guestinfoResponse{OK: true, Value: v}
	default: // "set", checked above
		if err := s.store.Set(ctx, req.Key, req.Value); err != nil {
			s.log.Warn("guestinfo: set", "key", req.Key, "err", err)
			return guestinfoResponse{Error: msgNotSent}
		}
		s.log.Debug("guestinfo: set", "key", req.Key, "bytes", len(req.Value))
		return guestinfoResponse{OK: true}
	}
}

// readMessage decodes one JSON value of at most maxMessage bytes.
func readMessage(r io.Reader, v any) error {
	data, err := io.ReadAll(io.LimitReader(r, maxMessage+1))
	if err != nil {
		return err
	}
	if len(data) > maxMessage {
		return fmt.Errorf("message over %d bytes", maxMessage)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode message: %w", err)
	}
	if dec.More() {
		return errors.New("decode message: more than one value")
	}
	return nil
}

// writeMessage sends v and closes the writing side, which tells the peer
// the message is complete.
func writeMessage(conn *net.UnixConn, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(data) > maxMessage {
		return fmt.Errorf("message over %d bytes", maxMessage)
	}
	if _, err := conn.Write(data); err != nil {
		return err
	}
	return conn.CloseWrite()
}

// RPCTool runs the stand-in vmware-rpctool: args are its command line
// without the program name. Like open-vm-tools' rpctool it sends its first
// argument as the whole RPC ("info-get KEY" or "info-set KEY VALUE"); on
// success it prints the answer and a newline to stdout and returns 0, else
// the VMX's message to stderr and returns 1. With no argument it prints its
// usage and returns 1.
func RPCTool(ctx context.Context, socket string, args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprint(stderr, "rpctool syntax:\n\n  rpctool <text>\n\n")
		return 1
	}
	req, ok := parseRPC(args[0])
	if !ok {
		fmt.Fprintln(stderr, req.Value) // the VMX's message
		return 1
	}
	resp, err := callGuestinfo(ctx, socket, req)
	if err != nil {
		// The real tool says this when the backdoor does not answer.
		fmt.Fprintln(stderr, msgNotSent)
		fmt.Fprintf(stderr, "(lab stand-in: %v)\n", err)
		return 1
	}
	if !resp.OK {
		fmt.Fprintln(stderr, resp.Error)
		return 1
	}
	fmt.Fprintln(stdout, resp.Value)
	return 0
}

// parseRPC turns an RPC string into a request. On failure it returns false
// and the VMX's message in Value.
func parseRPC(rpc string) (guestinfoRequest, bool) {
	cmd, rest, _ := strings.Cut(rpc, " ")
	switch cmd {
	case "info-get":
		return guestinfoRequest{Op: "get", Key: rest}, true
	case "info-set":
		key, value, ok := strings.Cut(rest, " ")
		if !ok || key == "" {
			return guestinfoRequest{Value: msgTwoArguments}, false
		}
		return guestinfoRequest{Op: "set", Key: key, Value: value}, true
	default:
		return guestinfoRequest{Value: msgUnknown}, false
	}
}

func callGuestinfo(ctx context.Context, socket string, req guestinfoRequest) (guestinfoResponse, error) {
	// Refuse what the server would refuse, without a round trip, but
	// with the same answer.
	if err := checkRequest(req); err != nil {
		return guestinfoResponse{Error: "Invalid request: " + err.Error()}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, guestinfoTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return guestinfoResponse{}, err
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if err := writeMessage(conn, req); err != nil {
		return guestinfoResponse{}, fmt.Errorf("send to %s: %w", socket, err)
	}
	var resp guestinfoResponse
	if err := readMessage(conn, &resp); err != nil {
		return guestinfoResponse{}, fmt.Errorf("answer from %s: %w", socket, err)
	}
	return resp, nil
}
