package controller

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/controller/store"
)

// Lifetimes of the certificates people hold. An admin's is short, renewed
// with `harmonyctl cert renew-admin`; a scraper's is long, because a
// Prometheus server is configured by hand. Both are recorded, and both
// can be revoked.
const (
	DefaultAdminCertLifetime = 30 * 24 * time.Hour
	scraperCertLifetime      = 365 * 24 * time.Hour
)

// issueRecorded issues an admin or scraper certificate and records it, so
// that every request can check that it is still wanted.
func (c *Controller) issueRecorded(kind, name string, pub crypto.PublicKey, lifetime time.Duration, by string) (*x509.Certificate, error) {
	now := c.now()
	cert, err := c.ca.Issue(ca.Leaf{CommonName: name, Organization: kind, PublicKey: pub, Lifetime: lifetime}, now)
	if err != nil {
		return nil, err
	}
	rec := store.Cert{Serial: serialOf(cert), Kind: kind, Name: name, IssuedAt: now.UTC(), NotAfter: cert.NotAfter, IssuedBy: by}
	if err := c.store.RecordCert(rec, now); err != nil {
		return nil, fmt.Errorf("record certificate %s: %w", rec.Serial, err)
	}
	return cert, nil
}

func serialOf(cert *x509.Certificate) string { return cert.SerialNumber.Text(16) }

// NewAdminConfig issues a recorded admin certificate with a key made here,
// and returns a client config that uses it.
func (c *Controller) NewAdminConfig(name, by string) (*clientconfig.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("admin key: %w", err)
	}
	cert, err := c.issueRecorded(v1.OrgAdmins, name, &key.PublicKey, c.cfg.AdminCertLifetime, by)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode admin key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	c.log.Info("admin certificate issued", "name", name, "serial", serialOf(cert), "not_after", cert.NotAfter, "by", by)
	return clientconfig.New(c.URL(), c.ca.BundlePEM(), c.ca.ChainPEM(cert), keyPEM), nil
}

// checkRecorded refuses an admin or scraper certificate that is revoked
// or that the store has no record of (issued before a restore, or by a
// controller that did not record it).
func (c *Controller) checkRecorded(leaf *x509.Certificate, who principal) *apiError {
	rec, err := c.store.Cert(serialOf(leaf))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return refuse(http.StatusUnauthorized, v1.CodeCertRevoked, "%s certificate %s (%q) is not one this controller has a record of; get a new one", who.kind, serialOf(leaf), who.name)
	case err != nil:
		return storeError(err, "certificate")
	case rec.Revoked():
		return refuse(http.StatusUnauthorized, v1.CodeCertRevoked, "%s certificate %s (%q) was revoked at %s by %s", who.kind, rec.Serial, who.name, rec.RevokedAt.Format(timeFormat), rec.RevokedBy)
	case rec.Kind != who.kind:
		return refuse(http.StatusUnauthorized, v1.CodeCertRevoked, "certificate %s was recorded as %s, not %s", rec.Serial, rec.Kind, who.kind)
	}
	return nil
}

func (c *Controller) handleScraperCert(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	req, csr, err := v1.DecodeScraperCertRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	if e := checkCSRKey(csr); e != nil {
		return e
	}
	cert, err := c.issueRecorded(v1.OrgScrapers, req.Name, csr.PublicKey, scraperCertLifetime, who.name)
	if err != nil {
		return internalError("issue", err)
	}
	c.log.Info("scraper certificate issued", "name", req.Name, "serial", serialOf(cert), "by", who.name, "not_after", cert.NotAfter)
	writeJSON(w, http.StatusOK, c.certificateResponse(cert))
	return nil
}

// handleRenewAdmin issues the calling admin a new certificate, under the
// same name, for a key the admin made. The old one stays valid until it
// expires or is revoked (harmonyctl revokes it once the new one works).
func (c *Controller) handleRenewAdmin(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	_, csr, err := v1.DecodeAdminCertRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	if e := checkCSRKey(csr); e != nil {
		return e
	}
	cert, err := c.issueRecorded(v1.OrgAdmins, who.name, csr.PublicKey, c.cfg.AdminCertLifetime, who.name)
	if err != nil {
		return internalError("issue", err)
	}
	c.log.Info("admin certificate renewed", "name", who.name, "serial", serialOf(cert), "previous", who.serial, "not_after", cert.NotAfter)
	writeJSON(w, http.StatusOK, c.certificateResponse(cert))
	return nil
}

func (c *Controller) handleListCerts(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	recs, err := c.store.Certs()
	if err != nil {
		return storeError(err, "certificates")
	}
	list := v1.CertificateList{Items: []v1.Certificate{}}
	for _, rec := range recs {
		list.Items = append(list.Items, certView(rec, who))
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (c *Controller) handleRevokeCert(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	serial := r.PathValue("serial")
	if err := v1.ValidateSerial(serial); err != nil {
		return badInput(err)
	}
	rec, err := c.store.RevokeCert(serial, who.name, c.now())
	switch {
	case errors.Is(err, store.ErrLastAdmin):
		e := refuse(http.StatusConflict, v1.CodeLastAdmin, "%v: renew or issue another admin certificate first (harmonyctl cert renew-admin)", err)
		e.field = "serial"
		return e
	case err != nil:
		return storeError(err, fmt.Sprintf("certificate %s", serial))
	}
	c.log.Info("certificate revoked", "serial", serial, "kind", rec.Kind, "name", rec.Name, "by", who.name)
	writeJSON(w, http.StatusOK, certView(rec, who))
	return nil
}

func certView(rec store.Cert, who principal) v1.Certificate {
	return v1.Certificate{
		Serial: rec.Serial, Kind: rec.Kind, Name: rec.Name, IssuedAt: rec.IssuedAt, NotAfter: rec.NotAfter,
		IssuedBy: rec.IssuedBy, RevokedAt: rec.RevokedAt, RevokedBy: rec.RevokedBy, Current: rec.Serial == who.serial,
	}
}
