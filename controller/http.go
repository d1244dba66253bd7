package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// apiError is a refusal with its HTTP status and stable code.
type apiError struct {
	status  int
	code    string
	message string
	field   string
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
	if e.status == http.StatusServiceUnavailable {
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

// principal is who a verified client certificate says the caller is.
type principal struct {
	kind   string // one of v1.OrgNodes, v1.OrgAdmins, v1.OrgScrapers
	name   string
	uid    string
	serial string // of the certificate, lower-case hex
}

// handlerFunc is a handler that returns its refusal instead of writing it.
type handlerFunc func(w http.ResponseWriter, r *http.Request, who principal) *apiError

// route registers pattern with latency metrics, a body limit, panic
// recovery, and the principals allowed; none means no client certificate
// is needed.
func (c *Controller) route(mux *http.ServeMux, pattern string, bodyLimit int64, h handlerFunc, allowed ...string) {
	c.patterns = append(c.patterns, pattern)
	label := pattern
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			if p := recover(); p != nil {
				c.log.Error("handler panic", "route", label, "panic", p)
				if !rec.wrote {
					writeError(rec, refuse(http.StatusInternalServerError, v1.CodeInternal, "internal error"))
				}
			}
			c.metrics.requestDuration.WithLabelValues(label, r.Method, strconv.Itoa(rec.status)).Observe(time.Since(start).Seconds())
		}()
		r.Body = http.MaxBytesReader(rec, r.Body, bodyLimit)
		var who principal
		if len(allowed) > 0 {
			var err *apiError
			if who, err = c.authenticate(r, allowed); err != nil {
				c.log.Warn("request refused", "route", label, "reason", err.code, "detail", err.message, "remote", r.RemoteAddr)
				writeError(rec, err)
				return
			}
		}
		err := h(rec, r, who)
		if err != nil {
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
func (c *Controller) authenticate(r *http.Request, allowed []string) (principal, *apiError) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return principal{}, refuse(http.StatusUnauthorized, v1.CodeNoClientCert, "this endpoint requires a client certificate issued by the controller's CA")
	}
	leaf := r.TLS.PeerCertificates[0]
	if err := c.ca.Verify(leaf, c.now()); err != nil {
		return principal{}, refuse(http.StatusUnauthorized, v1.CodeBadClientCert, "client certificate %q is not valid for this controller: %v", leaf.Subject.CommonName, err)
	}
	if len(leaf.Subject.Organization) != 1 {
		return principal{}, refuse(http.StatusForbidden, v1.CodeForbidden, "client certificate has no single organization")
	}
	who := principal{kind: leaf.Subject.Organization[0], name: leaf.Subject.CommonName, uid: leaf.Subject.SerialNumber, serial: serialOf(leaf)}
	if !slices.Contains(allowed, who.kind) {
		return principal{}, refuse(http.StatusForbidden, v1.CodeForbidden, "%s %q may not use this endpoint", who.kind, who.name)
	}
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
	node := []string{v1.OrgNodes}
	admin := []string{v1.OrgAdmins}

	mux.HandleFunc("GET "+v1.PathHealthz, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	c.route(mux, "GET "+v1.PathCA, 0, c.handleCA)
	c.route(mux, "POST "+v1.PathEnroll, v1.MaxEnrollBytes, c.handleEnroll)
	c.route(mux, "POST "+v1.PathRenew, v1.MaxEnrollBytes, c.handleRenew, node...)
	c.route(mux, "GET "+v1.PathNodeRole, 0, c.handleWatchRole, node...)
	c.route(mux, "POST "+v1.PathNodeStatus, v1.MaxStatusBytes, c.handleStatus, node...)

	c.route(mux, "GET "+v1.PathNodes, 0, c.handleListNodes, admin...)
	c.route(mux, "POST "+v1.PathNodes, v1.MaxAdminBytes, c.handleAddNode, admin...)
	c.route(mux, "GET "+v1.PathNodes+"/{name}", 0, c.handleGetNode, admin...)
	c.route(mux, "DELETE "+v1.PathNodes+"/{name}", 0, c.handleDeleteNode, admin...)
	c.route(mux, "POST "+v1.PathNodes+"/{name}/token", v1.MaxAdminBytes, c.handleNewToken, admin...)
	c.route(mux, "GET "+v1.PathNodes+"/{name}/role", 0, c.handleGetRole, admin...)
	c.route(mux, "PUT "+v1.PathNodes+"/{name}/role", v1.MaxRoleBytes, c.handleSetRole, admin...)
	c.route(mux, "PUT "+v1.PathRoles, 64*v1.MaxRoleBytes, c.handleSetRoles, admin...)
	c.route(mux, "POST "+v1.PathScraperCert, v1.MaxEnrollBytes, c.handleScraperCert, admin...)
	c.route(mux, "POST "+v1.PathAdminCert, v1.MaxEnrollBytes, c.handleRenewAdmin, admin...)
	c.route(mux, "GET "+v1.PathCertificates, 0, c.handleListCerts, admin...)
	c.route(mux, "POST "+v1.PathCertificates+"/{serial}/revoke", 0, c.handleRevokeCert, admin...)
	c.route(mux, "GET "+v1.PathProviders, 0, c.handleListProviders, admin...)
	c.route(mux, "GET "+v1.PathProviders+"/{name}", 0, c.handleGetProvider, admin...)
	c.route(mux, "PUT "+v1.PathProviders+"/{name}", v1.MaxAdminBytes, c.handleApplyProvider, admin...)
	c.route(mux, "DELETE "+v1.PathProviders+"/{name}", 0, c.handleDeleteProvider, admin...)
	c.route(mux, "GET "+v1.PathImages, 0, c.handleListImages, admin...)
	c.route(mux, "POST "+v1.PathImages, MaxOVABytes, c.handleImportImage, admin...)
	c.route(mux, "GET "+v1.PathClusters, 0, c.handleListClusters, admin...)
	c.route(mux, "POST "+v1.PathClusters, v1.MaxAdminBytes, c.handleCreateCluster, admin...)
	c.route(mux, "GET "+v1.PathClusters+"/{name}", 0, c.handleGetCluster, admin...)
	c.route(mux, "DELETE "+v1.PathClusters+"/{name}", 0, c.handleDeleteCluster, admin...)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/scale", v1.MaxAdminBytes, c.handleScaleCluster, admin...)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/retry", 0, c.handleRetryCluster, admin...)
	c.route(mux, "DELETE "+v1.PathClusters+"/{name}/nodes/{node}", 0, c.handleRemoveNode, admin...)
	c.route(mux, "POST "+v1.PathClusters+"/{name}/kubeconfig", v1.MaxAdminBytes, c.handleClusterKubeconfig, admin...)
	c.route(mux, "GET "+v1.PathOperations+"/{id}", 0, c.handleGetOperation, admin...)
	c.route(mux, "GET "+v1.PathOpenAPI, 0, c.handleOpenAPI, admin...)
	c.route(mux, "GET "+v1.PathMetrics, 0, func(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
		c.metricsHandler().ServeHTTP(w, r)
		return nil
	}, v1.OrgAdmins, v1.OrgScrapers)

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
