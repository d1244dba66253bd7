//go:build linux

package service

// A minimal D-Bus client, written from the D-Bus specification, for the
// handful of method calls the systemd manager makes over systemd's
// private socket (/run/systemd/private, peer to peer, no bus daemon).
//
// Why not github.com/coreos/go-systemd/v22/dbus: it needs
// github.com/godbus/dbus/v5, which go.mod does not list. With that module
// added, busConn can give way to go-systemd's Conn behind the same calls
// in systemd.go.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Message types.
const (
	msgMethodCall   = 1
	msgMethodReturn = 2
	msgError        = 3
	msgSignal       = 4
)

// Header field codes.
const (
	fieldPath        = 1
	fieldInterface   = 2
	fieldMember      = 3
	fieldErrorName   = 4
	fieldReplySerial = 5
	fieldDestination = 6
	fieldSignature   = 8
)

// Bounds on what is read from the peer.
const (
	maxHeaderFields = 1 << 16
	maxBody         = 64 << 20
	maxDepth        = 64
)

// objectPath is a D-Bus object path (type "o").
type objectPath string

// signature is a D-Bus type signature (type "g").
type signature string

// variant is a value with its own signature (type "v").
type variant struct {
	sig   string
	value any
}

// busError is an error reply.
type busError struct {
	Name    string
	Message string
}

func (e *busError) Error() string {
	if e.Message == "" {
		return e.Name
	}
	return e.Name + ": " + e.Message
}

// message is a decoded message; body holds one Go value per complete
// type of the signature.
type message struct {
	typ         byte
	serial      uint32
	replySerial uint32
	errorName   string
	sig         string
	body        []any
}

// busConn is one authenticated connection. Calls may be concurrent.
type busConn struct {
	conn net.Conn
	r    *bufio.Reader

	wmu sync.Mutex // one message written at a time

	mu      sync.Mutex
	serial  uint32
	pending map[uint32]chan *message
	err     error // why the reader stopped
	done    chan struct{}
}

// dialBus connects to a D-Bus peer at a socket path and authenticates.
func dialBus(ctx context.Context, path string) (*busConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	return newBusConn(ctx, conn)
}

