package controller

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"sync"
	"time"
)

// A connection's client certificate does not change, and this
// controller's CA is fixed for its life, so a client's chain is verified
// once per connection; the connection's later requests check only the
// chain's validity window. Revocation, and a node's existence, are still
// checked on every request (authenticate). Agents and admin tools keep
// their connections, so this spares the chain's signature check on almost
// every request.

type verifiedChainKey struct{}

// verifiedChain is one connection's verified client certificate and the
// window in which its chain (the certificate and the CA) is valid.
type verifiedChain struct {
	mu                  sync.Mutex
	leaf                *x509.Certificate
	notBefore, notAfter time.Time
}

// withVerifiedChain is the API server's ConnContext: each connection gets
// its own record.
func withVerifiedChain(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, verifiedChainKey{}, &verifiedChain{})
}

// verifyClient verifies leaf, the request's client certificate, against
// the CA: in full once per connection, then by the chain's window. Outside
// it, the full check gives the reason.
func (c *Controller) verifyClient(r *http.Request, leaf *x509.Certificate) error {
	now := c.now()
	vc, _ := r.Context().Value(verifiedChainKey{}).(*verifiedChain)
	if vc != nil {
		vc.mu.Lock()
		known := vc.leaf == leaf && !now.Before(vc.notBefore) && !now.After(vc.notAfter)
		vc.mu.Unlock()
		if known {
			return nil
		}
	}
	if err := c.ca.Verify(leaf, now); err != nil {
		return err
	}
	if vc != nil {
		ca := c.ca.Certificate()
		vc.mu.Lock()
		vc.leaf = leaf
		vc.notBefore = latest(leaf.NotBefore, ca.NotBefore)
		vc.notAfter = earliest(leaf.NotAfter, ca.NotAfter)
		vc.mu.Unlock()
	}
	return nil
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
