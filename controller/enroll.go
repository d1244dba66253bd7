package controller

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"slices"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/store"
)

// handleEnroll exchanges a one-time token and a CSR for a node certificate.
// It runs over server-authenticated TLS; the token is the credential.
func (c *Controller) handleEnroll(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	resp, node, tokenID, err := c.enroll(r)
	if err != nil {
		c.metrics.enrollments.WithLabelValues(err.code).Inc()
		c.log.Warn("enrollment refused", "reason", err.code, "detail", err.message,
			"node", node, "token_id", tokenID, "remote", r.RemoteAddr)
		return err
	}
	c.metrics.enrollments.WithLabelValues("issued").Inc()
	c.log.Info("node enrolled", "node", node, "token_id", tokenID, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (c *Controller) enroll(r *http.Request) (resp *v1.CertificateResponse, node, tokenID string, _ *apiError) {
	req, csr, err := v1.DecodeEnrollRequest(r.Body)
	if err != nil {
		return nil, "", "", badInput(err)
	}
	id, secret, err := v1.SplitToken(req.Token)
	if err != nil {
		e := refuse(http.StatusBadRequest, v1.CodeTokenMalformed, "token %v", err)
		e.field = "token"
		return nil, "", "", e
	}
	now := c.now()
	tok, err := c.store.Token(id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", id, refuse(http.StatusUnauthorized, v1.CodeTokenUnknown, "token %s is not known to this controller", id)
	}
	if err != nil {
		return nil, "", id, storeError(err, "token")
	}
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(sum[:], tok.SecretHash) != 1 {
		// Same answer as an unknown id: a wrong secret reveals nothing.
		return nil, "", id, refuse(http.StatusUnauthorized, v1.CodeTokenUnknown, "token %s is not known to this controller", id)
	}
	if !tok.UsedAt.IsZero() {
		return nil, tok.Node, id, refuse(http.StatusUnauthorized, v1.CodeTokenUsed,
			"token %s was already used at %s; ask an admin for a new one (harmonyctl node token %s)", id, tok.UsedAt.UTC().Format(timeFormat), tok.Node)
	}
	if !now.Before(tok.ExpiresAt) {
		return nil, tok.Node, id, refuse(http.StatusUnauthorized, v1.CodeTokenExpired,
			"token %s expired at %s; ask an admin for a new one (harmonyctl node token %s)", id, tok.ExpiresAt.UTC().Format(timeFormat), tok.Node)
	}
	n, err := c.store.Node(tok.Node)
	if err != nil || n.UID != tok.NodeUID {
		return nil, tok.Node, id, refuse(http.StatusUnauthorized, v1.CodeTokenUnknown, "token %s belongs to a node that no longer exists", id)
	}
	if e := checkCSR(csr, n); e != nil {
		return nil, n.Name, id, e
	}
	cert, e := c.issueNodeCert(csr, n)
	if e != nil {
		return nil, n.Name, id, e
	}
	issued := store.Issued{Node: n.Name, NodeUID: n.UID, Serial: cert.SerialNumber.Text(16), NotAfter: cert.NotAfter}
	switch err := c.store.ConsumeToken(id, issued, now); {
	case errors.Is(err, store.ErrUsed):
		// Lost a race with a concurrent request holding the same token.
		return nil, n.Name, id, refuse(http.StatusUnauthorized, v1.CodeTokenUsed, "token %s was already used; ask an admin for a new one (harmonyctl node token %s)", id, n.Name)
	case errors.Is(err, store.ErrExpired):
		return nil, n.Name, id, refuse(http.StatusUnauthorized, v1.CodeTokenExpired, "token %s expired", id)
	case err != nil:
		return nil, n.Name, id, storeError(err, "token")
	}
	return c.certificateResponse(cert), n.Name, id, nil
}

const timeFormat = "2006-01-02T15:04:05Z"

// certificateResponse is the chain of a just-issued certificate and the
// trust anchor.
func (c *Controller) certificateResponse(cert *x509.Certificate) *v1.CertificateResponse {
	return &v1.CertificateResponse{Certificate: string(c.ca.ChainPEM(cert)), CABundle: string(c.ca.BundlePEM())}
}

// checkCSR applies the enrollment rules: a valid self-signature, a strong
// key, CN equal to the node's name and every SAN in its inventory.
func checkCSR(csr *x509.CertificateRequest, n store.Node) *apiError {
	if e := checkCSRKey(csr); e != nil {
		return e
	}
	if csr.Subject.CommonName != n.Name {
		return refuse(http.StatusForbidden, v1.CodeCNMismatch, "CSR common name %q is not this token's node %q", csr.Subject.CommonName, n.Name)
	}
	if len(csr.EmailAddresses) > 0 || len(csr.URIs) > 0 {
		return refuse(http.StatusForbidden, v1.CodeSANNotInventory, "CSR asks for e-mail or URI names; only the node's DNS names and IPs are allowed")
	}
	for _, d := range csr.DNSNames {
		if d != n.Name && !slices.Contains(n.DNSNames, d) {
			return refuse(http.StatusForbidden, v1.CodeSANNotInventory, "DNS name %q is not in node %s's inventory %v", d, n.Name, append([]string{n.Name}, n.DNSNames...))
		}
	}
	for _, ip := range csr.IPAddresses {
		if !inventoryHasIP(n, ip) {
			return refuse(http.StatusForbidden, v1.CodeSANNotInventory, "IP %s is not in node %s's inventory %v", ip, n.Name, n.IPs)
		}
	}
	return nil
}

// checkCSRKey refuses a CSR whose self-signature does not verify or whose
// key is weak.
func checkCSRKey(csr *x509.CertificateRequest) *apiError {
	if err := csr.CheckSignature(); err != nil {
		e := refuse(http.StatusBadRequest, v1.CodeCSRSignature, "CSR signature does not verify: %v", err)
		e.field = "csr"
		return e
	}
	if err := ca.CheckKeyStrength(csr.PublicKey); err != nil {
		e := refuse(http.StatusBadRequest, v1.CodeWeakKey, "CSR key refused: %v", err)
		e.field = "csr"
		return e
	}
	return nil
}

func inventoryHasIP(n store.Node, ip net.IP) bool {
	for _, have := range n.IPs {
		if parsed := net.ParseIP(have); parsed != nil && parsed.Equal(ip) {
			return true
		}
	}
	return false
}

// NodeLeaf is the certificate a node gets for csr, which checkCSR has
// accepted: its name as CN, the nodes' organization, its UID as the
// subject's serial number (a re-created node of the same name is another
// node), and serving use too: the agent serves its metrics over TLS with
// it.
func NodeLeaf(csr *x509.CertificateRequest, n store.Node, lifetime time.Duration) ca.Leaf {
	return ca.Leaf{
		CommonName:    n.Name,
		Organization:  v1.OrgNodes,
		SubjectSerial: n.UID,
		DNSNames:      csr.DNSNames,
		IPs:           csr.IPAddresses,
		PublicKey:     csr.PublicKey,
		Lifetime:      lifetime,
		ServerAuth:    true,
	}
}

func (c *Controller) issueNodeCert(csr *x509.CertificateRequest, n store.Node) (*x509.Certificate, *apiError) {
	cert, err := c.ca.Issue(NodeLeaf(csr, n, c.cfg.CertLifetime), c.now())
	if err != nil {
		return nil, refuse(http.StatusInternalServerError, v1.CodeInternal, "%v", err)
	}
	return cert, nil
}

// handleRenew issues a fresh certificate to a node that proves its current
// one. The node may rotate its key; the same CN and inventory rules apply.
func (c *Controller) handleRenew(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	resp, err := c.renew(r, who)
	if err != nil {
		c.metrics.renewals.WithLabelValues(err.code).Inc()
		c.log.Warn("renewal refused", "reason", err.code, "detail", err.message, "node", who.name, "remote", r.RemoteAddr)
		return err
	}
	c.metrics.renewals.WithLabelValues("issued").Inc()
	c.log.Info("node certificate renewed", "node", who.name)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (c *Controller) renew(r *http.Request, who principal) (*v1.CertificateResponse, *apiError) {
	csr, err := v1.DecodeRenewRequest(r.Body)
	if err != nil {
		return nil, badInput(err)
	}
	n, err := c.store.Node(who.name)
	if err != nil || n.UID != who.uid {
		// Deleted, or deleted and made again, since the request was
		// authenticated: issue nothing.
		return nil, refuse(http.StatusForbidden, v1.CodeNodeGone, "node %q has been deleted", who.name)
	}
	if e := checkCSR(csr, n); e != nil {
		return nil, e
	}
	cert, e := c.issueNodeCert(csr, n)
	if e != nil {
		return nil, e
	}
	issued := store.Issued{Node: n.Name, NodeUID: who.uid, Serial: cert.SerialNumber.Text(16), NotAfter: cert.NotAfter}
	if err := c.store.RecordRenewal(issued, c.now()); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, refuse(http.StatusForbidden, v1.CodeNodeGone, "node %q has been deleted", who.name)
		}
		return nil, storeError(err, "node")
	}
	return c.certificateResponse(cert), nil
}
