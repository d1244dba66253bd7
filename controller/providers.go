package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/cluster"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

// providerConnectTimeout bounds the check that a provider's vCenter
// answers and knows its inventory.
const providerConnectTimeout = 30 * time.Second

func (c *Controller) handleApplyProvider(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	p, err := v1.DecodeProvider(r.Body)
	if err != nil {
		return badInput(err)
	}
	if name := r.PathValue("name"); p.Name != name {
		return fieldRefusal("name", "%q does not match the provider in the URL %q", p.Name, name)
	}
	// The stored provider, with its password.
	old, err := c.provider(p.Name)
	existed := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return storeError(err, "provider")
	}
	keptPassword := p.VCenter.Password == ""
	switch {
	case keptPassword && !existed:
		return fieldRefusal("vcenter.password", "is required when a provider is first applied")
	case keptPassword:
		if e := refuseSecretMove(&old, p); e != nil {
			return e
		}
		p.VCenter.Password = old.VCenter.Password
	}
	// Check the inventory now, so that a typo fails here and not in the
	// middle of a cluster's creation.
	ctx, cancel := context.WithTimeout(r.Context(), providerConnectTimeout)
	defer cancel()
	s, err := vsphere.Connect(ctx, *p)
	if err != nil {
		var fe *vsphere.FieldError
		if errors.As(err, &fe) {
			return fieldRefusal(fe.Field, "%v", fe.Err)
		}
		e := refuse(http.StatusBadGateway, v1.CodeVCenterUnreachable, "%v", err)
		e.field = "vcenter"
		return e
	}

	now := c.now().UTC()
	p.CreatedAt, p.UpdatedAt = now, now
	var refusal *apiError
	err = c.store.Update(func(tx *store.Tx) error {
		// Decided again on what is stored now: another apply, or a cluster
		// created, may have come in during the vCenter check.
		var cur v1.Provider
		switch err := tx.Get(store.Providers, p.Name, &cur); {
		case err == nil:
			p.CreatedAt = cur.CreatedAt
			if refusal = checkProviderInUse(tx, &cur, p); refusal != nil {
				return nil
			}
			if keptPassword && (!existed || refuseSecretMove(&cur, p) != nil) {
				refusal = refuse(http.StatusConflict, v1.CodeConflict, "provider %q changed while it was being applied; apply it again", p.Name)
				return nil
			}
		case errors.Is(err, store.ErrNotFound):
			if existed {
				refusal = refuse(http.StatusConflict, v1.CodeConflict, "provider %q was deleted while it was being applied; apply it again", p.Name)
				return nil
			}
		default:
			return err
		}
		if err := tx.Put(store.Providers, p.Name, p.Redacted()); err != nil {
			return err
		}
		return tx.Put(store.Secrets, secretKeyProvider(p.Name), struct{ Password string }{p.VCenter.Password})
	})
	if err == nil && refusal != nil {
		go s.Logout(context.Background())
		return refusal
	}
	if err != nil {
		go s.Logout(context.Background())
		return storeError(err, "provider")
	}
	c.sessions.put(*p, s)
	c.log.Info("provider applied", "provider", p.Name, "vcenter", p.VCenter.URL, "by", who.name, "created", !existed)
	status := http.StatusOK
	if !existed {
		status = http.StatusCreated
	}
	writeJSON(w, status, p.Redacted())
	return nil
}

// refuseSecretMove refuses to reuse the stored password for a different
// destination: a changed URL, username, thumbprint or insecure flag could
// send it to another server, so the admin must give it again.
func refuseSecretMove(old, p *v1.Provider) *apiError {
	changed := ""
	switch {
	case old.VCenter.URL != p.VCenter.URL:
		changed = "vcenter.url"
	case old.VCenter.Username != p.VCenter.Username:
		changed = "vcenter.username"
	case old.VCenter.Insecure != p.VCenter.Insecure:
		changed = "vcenter.insecure"
	case old.VCenter.Thumbprint != p.VCenter.Thumbprint:
		changed = "vcenter.thumbprint"
	}
	if changed == "" {
		return nil
	}
	return &apiError{status: http.StatusUnprocessableEntity, code: v1.CodePasswordRequired, field: "vcenter.password",
		message: fmt.Sprintf("%s changed: give vcenter.password again (the stored password is never sent to a server it was not given for)", changed)}
}

// checkProviderInUse refuses to move a provider's VMs' location (vCenter,
// datacenter, compute, folder, network) while clusters use it: their VMs
// would be looked for where they are not. Credentials, datastores and the
// pool may change. It runs in the transaction that stores the change.
func checkProviderInUse(tx *store.Tx, old, p *v1.Provider) *apiError {
	moved := ""
	switch {
	case old.VCenter.URL != p.VCenter.URL:
		moved = "vcenter.url"
	case old.Datacenter != p.Datacenter:
		moved = "datacenter"
	case old.ComputeCluster != p.ComputeCluster:
		moved = "computeCluster"
	case old.ResourcePool != p.ResourcePool:
		moved = "resourcePool"
	case old.Folder != p.Folder:
		moved = "folder"
	case old.Network != p.Network:
		moved = "network"
	}
	if moved == "" {
		return nil
	}
	users, err := cluster.ProviderUsers(tx, p.Name)
	if err != nil {
		return storeError(err, "clusters")
	}
	if len(users) == 0 {
		return nil
	}
	return &apiError{status: http.StatusConflict, code: v1.CodeConflict, field: moved,
		message: fmt.Sprintf("cannot change %s while clusters %s use provider %q; make a new provider", moved, strings.Join(users, ", "), p.Name)}
}

