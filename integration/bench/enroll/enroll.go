package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"time"

	"github.com/harmonykaas/harmony/agent/controlclient"
	"github.com/harmonykaas/harmony/agent/identity"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

// node is one simulated machine: its record, its bootstrap document and,
// once enrolled, its identity.
type node struct {
	name      string
	bootstrap v1.Bootstrap
	revision  int64 // role revision when the record was created
	key       *ecdsa.PrivateKey
	csr       string
	chainPEM  []byte
	cert      *tls.Certificate
}

func nodeName(i int) string { return fmt.Sprintf("bench-%05d", i+1) }

// createNodes adds every node record through the admin API.
func createNodes(ctx context.Context, o out, p *controllerProc, nodes []*node, workers int) (time.Duration, error) {
	admins := make([]*client.Client, min(workers, len(nodes)))
	for i := range admins {
		var err error
		if admins[i], err = p.newAdmin(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	err := forEach(ctx, o, "created", len(nodes), workers, func(ctx context.Context, w, i int) error {
		n := nodes[i]
		spec := v1.NodeSpec{Name: n.name, Cluster: "bench", Role: v1.RoleWorker, IPs: []string{"127.0.0.1"}}
		res, err := admins[w].AddNode(ctx, spec)
		if err != nil {
			return fmt.Errorf("create node %s: %w", n.name, err)
		}
		n.bootstrap, n.revision = res.Bootstrap, res.Node.RoleRevision
		return nil
	})
	return time.Since(start), err
}

// prepareKeys makes each node's key and CSR as the agent does. It is node
// work, done by each machine in parallel in a real fleet, so it is kept out
// of the timed phases, where it would take CPU from the controller.
func prepareKeys(ctx context.Context, o out, nodes []*node, workers int) error {
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	return forEach(ctx, o, "", len(nodes), workers, func(_ context.Context, _, i int) error {
		n := nodes[i]
		key, err := identity.NewKey()
		if err != nil {
			return err
		}
		csr, err := identity.CSR(key, n.name, nil, loopback)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.name, err)
		}
		n.key, n.csr = key, csr
		return nil
	})
}

// timing is what one phase of n operations took.
type timing struct {
	n       int
	total   time.Duration
	latency latency
	// handshake is the TLS part of each enrollment.
	handshake latency
}

func (r timing) rate() float64 { return rate(r.n, r.total) }

// enrollNodes enrolls each node with a new controlclient, hence a new TLS
// connection and a full handshake, as each machine of a fleet does. The
// latency of one enrollment runs from the start of the request (before the
// dial) to the decoded answer.
func enrollNodes(ctx context.Context, o out, nodes []*node, pool *x509.CertPool, workers int) (timing, error) {
	lat := make([]time.Duration, len(nodes))
	hs := make([]time.Duration, len(nodes))
	start := time.Now()
	err := forEach(ctx, o, "enrolled", len(nodes), workers, func(ctx context.Context, _, i int) error {
		n := nodes[i]
		var hsStart time.Time
		trace := &httptrace.ClientTrace{
			TLSHandshakeStart: func() { hsStart = time.Now() },
			TLSHandshakeDone:  func(tls.ConnectionState, error) { hs[i] = time.Since(hsStart) },
		}
		c := controlclient.New(n.bootstrap.Controllers, pool, nil)
		defer c.Close()
		var resp v1.CertificateResponse
		t0 := time.Now()
		_, err := c.Do(httptrace.WithClientTrace(ctx, trace), http.MethodPost, v1.PathEnroll, nil,
			v1.EnrollRequest{Token: n.bootstrap.Token, CSR: n.csr}, &resp)
		lat[i] = time.Since(t0)
		if err != nil {
			return fmt.Errorf("enroll %s: %w", n.name, err)
		}
		n.chainPEM = []byte(resp.Certificate)
		return nil
	})
	total := time.Since(start)
	if err != nil {
		return timing{}, err
	}
	return timing{n: len(nodes), total: total, latency: summarize(lat), handshake: summarize(hs)}, nil
}

// buildIdentities checks each issued chain as the agent does and keeps the
// certificate the node presents from now on.
func buildIdentities(nodes []*node) error {
	for _, n := range nodes {
		e := identity.Enrollment{NodeName: n.name, Controllers: n.bootstrap.Controllers, EnrolledAt: time.Now().UTC()}
		id, err := identity.New(e, n.key, n.chainPEM, []byte(n.bootstrap.CABundle))
		if err != nil {
			return fmt.Errorf("identity of %s: %w", n.name, err)
		}
		n.cert = &id.Cert
	}
	return nil
}

// probeTLS makes one connection with the client settings the enrollment
// transport uses and reports what was negotiated, so the reference can be
// checked to match.
func probeTLS(ctx context.Context, addr string, pool *x509.CertPool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conf := enrollTLSConfig(pool)
	requested := false
	conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		requested = true
		return &tls.Certificate{}, nil // what an enrolling node sends: none
	}
	d := tls.Dialer{Config: conf}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("probe %s: %w", addr, err)
	}
	defer conn.Close()
	st := conn.(*tls.Conn).ConnectionState()
	leaf := st.PeerCertificates[0]
	keyDesc := leaf.PublicKeyAlgorithm.String()
	if k, ok := leaf.PublicKey.(*ecdsa.PublicKey); ok {
		keyDesc = "ECDSA " + k.Curve.Params().Name
	}
	return fmt.Sprintf("%s, %s, key exchange %s, server key %s (chain of %d), ALPN %q, client certificate requested: %v",
		tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite), st.CurveID, keyDesc,
		len(st.PeerCertificates), st.NegotiatedProtocol, requested), nil
}

// enrollTLSConfig is what controlclient.New sets up without a client
// certificate. Its HTTP/1.1 transport offers no ALPN protocol.
func enrollTLSConfig(pool *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}
