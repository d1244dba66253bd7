package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/ca"
)

// referenceServeFlag makes this binary the reference TLS server. It is
// checked before flag parsing, so it appears in no usage text.
const referenceServeFlag = "-serve-tls-reference"

// referenceProc is the reference TLS server: TLS handshakes and nothing
// else, in its own process, with the same certificate shape and server
// settings as the controller.
type referenceProc struct {
	*child
	addr string
	pool *x509.CertPool
}

// startReference issues a server chain the way the controller does (an
// ECDSA P-256 leaf under an ECDSA P-256 CA made by controller/ca) and
// starts this binary as the reference server on a loopback port.
func startReference(ctx context.Context, tmp string) (*referenceProc, error) {
	dir := filepath.Join(tmp, "reference")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("reference server: %w", err)
	}
	now := time.Now()
	refCA, err := ca.Create(dir, "Harmony bench reference CA", now)
	if err != nil {
		return nil, fmt.Errorf("reference CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("reference key: %w", err)
	}
	// The same fields as the controller's serving certificate.
	dns := []string{"localhost"}
	if h, err := os.Hostname(); err == nil {
		dns = append(dns, h)
	}
	leaf, err := refCA.Issue(ca.Leaf{
		CommonName:   "harmony-controller",
		Organization: v1.OrgControllers,
		DNSNames:     dns,
		IPs:          []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		PublicKey:    &key.PublicKey,
		Lifetime:     30 * 24 * time.Hour,
		ServerAuth:   true,
	}, now)
	if err != nil {
		return nil, fmt.Errorf("reference certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("reference key: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(certPath, refCA.ChainPEM(leaf), 0o600); err != nil {
		return nil, fmt.Errorf("reference certificate: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, fmt.Errorf("reference key: %w", err)
	}

	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this binary to re-run it: %w", err)
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	ch, err := startChild("reference TLS server", filepath.Join(tmp, "reference.log"), exe,
		referenceServeFlag, addr, "-cert", certPath, "-key", keyPath)
	if err != nil {
		return nil, err
	}
	r := &referenceProc{child: ch, addr: addr, pool: refCA.Pool()}
	readyCtx, cancel := phase(ctx, 30*time.Second)
	defer cancel()
	err = poll(readyCtx, 50*time.Millisecond, func() (bool, error) {
		if err := ch.exitedErr(); err != nil {
			return false, err
		}
		return handshakeOnce(readyCtx, addr, r.pool) == nil, nil
	})
	if err != nil {
		_ = ch.stop(10 * time.Second)
		return nil, fmt.Errorf("wait for the reference TLS server at %s: %w", addr, err)
	}
	return r, nil
}

// handshakeOnce is one reference unit of work: dial, full handshake, close.
// The client settings are those of an enrolling node (no session cache, so
// never a resumption).
func handshakeOnce(ctx context.Context, addr string, pool *x509.CertPool) error {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: enrollTLSConfig(pool)}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// handshakes runs n reference handshakes on workers goroutines.
func (r *referenceProc) handshakes(ctx context.Context, o out, n, workers int) (timing, error) {
	// Warm up the server's lazily built tables, as the controller was by
	// the earlier phases.
	for range 16 {
		if err := handshakeOnce(ctx, r.addr, r.pool); err != nil {
			return timing{}, fmt.Errorf("warm-up handshake: %w", err)
		}
	}
	lat := make([]time.Duration, n)
	start := time.Now()
	err := forEach(ctx, o, "handshakes", n, workers, func(ctx context.Context, _, i int) error {
		t0 := time.Now()
		err := handshakeOnce(ctx, r.addr, r.pool)
		lat[i] = time.Since(t0)
		if err != nil {
			return fmt.Errorf("handshake %d: %w", i, err)
		}
		return nil
	})
	total := time.Since(start)
	if err != nil {
		return timing{}, err
	}
	return timing{n: n, total: total, latency: summarize(lat)}, nil
}

// serveReference is the child process: a TLS server configured as the
// controller's listener is (TLS 1.2+, client certificate requested but not
// required, h2 and http/1.1 offered) that completes each handshake, waits
// for the client to close, and closes.
func serveReference(args []string) error {
	if len(args) < 1 {
		return errors.New("usage: " + referenceServeFlag + " 127.0.0.1:PORT -cert FILE -key FILE")
	}
	addr := args[0]
	if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
		return fmt.Errorf("listen address %q: only 127.0.0.1 is allowed", addr)
	}
	fs := flag.NewFlagSet(referenceServeFlag, flag.ContinueOnError)
	certPath := fs.String("cert", "", "PEM certificate chain")
	keyPath := fs.String("key", "", "PEM private key")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(*certPath, *keyPath)
	if err != nil {
		return fmt.Errorf("load certificate: %w", err)
	}
	conf := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequestClientCert,
		NextProtos:   []string{"h2", "http/1.1"},
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Out of descriptors and the like: back off as net/http does.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		go func() {
			tc := tls.Server(conn, conf)
			defer tc.Close()
			_ = tc.SetDeadline(time.Now().Add(30 * time.Second))
			if tc.HandshakeContext(ctx) == nil {
				_, _ = io.Copy(io.Discard, tc) // until the client closes
			}
		}()
	}
}