// newBusConn authenticates on a fresh connection as this process's user
// (SASL EXTERNAL: the peer checks the credentials the kernel recorded at
// connect) and starts reading replies. It takes conn over.
func newBusConn(ctx context.Context, conn net.Conn) (*busConn, error) {
	deadline := time.Now().Add(30 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	conn.SetDeadline(deadline)
	c := &busConn{conn: conn, r: bufio.NewReader(conn), pending: map[uint32]chan *message{}, done: make(chan struct{})}
	fail := func(err error) (*busConn, error) {
		conn.Close()
		return nil, fmt.Errorf("authenticate: %w", err)
	}
	// BEGIN goes with AUTH, before the answer, as systemd's own clients
	// send it: systemd 252 loses a message that reaches it in the same
	// read as a BEGIN sent after its OK.
	uid := hex.EncodeToString([]byte(strconv.Itoa(os.Getuid())))
	if _, err := io.WriteString(conn, "\x00AUTH EXTERNAL "+uid+"\r\nBEGIN\r\n"); err != nil {
		return fail(err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return fail(err)
	}
	if !strings.HasPrefix(line, "OK ") {
		return fail(fmt.Errorf("refused: %q", strings.TrimSpace(line)))
	}
	conn.SetDeadline(time.Time{})
	go c.read()
	return c, nil
}

// Close ends the connection; pending calls fail.
func (c *busConn) Close() error {
	c.conn.Close()
	<-c.done
	return nil
}

// alive reports whether the connection still reads.
func (c *busConn) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// read hands each reply to its caller until the connection fails.
// Signals are not asked for, and dropped if they come.
func (c *busConn) read() {
	var err error
	for {
		var m *message
		if m, err = readMessage(c.r); err != nil {
			break
		}
		if m.typ != msgMethodReturn && m.typ != msgError {
			continue
		}
		c.mu.Lock()
		ch := c.pending[m.replySerial]
		delete(c.pending, m.replySerial)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
	c.mu.Lock()
	c.err = err
	c.pending = nil
	c.mu.Unlock()
	c.conn.Close()
	close(c.done)
}

// call invokes a method on systemd and waits for its reply. sig is the
// signature of args; a reply whose signature is not want is an error, so
// that callers may take its values' Go types for granted.
func (c *busConn) call(ctx context.Context, path objectPath, iface, member, sig, want string, args ...any) ([]any, error) {
	ch := make(chan *message, 1)
	c.mu.Lock()
	if c.pending == nil {
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("D-Bus connection closed: %w", err)
	}
	c.serial++
	serial := c.serial
	c.pending[serial] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		if c.pending != nil {
			delete(c.pending, serial)
		}
		c.mu.Unlock()
	}

	msg, err := encodeCall(serial, path, iface, member, sig, args)
	if err != nil {
		forget()
		return nil, err
	}
	c.wmu.Lock()
	deadline, _ := ctx.Deadline()
	c.conn.SetWriteDeadline(deadline)
	_, err = c.conn.Write(msg)
	c.wmu.Unlock()
	if err != nil {
		forget()
		return nil, fmt.Errorf("%s.%s: %w", iface, member, err)
	}
	select {
	case m := <-ch:
		if m.typ == msgError {
			e := &busError{Name: m.errorName}
			if len(m.body) > 0 {
				e.Message, _ = m.body[0].(string)
			}
			return nil, e
		}
		if m.sig != want {
			return nil, fmt.Errorf("%s.%s: reply of type %q, want %q", iface, member, m.sig, want)
		}
		return m.body, nil
	case <-ctx.Done():
		forget()
		return nil, fmt.Errorf("%s.%s: %w", iface, member, ctx.Err())
	case <-c.done:
		return nil, fmt.Errorf("%s.%s: D-Bus connection lost: %v", iface, member, c.err)
	}
}

// encodeCall marshals a method call to systemd (little-endian).
func encodeCall(serial uint32, path objectPath, iface, member, sig string, args []any) ([]byte, error) {
	body := &encoder{}
	types, err := splitSignature(sig)
	if err != nil {
		return nil, err
	}
	if len(types) != len(args) {
		return nil, fmt.Errorf("%s.%s: signature %q wants %d arguments, got %d", iface, member, sig, len(types), len(args))
	}
	for i, t := range types {
		if err := body.value(t, args[i], 0); err != nil {
			return nil, fmt.Errorf("%s.%s argument %d: %w", iface, member, i, err)
		}
	}
	fields := []any{
		[]any{byte(fieldPath), variant{"o", path}},
		[]any{byte(fieldInterface), variant{"s", iface}},
		[]any{byte(fieldMember), variant{"s", member}},
		[]any{byte(fieldDestination), variant{"s", "org.freedesktop.systemd1"}},
	}
	if sig != "" {
		fields = append(fields, []any{byte(fieldSignature), variant{"g", signature(sig)}})
	}
	h := &encoder{}
	h.buf = append(h.buf, 'l', msgMethodCall, 0, 1)
	h.uint32(uint32(len(body.buf)))
	h.uint32(serial)
	if err := h.value("a(yv)", fields, 0); err != nil {
		return nil, err
	}
	h.align(8)
	return append(h.buf, body.buf...), nil
}

// readMessage reads and decodes one message.
func readMessage(r *bufio.Reader) (*message, error) {
	var fixed [16]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return nil, err
	}
	var order binary.ByteOrder
	switch fixed[0] {
	case 'l':
		order = binary.LittleEndian
	case 'B':
		order = binary.BigEndian
	default:
		return nil, fmt.Errorf("D-Bus message with endianness %q", fixed[0])
	}
	if fixed[3] != 1 {
		return nil, fmt.Errorf("D-Bus protocol version %d", fixed[3])
	}
	bodyLen, fieldsLen := order.Uint32(fixed[4:8]), order.Uint32(fixed[12:16])
	if fieldsLen > maxHeaderFields || bodyLen > maxBody {
		return nil, fmt.Errorf("D-Bus message too large (%d bytes of header fields, %d of body)", fieldsLen, bodyLen)
	}
	headerLen := 16 + int(fieldsLen)
	padded := (headerLen + 7) &^ 7
	buf := make([]byte, padded+int(bodyLen))
	copy(buf, fixed[:])
	if _, err := io.ReadFull(r, buf[16:]); err != nil {
		return nil, err
	}
	m := &message{typ: fixed[1], serial: order.Uint32(fixed[8:12])}
	d := &decoder{buf: buf[:headerLen], pos: 12, order: order}
	fields, err := d.value("a(yv)", 0)
	if err != nil {
		return nil, fmt.Errorf("D-Bus header: %w", err)
	}
	for _, f := range fields.([]any) {
		pair := f.([]any)
		v := pair[1].(variant)
		switch pair[0].(byte) {
		case fieldReplySerial:
			m.replySerial, _ = v.value.(uint32)
		case fieldErrorName:
			m.errorName, _ = v.value.(string)
		case fieldSignature:
			s, _ := v.value.(signature)
			m.sig = string(s)
		}
	}
	types, err := splitSignature(m.sig)
	if err != nil {
		return nil, err
	}
	d = &decoder{buf: buf[padded:], order: order}
	for _, t := range types {
		v, err := d.value(t, 0)
		if err != nil {
			return nil, fmt.Errorf("D-Bus body (%s): %w", m.sig, err)
		}
		m.body = append(m.body, v)
	}
	return m, nil
}

// splitSignature splits a signature into its complete types.
func splitSignature(sig string) ([]string, error) {
	var out []string
	for sig != "" {
		n, err := typeLen(sig, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, sig[:n])
		sig = sig[n:]
	}
	return out, nil
}

// typeLen is the length of the complete type at the start of sig.
func typeLen(sig string, depth int) (int, error) {
	if depth > maxDepth {
		return 0, errors.New("signature nested too deeply")
	}
	if sig == "" {
		return 0, errors.New("incomplete signature")
	}
	switch sig[0] {
	case 'y', 'b', 'n', 'q', 'i', 'u', 'x', 't', 'd', 'h', 's', 'o', 'g', 'v':
		return 1, nil
	case 'a':
		n, err := typeLen(sig[1:], depth+1)
		return 1 + n, err
	case '(', '{':
		end := byte(')')
		if sig[0] == '{' {
			end = '}'
		}
		i := 1
		for {
			if i >= len(sig) {
				return 0, fmt.Errorf("unterminated %q in signature", sig[0])
			}
			if sig[i] == end {
				if i == 1 {
					return 0, errors.New("empty struct in signature")
				}
				return i + 1, nil
			}
			n, err := typeLen(sig[i:], depth+1)
			if err != nil {
				return 0, err
			}
			i += n
		}
	}
	return 0, fmt.Errorf("unknown type %q in signature", sig[0])
}

// alignment is the D-Bus alignment of a type.
func alignment(t byte) int {
	switch t {
	case 'n', 'q':
		return 2
	case 'b', 'i', 'u', 'h', 's', 'o', 'a':
		return 4
	case 'x', 't', 'd', '(', '{':
		return 8
	}
	return 1 // y, g, v
}

// encoder marshals the values a call needs: basic types, arrays of them,
// structs as []any and variants.
type encoder struct{ buf []byte }

func (e *encoder) align(n int) {
	for len(e.buf)%n != 0 {
		e.buf = append(e.buf, 0)
	}
}

func (e *encoder) uint32(v uint32) {
	e.align(4)
	e.buf = binary.LittleEndian.AppendUint32(e.buf, v)
}

func (e *encoder) str(s string) error {
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("string %q is not valid UTF-8 without NUL", s)
	}
	e.uint32(uint32(len(s)))
	e.buf = append(e.buf, s...)
	e.buf = append(e.buf, 0)
	return nil
}

