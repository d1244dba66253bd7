// Package metrics holds the agent's Prometheus metrics and serves them
// over mutual TLS, with an optional plain listener on loopback.
package metrics

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/buildinfo"
)

// Enrollment states, exported one-hot in harmony_agent_enrollment_state.
const (
	StateWaiting   = "waiting_for_bootstrap"
	StateEnrolling = "enrolling"
	StateEnrolled  = "enrolled"
	StateRefused   = "refused"
	StateExpired   = "expired"
)

var states = []string{StateWaiting, StateEnrolling, StateEnrolled, StateRefused, StateExpired}

// Agent is the agent's metric set, on its own registry.
type Agent struct {
	Registry      *prometheus.Registry
	state         *prometheus.GaugeVec
	CertStart     prometheus.Gauge
	CertExpiry    prometheus.Gauge
	RoleRevision  prometheus.Gauge
	RequestErrors *prometheus.CounterVec
}

// New registers the agent's metrics.
func New() *Agent {
	m := &Agent{
		Registry: prometheus.NewRegistry(),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "harmony_agent_enrollment_state",
			Help: "1 for the agent's current enrollment state, 0 for the others.",
		}, []string{"state"}),
		CertStart: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "harmony_agent_certificate_start_timestamp_seconds",
			Help: "NotBefore of the node certificate, as a Unix timestamp: with the expiry, its lifetime.",
		}),
		CertExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "harmony_agent_certificate_expiry_timestamp_seconds",
			Help: "NotAfter of the node certificate, as a Unix timestamp.",
		}),
		RoleRevision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "harmony_agent_role_revision",
			Help: "Revision of the newest role received from the controller.",
		}),
		RequestErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harmony_agent_controller_request_errors_total",
			Help: "Failed requests to the controller, by reason.",
		}, []string{"reason"}),
	}
	m.Registry.MustRegister(m.state, m.CertStart, m.CertExpiry, m.RoleRevision, m.RequestErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Collector("harmony_agent"))
	m.SetState(StateWaiting)
	// The transport failures exist at zero from the start, so that rate()
	// works on the first one.
	for _, r := range []string{"connect", "tls", "timeout", "server_error", "bad_response"} {
		m.RequestErrors.WithLabelValues(r)
	}
	return m
}

// SetState makes state the one current enrollment state.
func (m *Agent) SetState(state string) {
	for _, s := range states {
		v := 0.0
		if s == state {
			v = 1
		}
		m.state.WithLabelValues(s).Set(v)
	}
}

// Handler serves the registry.
func (m *Agent) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// Server is a bound metrics listener.
type Server struct {
	ln      net.Listener
	handler http.Handler
}

// ListenTLS binds addr for /metrics over TLS with the node's certificate
// (from getCert, so renewals apply at once). It requires a client
// certificate from the controller's CA with the scraper or admin
// organization; getPool gives the current CA.
func ListenTLS(addr string, handler http.Handler, getCert func() *tls.Certificate, getPool func() *x509.CertPool) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	tlsConf := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := getCert(); c != nil {
				return c, nil
			}
			return nil, errors.New("no node certificate yet")
		},
		// The CA pool can change on re-enrollment, so verify by hand.
		ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyScraper(raw, getPool())
		},
	}
	return &Server{ln: tls.NewListener(ln, tlsConf), handler: handler}, nil
}

// ListenLocal binds addr, which must be a loopback address, for /metrics
// in plain HTTP.
func ListenLocal(addr string, handler http.Handler) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("plain metrics listener %q must be on a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	return &Server{ln: ln, handler: handler}, nil
}

// Close releases a listener that will not be served.
func (s *Server) Close() error { return s.ln.Close() }

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until ctx is done.
func (s *Server) Serve(ctx context.Context, log *slog.Logger) error {
	log.Info("serving metrics", "addr", s.ln.Addr().String())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	if err := srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func verifyScraper(raw [][]byte, pool *x509.CertPool) error {
	if len(raw) == 0 {
		return errors.New("a client certificate is required")
	}
	if pool == nil {
		return errors.New("no CA to verify clients yet")
	}
	leaf, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return fmt.Errorf("client certificate: %w", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("client certificate: %w", err)
	}
	if len(leaf.Subject.Organization) != 1 || !slices.Contains([]string{v1.OrgScrapers, v1.OrgAdmins}, leaf.Subject.Organization[0]) {
		return fmt.Errorf("client certificate %q is not a scraper or admin certificate", leaf.Subject.CommonName)
	}
	return nil
}
