package controller

import (
	"context"
	"errors"
	"net/http"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// ldapCheckTimeout bounds applying LDAP settings: a TLS connection, a
// bind and two searches.
const ldapCheckTimeout = 30 * time.Second

func (c *Controller) handleGetLDAP(w http.ResponseWriter, _ *http.Request, _ principal) *apiError {
	l, err := c.access.LDAP()
	if err != nil {
		return storeError(err, "ldap settings")
	}
	writeJSON(w, http.StatusOK, l)
	return nil
}

func (c *Controller) handleApplyLDAP(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	l, err := v1.DecodeLDAP(r.Body)
	if err != nil {
		return badInput(err)
	}
	ctx, cancel := context.WithTimeout(r.Context(), ldapCheckTimeout)
	defer cancel()
	applied, created, err := c.access.ApplyLDAP(ctx, *l)
	if err != nil {
		return accessError(err, "ldap settings")
	}
	c.log.Info("ldap settings applied", "url", applied.URL, "by", who.name)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, applied)
	return nil
}

func (c *Controller) handleDeleteLDAP(w http.ResponseWriter, _ *http.Request, who principal) *apiError {
	n, err := c.access.DeleteLDAP()
	if err != nil {
		return storeError(err, "ldap settings")
	}
	c.log.Info("ldap settings deleted", "by", who.name, "sessions_ended", n)
	writeJSON(w, http.StatusOK, v1.SessionsEnded{Ended: n})
	return nil
}

func (c *Controller) handleLookupLDAPUser(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	req, err := v1.DecodeLDAPLookupRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	info, err := c.access.LookupLDAPUser(r.Context(), req.Username)
	if errors.Is(err, store.ErrNotFound) {
		return refuse(http.StatusNotFound, v1.CodeNotFound, "%v", err)
	}
	if err != nil {
		return accessError(err, "ldap user")
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}