func (e *encoder) value(t string, v any, depth int) error {
	if depth > maxDepth {
		return errors.New("value nested too deeply")
	}
	bad := func() error { return fmt.Errorf("cannot encode %T as %q", v, t) }
	switch t[0] {
	case 'y':
		b, ok := v.(byte)
		if !ok {
			return bad()
		}
		e.buf = append(e.buf, b)
	case 'b':
		b, ok := v.(bool)
		if !ok {
			return bad()
		}
		var n uint32
		if b {
			n = 1
		}
		e.uint32(n)
	case 'i':
		n, ok := v.(int32)
		if !ok {
			return bad()
		}
		e.uint32(uint32(n))
	case 'u':
		n, ok := v.(uint32)
		if !ok {
			return bad()
		}
		e.uint32(n)
	case 's':
		s, ok := v.(string)
		if !ok {
			return bad()
		}
		return e.str(s)
	case 'o':
		s, ok := v.(objectPath)
		if !ok {
			return bad()
		}
		return e.str(string(s))
	case 'g':
		s, ok := v.(signature)
		if !ok || len(s) > 255 {
			return bad()
		}
		e.buf = append(e.buf, byte(len(s)))
		e.buf = append(e.buf, s...)
		e.buf = append(e.buf, 0)
	case 'v':
		vv, ok := v.(variant)
		if !ok {
			return bad()
		}
		if err := e.value("g", signature(vv.sig), depth+1); err != nil {
			return err
		}
		return e.value(vv.sig, vv.value, depth+1)
	case 'a':
		elem := t[1:]
		var items []any
		switch x := v.(type) {
		case []string:
			for _, s := range x {
				items = append(items, s)
			}
		case []any:
			items = x
		default:
			return bad()
		}
		e.uint32(0)
		lenAt := len(e.buf) - 4
		e.align(alignment(elem[0]))
		start := len(e.buf)
		for _, item := range items {
			if err := e.value(elem, item, depth+1); err != nil {
				return err
			}
		}
		binary.LittleEndian.PutUint32(e.buf[lenAt:], uint32(len(e.buf)-start))
	case '(':
		fields, ok := v.([]any)
		if !ok {
			return bad()
		}
		types, err := splitSignature(t[1 : len(t)-1])
		if err != nil {
			return err
		}
		if len(types) != len(fields) {
			return bad()
		}
		e.align(8)
		for i, ft := range types {
			if err := e.value(ft, fields[i], depth+1); err != nil {
				return err
			}
		}
	default:
		return bad()
	}
	return nil
}

