package controller

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/randstr"
)

func (c *Controller) handleAddNode(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	spec, ttl, err := v1.DecodeNodeSpec(r.Body)
	if err != nil {
		return badInput(err)
	}
	res, e := c.AddNode(*spec, ttl)
	if e != nil {
		return e
	}
	c.log.Info("node added", "node", spec.Name, "cluster", spec.Cluster, "role", spec.Role, "by", who.name,
		"token_id", tokenID(res.Bootstrap.Token), "token_expires", ttl.String())
	writeJSON(w, http.StatusCreated, res)
	return nil
}

// AddNode creates a node record, its first role and a bootstrap token, and
// returns the node's bootstrap document.
func (c *Controller) AddNode(spec v1.NodeSpec, ttl time.Duration) (*v1.NodeWithBootstrap, *apiError) {
	uid, err := randstr.Hex(16)
	if err != nil {
		return nil, refuse(http.StatusInternalServerError, v1.CodeInternal, "%v", err)
	}
	now := c.now().UTC()
	n := store.Node{
		Name: spec.Name, UID: uid, Cluster: spec.Cluster, Role: spec.Role,
		IPs: spec.IPs, DNSNames: spec.DNSNames, CreatedAt: now,
	}
	token, tok, err := newToken(n, ttl, now)
	if err != nil {
		return nil, refuse(http.StatusInternalServerError, v1.CodeInternal, "%v", err)
	}
	role := v1.Role{
		APIVersion: v1.APIVersion, Kind: "Role", NodeName: n.Name, Role: n.Role,
		Cluster:   v1.ClusterSettings{Name: n.Cluster},
		Addresses: v1.NodeAddresses{IPs: n.IPs, DNSNames: n.DNSNames},
	}
	rev, err := c.store.CreateNode(n, role, tok)
	if err != nil {
		return nil, storeError(err, fmt.Sprintf("node %q", n.Name))
	}
	view := nodeView(n)
	view.RoleRevision = rev
	return &v1.NodeWithBootstrap{Node: view, Bootstrap: c.bootstrapFor(n.Name, token, spec.CAPinOnly)}, nil
}

func (c *Controller) handleNewToken(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	req, ttl, err := v1.DecodeTokenRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	name := r.PathValue("name")
	n, err := c.store.Node(name)
	if err != nil {
		return storeError(err, fmt.Sprintf("node %q", name))
	}
	token, tok, err := newToken(n, ttl, c.now().UTC())
	if err != nil {
		return refuse(http.StatusInternalServerError, v1.CodeInternal, "%v", err)
	}
	if err := c.store.ReplaceToken(tok); err != nil {
		return storeError(err, fmt.Sprintf("node %q", name))
	}
	c.log.Info("bootstrap token issued", "node", name, "by", who.name, "token_id", tok.ID, "token_expires", ttl.String())
	writeJSON(w, http.StatusCreated, v1.NodeWithBootstrap{Node: nodeView(n), Bootstrap: c.bootstrapFor(name, token, req.CAPinOnly)})
	return nil
}

// newToken makes "<id>.<secret>" with a 64-bit public id and a 256-bit
// secret, and the record that stores only the secret's hash.
func newToken(n store.Node, ttl time.Duration, now time.Time) (string, store.Token, error) {
	id, err := randstr.Hex(8)
	if err != nil {
		return "", store.Token{}, err
	}
	secret, err := randstr.Hex(32)
	if err != nil {
		return "", store.Token{}, err
	}
	sum := sha256.Sum256([]byte(secret))
	return id + "." + secret, store.Token{
		ID: id, Node: n.Name, NodeUID: n.UID, SecretHash: sum[:], CreatedAt: now, ExpiresAt: now.Add(ttl),
	}, nil
}

