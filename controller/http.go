package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/console"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
)

// apiError is a refusal with its HTTP status and stable code.
type apiError struct {
	status  int
	code    string
	message string
	field   string
	// retryAfter, when set, goes into a Retry-After header.
	retryAfter time.Duration
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func refuse(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// badInput turns a decoder error into a 400 (or 413) that names the field.
func badInput(err error) *apiError {
	var fe *v1.FieldError
	if errors.As(err, &fe) {
		e := refuse(http.StatusBadRequest, v1.CodeBadRequest, "%v", err)
		e.field = fe.Field
		if fe.Field == "csr" {
			e.code = v1.CodeCSRInvalid
		}
		return e
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return refuse(http.StatusRequestEntityTooLarge, v1.CodeBodyTooLarge, "body is larger than %d bytes", tooBig.Limit)
	}
	return refuse(http.StatusBadRequest, v1.CodeBadRequest, "%v", err)
}

func storeError(err error, what string) *apiError {
	if errors.Is(err, store.ErrNotFound) {
		return refuse(http.StatusNotFound, v1.CodeNotFound, "%s not found", what)
	}
	if errors.Is(err, store.ErrExists) {
		return refuse(http.StatusConflict, v1.CodeConflict, "%s already exists", what)
	}
	return internalError("store", err)
}

// internalError is a failure on the controller's side: 507 when its disk is
// full (the admin must make room; the client's request was fine), else 500.
func internalError(what string, err error) *apiError {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return refuse(http.StatusInsufficientStorage, v1.CodeInsufficientStorage, "%s: the controller's disk is full: %v", what, err)
	}
	return refuse(http.StatusInternalServerError, v1.CodeInternal, "%s: %v", what, err)
}

// shuttingDown answers a long poll that the controller's shutdown (or the
// client's going away) ended: a 503 the agent retries quietly, never an
// empty 200.
func shuttingDown() *apiError {
	return refuse(http.StatusServiceUnavailable, v1.CodeUnavailable, "the controller is shutting down; try again")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// maxErrorMessage bounds an error body: a message built from outside input
// (an OVA's entry names, say) must not cost its size again in the answer.
const maxErrorMessage = 16 << 10

func writeError(w http.ResponseWriter, e *apiError) {
	switch {
	case e.retryAfter > 0:
		w.Header().Set("Retry-After", strconv.Itoa(int((e.retryAfter+time.Second-1)/time.Second)))
	case e.status == http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "5")
	}
	writeJSON(w, e.status, v1.ErrorBody{Error: v1.Error{Code: e.code, Message: clip(e.message), Field: e.field}})
}

func clip(msg string) string {
	if len(msg) <= maxErrorMessage {
		return msg
	}
	return fmt.Sprintf("%s… (%d more bytes cut)", strings.ToValidUTF8(msg[:maxErrorMessage], ""), len(msg)-maxErrorMessage)
}

// principal is who the caller is: a verified client certificate's holder,
// or a signed-in user.
type principal struct {
	kind   string // v1.OrgNodes, v1.OrgAdmins, v1.OrgScrapers, or kindUser
	name   string
	uid    string
	serial string // of the certificate, lower-case hex
	// role and groups are a user's.
	role   v1.UserRole
	groups []string
	// grant is the caller's role on the route's cluster, for a route with
	// a cluster permission (an admin's is GrantAdmin).
	grant v1.GrantRole
}

// handlerFunc is a handler that returns its refusal instead of writing it.
type handlerFunc func(w http.ResponseWriter, r *http.Request, who principal) *apiError

// route registers pattern with latency metrics, a body limit, panic
// recovery, and its one permission, checked before h runs.
func (c *Controller) route(mux *http.ServeMux, pattern string, bodyLimit int64, h handlerFunc, perm permission) {
	c.patterns = append(c.patterns, pattern)
	c.permissions[pattern] = perm
	label := pattern
	audit := audited(strings.Fields(pattern)[0], perm)
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		var who principal
		var code string
		r, subject := withAuditSubject(r)
		defer func() {
			if p := recover(); p != nil {
				c.log.Error("handler panic", "route", label, "panic", p)
				if !rec.wrote {
					writeError(rec, refuse(http.StatusInternalServerError, v1.CodeInternal, "internal error"))
				}
			}
			c.metrics.requestDuration.WithLabelValues(label, r.Method, strconv.Itoa(rec.status)).Observe(time.Since(start).Seconds())
			if audit {
				now := c.now()
				e := auditEntry(r, label, who, *subject, rec.status, code, now)
				if !c.audit.admit(&e, remoteAddr(r), now) {
					c.metrics.auditSuppressed.Inc()
				} else if err := c.audit.record(e); err != nil {
					c.log.Error("audit entry not recorded", "route", label, "err", err)
				}
			}
		}()
		r.Body = http.MaxBytesReader(rec, r.Body, bodyLimit)
		who, aerr := c.authorize(r, perm)
		if aerr != nil {
			c.log.Warn("request refused", "route", label, "reason", aerr.code, "detail", aerr.message, "remote", r.RemoteAddr)
			code = aerr.code
			writeError(rec, aerr)
			return
		}
		err := h(rec, r, who)
		if err != nil {
			code = err.code
			writeError(rec, err)
		}
		if rec.status >= 500 && (err == nil || err.code != v1.CodeUnavailable) {
			// Every server-side failure is an ERROR line with its cause:
			// the answer alone reaches only the client. (A long poll that
			// the shutdown ends is no failure.)
			attrs := []any{"route", label, "status", rec.status, "remote", r.RemoteAddr}
			if who.name != "" {
				attrs = append(attrs, "by", who.name)
			}
			if err != nil {
				attrs = append(attrs, "code", err.code, "err", clip(err.message))
			}
			c.log.Error("request failed", attrs...)
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// authenticate verifies the client certificate against this controller's
// CA and maps its organization to a principal. A node must still exist,
// with the UID its certificate was issued for.
func (c *Controller) authenticate(r *http.Request) (principal, *apiError) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return principal{}, refuse(http.StatusUnauthorized, v1.CodeNoClientCert, "this endpoint requires a client certificate issued by the controller's CA")
	}
	leaf := r.TLS.PeerCertificates[0]
	if err := c.verifyClient(r, leaf); err != nil {
		return principal{}, refuse(http.StatusUnauthorized, v1.CodeBadClientCert, "client certificate %q is not valid for this controller: %v", leaf.Subject.CommonName, err)
	}
	if len(leaf.Subject.Organization) != 1 {
		return principal{}, refuse(http.StatusForbidden, v1.CodeForbidden, "client certificate has no single organization")
	}
	who := principal{kind: leaf.Subject.Organization[0], name: leaf.Subject.CommonName, uid: leaf.Subject.SerialNumber, serial: serialOf(leaf)}
	switch who.kind {
	case v1.OrgAdmins, v1.OrgScrapers:
		if e := c.checkRecorded(leaf, who); e != nil {
			return principal{}, e
		}
	case v1.OrgNodes:
		n, err := c.store.Node(who.name)
		if errors.Is(err, store.ErrNotFound) || err == nil && n.UID != who.uid {
			return principal{}, refuse(http.StatusForbidden, v1.CodeNodeGone, "node %q has been deleted; its certificate no longer grants access", who.name)
		}
		if err != nil {
			return principal{}, storeError(err, "node")
		}
	}
	return who, nil
}

func (c *Controller) routes() http.Handler {
	mux := http.NewServeMux()

	c.route(mux, "GET "+v1.PathHealthz, 0, func(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
		w.Write([]byte("ok\n"))
		return nil
	}, permPublic)
	c.route(mux, "GET "+v1.PathCA, 0, c.handleCA, permPublic)
	c.route(mux, "POST "+v1.PathEnroll, v1.MaxEnrollBytes, c.handleEnroll, permPublic)
	c.route(mux, "POST "+v1.PathRenew, v1.MaxEnrollBytes, c.handleRenew, permNode)
	c.route(mux, "GET "+v1.PathNodeRole, 0, c.handleWatchRole, permNode)
	c.route(mux, "POST "+v1.PathNodeStatus, v1.MaxStatusBytes, c.handleStatus, permNode)
	c.route(mux, "GET "+v1.PathNodeEtcdSnapshots, 0, c.handleListEtcdSnapshotCopies, permNode)
	c.route(mux, "PUT "+v1.PathNodeEtcdSnapshots+"/{takenAt}", etcdsnapshot.MaxBytes, c.handlePutEtcdSnapshotCopy, permNode)
	c.route(mux, "GET "+v1.PathNodeEtcdSnapshots+"/{takenAt}", 0, c.handleGetEtcdSnapshotCopy, permNode)

	c.route(mux, "GET "+v1.PathNodes, 0, c.handleListNodes, permAdmin)
	c.route(mux, "POST "+v1.PathNodes, v1.MaxAdminBytes, c.handleAddNode, permAdmin)
	c.route(mux, "GET "+v1.PathNodes+"/{name}", 0, c.handleGetNode, permAdmin)
	c.route(mux, "DELETE "+v1.PathNodes+"/{name}", 0, c.handleDeleteNode, permAdmin)
	c.route(mux, "POST "+v1.PathNodes+"/{name}/token", v1.MaxAdminBytes, c.handleNewToken, permAdmin)
	c.route(mux, "GET "+v1.PathNodes+"/{name}/role", 0, c.handleGetRole, permAdmin)
	c.route(mux, "PUT "+v1.PathNodes+"/{name}/role", v1.MaxRoleBytes, c.handleSetRole, permAdmin)
	c.route(mux, "PUT "+v1.PathRoles, 64*v1.MaxRoleBytes, c.handleSetRoles, permAdmin)
	c.route(mux, "POST "+v1.PathScraperCert, v1.MaxEnrollBytes, c.handleScraperCert, permAdmin)
	c.route(mux, "POST "+v1.PathAdminCert, v1.MaxEnrollBytes, c.handleRenewAdmin, permAdminCert)
	c.route(mux, "GET "+v1.PathCertificates, 0, c.handleListCerts, permAdmin)
	c.route(mux, "POST "+v1.PathCertificates+"/{serial}/revoke", 0, c.handleRevokeCert, permAdmin)
	c.route(mux, "GET "+v1.PathProviders, 0, c.handleListProviders, permAdmin)
	c.route(mux, "GET "+v1.PathProviders+"/{name}", 0, c.handleGetProvider, permAdmin)
	c.route(mux, "PUT "+v1.PathProviders+"/{name}", v1.MaxAdminBytes, c.handleApplyProvider, permAdmin)
	c.route(mux, "DELETE "+v1.PathProviders+"/{name}", 0, c.handleDeleteProvider, permAdmin)
	c.route(mux, "GET "+v1.PathImages, 0, c.handleListImages, permAdmin)
	c.route(mux, "POST "+v1.PathImages, MaxOVABytes, c.handleImportImage, permAdmin)
	c.route(mux, "GET "+v1.PathClusters, 0, c.handleListClusters, permSignedIn)
	c.route(mux, "POST "+v1.PathClusters, v1.MaxAdminBytes, c.handleCreateCluster, permAdmin)
	c.route(mux, "GET "+v1.PathClusters+"/{name}", 0, c.handleGetCluster, permClusterView)
	c.route(mux, "DELETE "+v1.PathClusters+"/{name}", 0, c.handleDeleteCluster, permAdmin)
	c.route(mux, "GET "+v1.PathLeftovers, 0, c.handleListLeftovers, permAdmin)
	c.route(mux, "DELETE "+v1.PathLeftovers+"/{id}", 0, c.handlePurgeLeftovers, permAdmin)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/scale", v1.MaxAdminBytes, c.handleScaleCluster, permClusterAdmin)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/upgrade", v1.MaxAdminBytes, c.handleUpgradeCluster, permClusterAdmin)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/restore", v1.MaxAdminBytes, c.handleRestoreCluster, permClusterAdmin)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/etcd-snapshot", 0, c.handleSnapshotCluster, permClusterAdmin)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/retry", 0, c.handleRetryCluster, permClusterAdmin)
	c.route(mux, "DELETE "+v1.PathClusters+"/{name}/nodes/{node}", 0, c.handleRemoveNode, permClusterAdmin)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/nodes/{node}/replace", v1.MaxAdminBytes, c.handleReplaceNode, permClusterAdmin)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/kubeconfig", v1.MaxAdminBytes, c.handleClusterKubeconfig, permClusterAdmin)
	c.route(mux, "GET "+v1.PathClusters+"/{name}/kubeconfig", 0, c.handleUserKubeconfig, permClusterView)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/credential", v1.MaxEnrollBytes, c.handleCredential, permClusterView)
	c.route(mux, "GET "+v1.PathClusters+"/{name}/grants", 0, c.handleListGrants, permClusterView)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/grants", v1.MaxAuthBytes, c.handleGrant, permClusterAdmin)
	c.route(mux, "DELETE "+v1.PathClusters+"/{name}/grants/{kind}/{subject}", 0, c.handleRevoke, permClusterAdmin)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/revoke-sessions", v1.MaxAuthBytes, c.handleRevokeSessions, permClusterAdmin)
	c.route(mux, "GET "+v1.PathOperations+"/{id}", 0, c.handleGetOperation, permOperationView)
	c.route(mux, "GET "+v1.PathOpenAPI, 0, c.handleOpenAPI, permSignedIn)

	c.route(mux, "POST "+v1.PathSetup, v1.MaxAuthBytes, c.handleSetup, permPublic)
	c.route(mux, "POST "+v1.PathLogin, v1.MaxAuthBytes, c.handleLogin, permPublic)
	c.route(mux, "POST "+v1.PathRefresh, v1.MaxAuthBytes, c.handleRefresh, permPublic)
	c.route(mux, "POST "+v1.PathLogout, v1.MaxAuthBytes, c.handleLogout, permPublic)
	c.route(mux, "GET "+v1.PathWhoAmI, 0, c.handleWhoAmI, permSignedIn)
	c.route(mux, "GET "+v1.PathAudit, 0, c.handleAudit, permAdmin)
	c.route(mux, "GET "+v1.PathUsers, 0, c.handleListUsers, permAdmin)
	c.route(mux, "POST "+v1.PathUsers, v1.MaxAuthBytes, c.handleCreateUser, permAdmin)
	c.route(mux, "GET "+v1.PathUsers+"/{user}", 0, c.handleGetUser, permAdmin)
	c.route(mux, "PATCH "+v1.PathUsers+"/{user}", v1.MaxAuthBytes, c.handleUpdateUser, permAdmin)
	c.route(mux, "DELETE "+v1.PathUsers+"/{user}", 0, c.handleDeleteUser, permAdmin)
	c.route(mux, "POST "+v1.PathUsers+"/{user}/end-sessions", 0, c.handleEndSessions, permAdmin)
	c.route(mux, "GET "+v1.PathLDAP, 0, c.handleGetLDAP, permAdmin)
	c.route(mux, "PUT "+v1.PathLDAP, v1.MaxAdminBytes, c.handleApplyLDAP, permAdmin)
	c.route(mux, "DELETE "+v1.PathLDAP, 0, c.handleDeleteLDAP, permAdmin)
	c.route(mux, "POST "+v1.PathLDAP+"/lookup", v1.MaxAuthBytes, c.handleLookupLDAPUser, permAdmin)
	c.route(mux, "GET "+v1.PathMetrics, 0, func(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
		c.metricsHandler().ServeHTTP(w, r)
		return nil
	}, permMetrics)
	c.route(mux, "GET "+v1.PathMetricsTargets, 0, c.handleMetricsTargets, permMetrics)

	// The web console: static files, public like the login page they
	// hold; what they show comes from the API above, under its checks.
	mux.Handle("GET "+console.PathPrefix, console.Handler())
	mux.Handle("GET /{$}", http.RedirectHandler(console.PathPrefix, http.StatusFound))

	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, refuse(http.StatusNotFound, v1.CodeNotFound, "no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}

func (c *Controller) handleCA(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	w.Header().Set("Content-Type", "application/x-pem-file")
	w.Write(c.ca.BundlePEM())
	return nil
}