// decoder unmarshals any D-Bus value: basic types as the matching Go
// type (o as objectPath, g as signature, h as uint32), arrays, structs
// and dict entries as []any, variants as variant.
type decoder struct {
	buf   []byte
	pos   int
	order binary.ByteOrder
}

var errShort = errors.New("message ends inside a value")

func (d *decoder) align(n int) error {
	next := (d.pos + n - 1) &^ (n - 1)
	if next > len(d.buf) {
		return errShort
	}
	d.pos = next
	return nil
}

func (d *decoder) take(n int) ([]byte, error) {
	if n < 0 || n > len(d.buf)-d.pos {
		return nil, errShort
	}
	b := d.buf[d.pos : d.pos+n]
	d.pos += n
	return b, nil
}

func (d *decoder) fixed(t byte) (any, error) {
	size := alignment(t)
	if t == 'b' || t == 'h' {
		size = 4
	}
	if err := d.align(size); err != nil {
		return nil, err
	}
	b, err := d.take(size)
	if err != nil {
		return nil, err
	}
	switch t {
	case 'y':
		return b[0], nil
	case 'b':
		switch d.order.Uint32(b) {
		case 0:
			return false, nil
		case 1:
			return true, nil
		}
		return nil, errors.New("boolean neither 0 nor 1")
	case 'n':
		return int16(d.order.Uint16(b)), nil
	case 'q':
		return d.order.Uint16(b), nil
	case 'i':
		return int32(d.order.Uint32(b)), nil
	case 'u', 'h':
		return d.order.Uint32(b), nil
	case 'x':
		return int64(d.order.Uint64(b)), nil
	case 't':
		return d.order.Uint64(b), nil
	case 'd':
		return math.Float64frombits(d.order.Uint64(b)), nil
	}
	return nil, fmt.Errorf("type %q is not a fixed-size type", t)
}

func (d *decoder) str(lenBytes int) (string, error) {
	var n int
	if lenBytes == 1 {
		b, err := d.take(1)
		if err != nil {
			return "", err
		}
		n = int(b[0])
	} else {
		v, err := d.fixed('u')
		if err != nil {
			return "", err
		}
		n = int(v.(uint32))
	}
	b, err := d.take(n + 1)
	if err != nil {
		return "", err
	}
	if b[n] != 0 {
		return "", errors.New("string not NUL-terminated")
	}
	return string(b[:n]), nil
}

func (d *decoder) value(t string, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("value nested too deeply")
	}
	switch t[0] {
	case 's':
		return d.str(4)
	case 'o':
		s, err := d.str(4)
		return objectPath(s), err
	case 'g':
		s, err := d.str(1)
		return signature(s), err
	case 'v':
		s, err := d.str(1)
		if err != nil {
			return nil, err
		}
		types, err := splitSignature(s)
		if err != nil || len(types) != 1 {
			return nil, fmt.Errorf("variant signature %q is not one complete type", s)
		}
		v, err := d.value(s, depth+1)
		return variant{sig: s, value: v}, err
	case 'a':
		n, err := d.fixed('u')
		if err != nil {
			return nil, err
		}
		elem := t[1:]
		if err := d.align(alignment(elem[0])); err != nil {
			return nil, err
		}
		end := d.pos + int(n.(uint32))
		if end > len(d.buf) {
			return nil, errShort
		}
		items := []any{}
		for d.pos < end {
			v, err := d.value(elem, depth+1)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		if d.pos != end {
			return nil, errors.New("array elements overrun its length")
		}
		return items, nil
	case '(', '{':
		if err := d.align(8); err != nil {
			return nil, err
		}
		types, err := splitSignature(t[1 : len(t)-1])
		if err != nil {
			return nil, err
		}
		fields := make([]any, 0, len(types))
		for _, ft := range types {
			v, err := d.value(ft, depth+1)
			if err != nil {
				return nil, err
			}
			fields = append(fields, v)
		}
		return fields, nil
	}
	return d.fixed(t[0])
}