func secretKeyProvider(name string) string { return "provider/" + name }

// provider returns a provider with its password, for connecting.
func (c *Controller) provider(name string) (v1.Provider, error) {
	var p v1.Provider
	err := c.store.View(func(tx *store.Tx) error {
		if err := tx.Get(store.Providers, name, &p); err != nil {
			return err
		}
		var sec struct{ Password string }
		if err := tx.Get(store.Secrets, secretKeyProvider(name), &sec); err != nil {
			return err
		}
		p.VCenter.Password = sec.Password
		return nil
	})
	return p, err
}

func (c *Controller) handleListProviders(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	var list v1.ProviderList
	err := c.store.View(func(tx *store.Tx) error {
		var err error
		list.Items, err = store.ListJSON[v1.Provider](tx, store.Providers, "")
		return err
	})
	if err != nil {
		return storeError(err, "providers")
	}
	if list.Items == nil {
		list.Items = []v1.Provider{}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (c *Controller) handleGetProvider(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	var p v1.Provider
	name := r.PathValue("name")
	if err := c.store.View(func(tx *store.Tx) error { return tx.Get(store.Providers, name, &p) }); err != nil {
		return storeError(err, fmt.Sprintf("provider %q", name))
	}
	writeJSON(w, http.StatusOK, p.Redacted())
	return nil
}

func (c *Controller) handleDeleteProvider(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	name := r.PathValue("name")
	var users []string
	err := c.store.Update(func(tx *store.Tx) error {
		if !tx.Has(store.Providers, name) {
			return fmt.Errorf("provider %q: %w", name, store.ErrNotFound)
		}
		clusters, err := cluster.ProviderUsers(tx, name)
		if err != nil {
			return err
		}
		for _, cl := range clusters {
			users = append(users, "cluster "+cl)
		}
		if len(users) > 0 {
			return nil
		}
		if err := tx.DeletePrefix(store.Images, name+"/"); err != nil {
			return err
		}
		if err := tx.Delete(store.Secrets, secretKeyProvider(name)); err != nil {
			return err
		}
		return tx.Delete(store.Providers, name)
	})
	if err != nil {
		return storeError(err, fmt.Sprintf("provider %q", name))
	}
	if len(users) > 0 {
		return refuse(http.StatusConflict, v1.CodeConflict, "provider %q is in use by %s", name, strings.Join(users, ", "))
	}
	c.sessions.drop(name)
	c.log.Info("provider deleted", "provider", name, "by", who.name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func fieldRefusal(field, format string, args ...any) *apiError {
	e := refuse(http.StatusBadRequest, v1.CodeBadRequest, format, args...)
	e.field = field
	return e
}

// sessions keeps one logged-in vCenter session per provider and makes a
// new one when the provider changes or the session has expired. Callers
// share it: the image import, the cluster engine's passes and the
// pre-checks may all use it at once.
type sessions struct {
	// mu is held across the check and the login, so that callers racing
	// for an expired session make one new session, not one each that
	// then replace one another under their users.
	mu sync.Mutex
	m  map[string]cachedSession
	// retireGrace is how long a replaced session stays logged in for
	// the calls that still hold it.
	retireGrace time.Duration
}

type cachedSession struct {
	s    *vsphere.Session
	hash string
}

// sessionRetireGrace outlasts any one vCenter call the controller makes
// (a clone of the largest disk, an OVA upload's lease is renewed on its
// own session).
const sessionRetireGrace = 30 * time.Minute

func newSessions() *sessions {
	return &sessions{m: map[string]cachedSession{}, retireGrace: sessionRetireGrace}
}

func providerHash(p v1.Provider) string {
	p.CreatedAt, p.UpdatedAt = time.Time{}, time.Time{}
	sum := sha256.Sum256(fmt.Appendf(nil, "%#v", p))
	return hex.EncodeToString(sum[:])
}

func (ss *sessions) put(p v1.Provider, s *vsphere.Session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.putLocked(p, s)
}

func (ss *sessions) putLocked(p v1.Provider, s *vsphere.Session) {
	if old, ok := ss.m[p.Name]; ok && old.s != s {
		ss.retire(old.s)
	}
	ss.m[p.Name] = cachedSession{s: s, hash: providerHash(p)}
}

// retire logs a replaced session out once the calls that may still hold
// it have had time to end: logged out at once, they fail with
// NotAuthenticated, and a task wait on it can hang.
func (ss *sessions) retire(s *vsphere.Session) {
	time.AfterFunc(ss.retireGrace, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Logout(ctx)
	})
}

func (ss *sessions) drop(name string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if old, ok := ss.m[name]; ok {
		ss.retire(old.s)
		delete(ss.m, name)
	}
}

// get returns a live session for the provider (with its password).
func (ss *sessions) get(ctx context.Context, p v1.Provider) (*vsphere.Session, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	cached, ok := ss.m[p.Name]
	if ok && cached.hash == providerHash(p) && cached.s.Active(ctx) {
		return cached.s, nil
	}
	s, err := vsphere.Connect(ctx, p)
	if err != nil {
		return nil, err
	}
	ss.putLocked(p, s)
	return s, nil
}

func (ss *sessions) closeAll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for name, cs := range ss.m {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = cs.s.Logout(ctx)
		cancel()
		delete(ss.m, name)
	}
}