func (c *Controller) bootstrapFor(node, token string, pinOnly bool) v1.Bootstrap {
	b := v1.Bootstrap{
		APIVersion: v1.APIVersion, Kind: "Bootstrap", Controllers: c.advertiseURLs,
		NodeName: node, Token: token, CAPin: c.ca.Pin(),
	}
	if !pinOnly {
		b.CABundle = string(c.ca.BundlePEM())
	}
	return b
}

func (c *Controller) handleListNodes(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	nodes, err := c.store.Nodes()
	if err != nil {
		return storeError(err, "nodes")
	}
	list := v1.NodeList{Items: []v1.Node{}}
	for _, n := range nodes {
		list.Items = append(list.Items, c.nodeWithState(n))
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (c *Controller) handleGetNode(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	name := r.PathValue("name")
	n, err := c.store.Node(name)
	if err != nil {
		return storeError(err, fmt.Sprintf("node %q", name))
	}
	writeJSON(w, http.StatusOK, c.nodeWithState(n))
	return nil
}

func (c *Controller) nodeWithState(n store.Node) v1.Node {
	view := nodeView(n)
	if role, err := c.store.Role(n.Name); err == nil {
		view.RoleRevision = role.Revision
	}
	if st, err := c.store.Status(n.Name); err == nil {
		view.Status = &st
	}
	return view
}

func (c *Controller) handleDeleteNode(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	name := r.PathValue("name")
	if err := c.store.DeleteNode(name); err != nil {
		return storeError(err, fmt.Sprintf("node %q", name))
	}
	c.log.Info("node deleted", "node", name, "by", who.name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (c *Controller) handleGetRole(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	name := r.PathValue("name")
	role, err := c.store.Role(name)
	if err != nil {
		return storeError(err, fmt.Sprintf("role of node %q", name))
	}
	writeJSON(w, http.StatusOK, role)
	return nil
}

func (c *Controller) handleSetRole(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	role, err := v1.DecodeRole(r.Body)
	if err != nil {
		return badInput(err)
	}
	if name := r.PathValue("name"); role.NodeName != name {
		e := refuse(http.StatusBadRequest, v1.CodeBadRequest, "nodeName %q does not match the node in the URL %q", role.NodeName, name)
		e.field = "nodeName"
		return e
	}
	return c.setRoles(w, who, []v1.Role{*role})
}

func (c *Controller) handleSetRoles(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	list, err := v1.DecodeRoleList(r.Body)
	if err != nil {
		return badInput(err)
	}
	return c.setRoles(w, who, list.Items)
}

func (c *Controller) setRoles(w http.ResponseWriter, who principal, roles []v1.Role) *apiError {
	rev, err := c.store.SetRoles(roles)
	var mismatch *store.RoleMismatchError
	switch {
	case errors.As(err, &mismatch):
		e := refuse(http.StatusBadRequest, v1.CodeBadRequest, "%v", mismatch)
		e.field = "role"
		if len(roles) > 1 {
			e.field = fmt.Sprintf("items[%d].role", mismatch.Index)
		}
		return e
	case errors.Is(err, store.ErrNotFound):
		return refuse(http.StatusNotFound, v1.CodeNotFound, "%v", err)
	case err != nil:
		return storeError(err, "roles")
	}
	c.log.Info("roles changed", "nodes", len(roles), "revision", rev, "by", who.name)
	if len(roles) == 1 {
		updated, err := c.store.Role(roles[0].NodeName)
		if err != nil {
			return storeError(err, "role")
		}
		writeJSON(w, http.StatusOK, updated)
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]int64{"revision": rev})
	return nil
}

func nodeView(n store.Node) v1.Node {
	return v1.Node{
		Name: n.Name, UID: n.UID, Cluster: n.Cluster, Role: n.Role, IPs: n.IPs, DNSNames: n.DNSNames,
		CreatedAt: n.CreatedAt, EnrolledAt: n.EnrolledAt, CertificateSerial: n.CertSerial, CertificateNotAfter: n.CertNotAfter,
	}
}

func tokenID(token string) string {
	id, _, err := v1.SplitToken(token)
	if err != nil {
		return ""
	}
	return id
}
