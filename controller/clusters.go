package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/cluster"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

// The cluster API: each handler decodes, calls one method of the cluster
// service and encodes its answer or refusal.

func (c *Controller) handleCreateCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	spec, err := v1.DecodeClusterSpec(r.Body)
	if err != nil {
		return badInput(err)
	}
	op, err := c.clusters.Create(r.Context(), spec, who.name)
	return answerOperation(w, op, err)
}

func (c *Controller) handleScaleCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	req, err := v1.DecodeScaleRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	op, err := c.clusters.Scale(r.Context(), r.PathValue("name"), *req, who.name)
	return answerOperation(w, op, err)
}

func (c *Controller) handleUpgradeCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	req, err := v1.DecodeUpgradeRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	op, err := c.clusters.Upgrade(r.Context(), r.PathValue("name"), *req, who.name)
	return answerOperation(w, op, err)
}

func (c *Controller) handleRestoreCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	req, err := v1.DecodeRestoreRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	op, err := c.clusters.Restore(r.PathValue("name"), *req, who.name)
	return answerOperation(w, op, err)
}

func (c *Controller) handleSnapshotCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	op, err := c.clusters.SnapshotEtcd(r.PathValue("name"), who.name)
	return answerOperation(w, op, err)
}

func (c *Controller) handleRemoveNode(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	keepVM, err := boolParam(r, "keepVM")
	if err != nil {
		return badInput(err)
	}
	op, err := c.clusters.RemoveNode(r.PathValue("name"), r.PathValue("node"), keepVM, who.name)
	return answerOperation(w, op, err)
}

func (c *Controller) handleReplaceNode(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	req, err := v1.DecodeReplaceNodeRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	op, err := c.clusters.ReplaceNode(r.PathValue("name"), r.PathValue("node"), *req, who.name)
	return answerOperation(w, op, err)
}

func (c *Controller) handleDeleteCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	purge, err := boolParam(r, "purge")
	if err != nil {
		return badInput(err)
	}
	op, err := c.clusters.Delete(r.PathValue("name"), purge, who.name)
	return answerOperation(w, op, err)
}

func (c *Controller) handleListLeftovers(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	items, err := c.clusters.Leftovers()
	if err != nil {
		return clusterError(err)
	}
	writeJSON(w, http.StatusOK, v1.ClusterLeftoversList{Items: items})
	return nil
}

func (c *Controller) handlePurgeLeftovers(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	gone, err := c.clusters.PurgeLeftovers(r.Context(), r.PathValue("id"), who.name)
	if err != nil {
		return clusterError(err)
	}
	writeJSON(w, http.StatusOK, gone)
	return nil
}

func (c *Controller) handleRetryCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	op, err := c.clusters.Retry(r.PathValue("name"), who.name)
	return answerOperation(w, op, err)
}

func (c *Controller) handleListClusters(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	items, err := c.clusters.List()
	if err != nil {
		return clusterError(err)
	}
	if items, err = c.visibleClusters(who, items); err != nil {
		return internalError("grants", err)
	}
	writeJSON(w, http.StatusOK, v1.ClusterList{Items: items})
	return nil
}

func (c *Controller) handleGetCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	view, err := c.clusters.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		return clusterError(err)
	}
	view.Access = who.grant
	writeJSON(w, http.StatusOK, view)
	return nil
}

func (c *Controller) handleClusterKubeconfig(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	lifetime, err := v1.DecodeKubeconfigRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	kc, err := c.clusters.Kubeconfig(r.PathValue("name"), who.name, lifetime)
	if err != nil {
		return clusterError(err)
	}
	writeJSON(w, http.StatusOK, kc)
	return nil
}

func (c *Controller) handleUserKubeconfig(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	kc, err := c.clusters.UserKubeconfig(r.PathValue("name"), who.name)
	if err != nil {
		return clusterError(err)
	}
	writeJSON(w, http.StatusOK, kc)
	return nil
}

// answerOperation answers a started operation with 202, or its refusal.
func answerOperation(w http.ResponseWriter, op v1.Operation, err error) *apiError {
	if err != nil {
		return clusterError(err)
	}
	writeJSON(w, http.StatusAccepted, op)
	return nil
}

// clusterError maps the cluster service's refusals to API errors;
// anything else is the store's or the controller's own failure.
func clusterError(err error) *apiError {
	var ce *cluster.Error
	if !errors.As(err, &ce) {
		return storeError(err, "cluster")
	}
	e := &apiError{message: ce.Message, field: ce.Field}
	switch ce.Kind {
	case cluster.NotFound:
		e.status, e.code = http.StatusNotFound, v1.CodeNotFound
	case cluster.Conflict:
		e.status, e.code = http.StatusConflict, v1.CodeConflict
	case cluster.PrecheckFailed:
		e.status, e.code = http.StatusUnprocessableEntity, v1.CodePrecheckFailed
	case cluster.Unreachable:
		e.status, e.code = http.StatusBadGateway, v1.CodeVCenterUnreachable
	default:
		e.status, e.code = http.StatusBadRequest, v1.CodeBadRequest
	}
	return e
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, &v1.FieldError{Field: name, Problem: fmt.Sprintf("%q is not true or false", v)}
	}
	return b, nil
}

// catalog is what the cluster service reads from the rest of the
// controller: providers, their sessions, and images.
type catalog struct{ c *Controller }

func (k catalog) Provider(name string) (v1.Provider, error) { return k.c.provider(name) }

func (k catalog) Session(ctx context.Context, p v1.Provider) (*vsphere.Session, error) {
	return k.c.sessions.get(ctx, p)
}

func (k catalog) Image(provider, name string) (*v1.Image, error) {
	var img *v1.Image
	err := k.c.store.View(func(tx *store.Tx) error {
		var err error
		img, err = readyImage(tx, provider, name)
		return err
	})
	return img, err
}

// bootstrapper issues the one-time bootstrap the cluster service writes
// into a VM it clones.
type bootstrapper struct{ c *Controller }

func (b bootstrapper) Bootstrap(node string, ttl time.Duration) (*v1.Bootstrap, error) {
	n, err := b.c.store.Node(node)
	if err != nil {
		return nil, err
	}
	token, tok, err := newToken(n, ttl, b.c.now().UTC())
	if err != nil {
		return nil, err
	}
	if err := b.c.store.ReplaceToken(tok); err != nil {
		return nil, fmt.Errorf("token for %s: %w", node, err)
	}
	boot := b.c.bootstrapFor(node, token, false)
	return &boot, nil
}
