// Package controller is harmony-controller: the CA, the node records and
// bootstrap tokens, enrollment, the role and status service for agents,
// and the admin API, all served over one TLS listener.
package controller

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/access"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/cluster"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/netaddr"
)

// AdminConfigFile is written into the data directory on first start.
const AdminConfigFile = "admin.conf"

// Defaults.
const (
	DefaultListen       = "127.0.0.1:9443"
	DefaultCertLifetime = 24 * time.Hour
	serverCertLifetime  = 30 * 24 * time.Hour
	minCertLifetime     = 5 * time.Second
	// MaxWatchWait bounds one long poll of the role watch.
	MaxWatchWait = 5 * time.Minute
	// DefaultWriteTimeout bounds answering an ordinary request.
	DefaultWriteTimeout = 2 * time.Minute
)

// Config is how harmony-controller is started.
type Config struct {
	DataDir string
	Listen  string
	// AdvertiseURLs go into bootstrap documents; derived from Listen when
	// empty.
	AdvertiseURLs []string
	// ExtraSANs are added to the serving certificate.
	ExtraSANs []string
	// CertLifetime of node certificates; default 24h.
	CertLifetime time.Duration
	// AdminCertLifetime of admin certificates; default 30 days.
	AdminCertLifetime time.Duration
	// MetricsListen optionally serves /metrics in plain HTTP. It must be a
	// loopback address.
	MetricsListen string
	// ImportCACert and ImportCAKey install an existing (intermediate) CA on
	// first start instead of creating a self-signed one.
	ImportCACert string
	ImportCAKey  string
	// CloneParallelism bounds the VMs the cluster workflows build or
	// remove at once; default cluster.DefaultCloneParallelism.
	CloneParallelism int
	// WriteTimeout bounds the answer to one request, counted from its
	// start; default 2m. Long polls and uploads set their own deadlines.
	WriteTimeout time.Duration
	// RetryBase is the first retry delay of a failed vCenter step, doubled
	// per attempt; MaxAttempts marks the node failed. Defaults
	// cluster.DefaultRetryBase and cluster.DefaultMaxAttempts.
	RetryBase   time.Duration
	MaxAttempts int
	// LeaveTimeout is how long a removed node has to leave its cluster
	// before its VM is powered off anyway; default
	// cluster.DefaultLeaveTimeout.
	LeaveTimeout time.Duration
	// UpgradeNodeTimeout is how long a VM that replaces another in an
	// upgrade has to report Ready before the replacement is rolled back;
	// zero means cluster.DefaultUpgradeNodeTimeout.
	UpgradeNodeTimeout time.Duration
	// EtcdSnapshotTimeout is how long a cluster's masters have to take
	// and copy an etcd snapshot asked for by hand; zero means
	// cluster.DefaultSnapshotTimeout.
	EtcdSnapshotTimeout time.Duration
	// ClusterResync is how often every cluster is checked against
	// vCenter; zero means cluster.DefaultResyncInterval.
	ClusterResync time.Duration
	// ClusterStatusPoll is how often a cluster at work looks again at the
	// node reports it waits on, besides at once on a report that changes
	// a node's phase; zero means cluster.DefaultStatusPoll.
	ClusterStatusPoll time.Duration
	Logger            *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Controller is one running harmony-controller.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	now      func() time.Time
	ca       *ca.CA
	store    *store.Store
	hub      *hub
	metrics  *metrics
	sessions *sessions
	clusters *cluster.Service
	copies   *etcdcopies.Store
	imports  *importRunner
	access   *access.Service
	audit    *auditLog
	// patterns are the routes registered, for the API document's test,
	// and permissions each one's permission, for the document.
	patterns    []string
	permissions map[string]permission
	openAPI     func() []byte
	// crossOrigin refuses changes a page of another site makes a browser
	// send, whatever authenticates them: a cookie, or a client
	// certificate the browser holds.
	crossOrigin *http.CrossOriginProtection

	listener      net.Listener
	metricsLn     net.Listener
	localLn       net.Listener
	advertiseURLs []string
	serverSANs    sans

	certMu     sync.Mutex
	serverCert *tls.Certificate
}

type sans struct {
	dns []string
	ips []net.IP
}

// New opens the data directory, loading or creating the CA, the store and
// the admin credential, and binds the listeners. It serves nothing until
// Serve.
func New(cfg Config) (*Controller, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.CertLifetime == 0 {
		cfg.CertLifetime = DefaultCertLifetime
	}
	if cfg.AdminCertLifetime == 0 {
		cfg.AdminCertLifetime = DefaultAdminCertLifetime
	}
	if cfg.AdminCertLifetime < minCertLifetime {
		return nil, fmt.Errorf("admin certificate lifetime %s is shorter than %s", cfg.AdminCertLifetime, minCertLifetime)
	}
	if cfg.CertLifetime < minCertLifetime {
		return nil, fmt.Errorf("certificate lifetime %s is shorter than %s", cfg.CertLifetime, minCertLifetime)
	}
	if cfg.DataDir == "" {
		return nil, errors.New("--data-dir is required")
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	c := &Controller{cfg: cfg, log: cfg.Logger, now: cfg.Now, hub: newHub(), sessions: newSessions(), permissions: map[string]permission{},
		crossOrigin: http.NewCrossOriginProtection()}
	c.openAPI = sync.OnceValue(func() []byte {
		doc, _ := json.MarshalIndent(openAPIDocument(c.permissions), "", "  ")
		return doc
	})
	c.imports = &importRunner{run: c.runImport}
	if err := c.openState(); err != nil {
		return nil, err
	}
	var err error
	if c.copies, err = etcdcopies.Open(cfg.DataDir); err != nil {
		c.store.Close()
		return nil, err
	}
	c.clusters, err = cluster.New(cluster.Config{
		Store: c.store, Catalog: catalog{c}, Bootstrap: bootstrapper{c}, Notify: c.hub.notify, Now: c.now, Log: c.log,
		CloneParallelism: cfg.CloneParallelism, RetryBase: cfg.RetryBase, MaxAttempts: cfg.MaxAttempts,
		LeaveTimeout:       cfg.LeaveTimeout,
		UpgradeNodeTimeout: cfg.UpgradeNodeTimeout,
		SnapshotTimeout:    cfg.EtcdSnapshotTimeout,
		ResyncInterval:     cfg.ClusterResync,
		StatusPoll:         cfg.ClusterStatusPoll,
		Copies:             c.copies,
	})
	if err != nil {
		c.store.Close()
		return nil, err
	}
	c.metrics = newMetrics()
	c.metrics.registry.MustRegister(newFleetCollector(c.clusters, c.store))
	c.removeStaleSpool()
	c.access = access.New(access.Config{Store: c.store, DataDir: cfg.DataDir, Now: c.now, Log: c.log})
	c.audit = newAuditLog(c.store, cfg.DataDir)
	if path, err := c.access.PrepareSetup(); err != nil {
		c.store.Close()
		return nil, err
	} else if path != "" {
		c.log.Info("no admin user yet: the one-time setup token is in a file only root can read; harmonyctl setup uses it to create the first admin", "path", path)
	}

	if err := c.bind(); err != nil {
		c.store.Close()
		return nil, err
	}
	if err := c.writeAdminConfigOnce(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openState opens the store and the CA, which must belong together. The
// store is made before the CA on a first start, so a CA without a store
// means the store was lost: the controller then refuses to start, because
// an empty store would tell every agent its node is gone.
func (c *Controller) openState() error {
	storePath := filepath.Join(c.cfg.DataDir, store.FileName)
	restoreHint := fmt.Sprintf("restore the data directory from a backup (harmony-controller restore --data-dir %s -f BACKUP); the README's \"Backup and restore\" says how", c.cfg.DataDir)
	_, caErr := ca.Load(c.cfg.DataDir)
	caExists := !errors.Is(caErr, ca.ErrNoCA)
	st, err := store.Open(storePath, store.Options{Create: !caExists, NodesChanged: c.hub.notify})
	var damaged *store.DamagedError
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("store %s is missing, but the data directory has a CA: the controller will not start an empty store beside it: %s", storePath, restoreHint)
	case errors.As(err, &damaged):
		return fmt.Errorf("%w; the controller will not start on it: %s", err, restoreHint)
	case err != nil:
		return err
	}
	if pin, err := st.CAPin(); err == nil && pin != "" && !caExists {
		st.Close()
		return fmt.Errorf("the CA (%s) is missing from %s, but store %s belongs to it (pin %s): the controller will not make a new CA for it: %s",
			ca.CertFile, c.cfg.DataDir, storePath, pin, restoreHint)
	}
	if c.ca, err = c.loadCA(); err != nil {
		st.Close()
		return err
	}
	if err := st.BindCA(c.ca.Pin()); err != nil {
		st.Close()
		return fmt.Errorf("%w: the store and the CA come from different controllers; %s", err, restoreHint)
	}
	c.store = st
	return nil
}

func (c *Controller) loadCA() (*ca.CA, error) {
	existing, err := ca.Load(c.cfg.DataDir)
	importing := c.cfg.ImportCACert != "" || c.cfg.ImportCAKey != ""
	switch {
	case err == nil && importing:
		if certPEM, rerr := os.ReadFile(c.cfg.ImportCACert); rerr == nil {
			if certs, perr := v1.ParseCertificatesPEM(certPEM); perr == nil && certs[0].Equal(existing.Certificate()) {
				return existing, nil // same CA as before: a restart with the same flags
			}
		}
		return nil, fmt.Errorf("the data directory already has a CA (%s); refusing to replace it with %s", existing.Certificate().Subject, c.cfg.ImportCACert)
	case err == nil:
		return existing, nil
	case !errors.Is(err, ca.ErrNoCA):
		return nil, err
	case importing:
		if c.cfg.ImportCACert == "" || c.cfg.ImportCAKey == "" {
			return nil, errors.New("--ca-cert and --ca-key must be given together")
		}
		certPEM, err := os.ReadFile(c.cfg.ImportCACert)
		if err != nil {
			return nil, fmt.Errorf("import CA: %w", err)
		}
		keyPEM, err := os.ReadFile(c.cfg.ImportCAKey)
		if err != nil {
			return nil, fmt.Errorf("import CA: %w", err)
		}
		imported, err := ca.Import(c.cfg.DataDir, certPEM, keyPEM, c.now())
		if err != nil {
			return nil, fmt.Errorf("import CA: %w", err)
		}
		c.log.Info("imported CA", "subject", imported.Certificate().Subject.String(), "pin", imported.Pin())
		return imported, nil
	default:
		created, err := ca.Create(c.cfg.DataDir, "Harmony CA", c.now())
		if err != nil {
			return nil, err
		}
		c.log.Info("created self-signed CA", "pin", created.Pin())
		return created, nil
	}
}

func (c *Controller) bind() error {
	ln, err := net.Listen("tcp", c.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.cfg.Listen, err)
	}
	c.listener = ln
	port := ln.Addr().(*net.TCPAddr).Port
	host, _, _ := net.SplitHostPort(c.cfg.Listen)
	c.serverSANs = serverSANs(host, c.cfg.ExtraSANs)
	c.advertiseURLs = c.cfg.AdvertiseURLs
	if len(c.advertiseURLs) == 0 {
		c.advertiseURLs = defaultAdvertiseURLs(host, port)
	}
	for _, u := range c.advertiseURLs {
		if err := v1.ValidateControllerURL(u); err != nil {
			ln.Close()
			return fmt.Errorf("advertise URL %q: %w", u, err)
		}
		parsed, _ := url.Parse(u)
		c.serverSANs.add(parsed.Hostname())
	}
	if c.localLn, err = c.listenLocal(); err != nil {
		ln.Close()
		return err
	}
	if c.cfg.MetricsListen != "" {
		mhost, _, err := net.SplitHostPort(c.cfg.MetricsListen)
		if ip, perr := netip.ParseAddr(mhost); err != nil || perr != nil || !ip.IsLoopback() {
			ln.Close()
			c.localLn.Close()
			return fmt.Errorf("--metrics-listen %q: the plain metrics listener must be on a loopback address", c.cfg.MetricsListen)
		}
		if c.metricsLn, err = net.Listen("tcp", c.cfg.MetricsListen); err != nil {
			ln.Close()
			c.localLn.Close()
			return fmt.Errorf("listen on %s: %w", c.cfg.MetricsListen, err)
		}
	}
	return nil
}

// Addr is the bound address of the TLS listener.
func (c *Controller) Addr() net.Addr { return c.listener.Addr() }

// MetricsAddr is the bound address of the plain metrics listener, or nil.
func (c *Controller) MetricsAddr() net.Addr {
	if c.metricsLn == nil {
		return nil
	}
	return c.metricsLn.Addr()
}

// URL is the controller's loopback-reachable URL when it listens on
// loopback or everywhere, else its first advertised URL.
func (c *Controller) URL() string {
	addr := c.listener.Addr().(*net.TCPAddr)
	if addr.IP.IsLoopback() || addr.IP.IsUnspecified() {
		return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(addr.Port))
	}
	return c.advertiseURLs[0]
}

// CA exposes the issuing CA (for tests and the bench).
func (c *Controller) CA() *ca.CA { return c.ca }

// Store exposes the store (for tests and the bench).
func (c *Controller) Store() *store.Store { return c.store }

// Registry is the controller's Prometheus registry.
func (c *Controller) Registry() *prometheus.Registry { return c.metrics.registry }

// Serve serves until ctx is done, then shuts down gracefully.
func (c *Controller) Serve(ctx context.Context) error {
	srv := &http.Server{
		Handler:           c.routes(),
		TLSConfig:         c.tlsConfig(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      c.cfg.WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       withVerifiedChain,
	}
	servers := []*http.Server{srv}
	errs := make(chan error, 3)
	workCtx, stopWork := context.WithCancel(ctx)
	defer func() {
		stopWork()
		c.clusters.Wait()
		c.imports.wait()
		c.sessions.closeAll()
	}()
	pending, err := c.pendingImports()
	if err != nil {
		return fmt.Errorf("resume image imports: %w", err)
	}
	c.imports.begin(workCtx, pending)
	c.clusters.Start(workCtx)
	go func() { errs <- srv.ServeTLS(c.listener, "", "") }()
	if c.metricsLn != nil {
		msrv := &http.Server{Handler: c.metricsHandler(), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, msrv)
		go func() { errs <- msrv.Serve(c.metricsLn) }()
	}
	lsrv := &http.Server{Handler: c.localRoutes(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	servers = append(servers, lsrv)
	go func() { errs <- lsrv.Serve(c.localLn) }()
	c.log.Info("controller serving", "listen", c.listener.Addr().String(), "advertise", c.advertiseURLs,
		"ca_pin", c.ca.Pin(), "admin_config", filepath.Join(c.cfg.DataDir, AdminConfigFile))

	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdownCtx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Close releases the store and listeners.
func (c *Controller) Close() error {
	if c.metricsLn != nil {
		c.metricsLn.Close()
	}
	c.listener.Close()
	c.localLn.Close() // removes the socket file
	if c.audit != nil {
		c.audit.close()
	}
	return c.store.Close()
}

func (c *Controller) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: c.getServerCert,
		// Verified per route: enrollment has no client certificate yet, and
		// a wrong one gets a clear JSON refusal rather than a TLS alert.
		ClientAuth: tls.RequestClientCert,
		NextProtos: []string{"h2", "http/1.1"},
	}
}

// getServerCert issues the serving certificate in memory and re-issues it
// when two thirds of its life have passed.
func (c *Controller) getServerCert(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.certMu.Lock()
	defer c.certMu.Unlock()
	now := c.now()
	if c.serverCert != nil {
		leaf := c.serverCert.Leaf
		if now.Before(leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3)) {
			return c.serverCert, nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("server key: %w", err)
	}
	leaf, err := c.ca.Issue(ca.Leaf{
		CommonName:   "harmony-controller",
		Organization: v1.OrgControllers,
		DNSNames:     c.serverSANs.dns,
		IPs:          c.serverSANs.ips,
		PublicKey:    &key.PublicKey,
		Lifetime:     serverCertLifetime,
		ServerAuth:   true,
	}, now)
	if err != nil {
		return nil, err
	}
	chain := [][]byte{leaf.Raw, c.ca.Certificate().Raw}
	c.serverCert = &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}
	return c.serverCert, nil
}

// writeAdminConfigOnce writes DIR/admin.conf on first start only; the admin
// can delete it and restart to get a new one.
func (c *Controller) writeAdminConfigOnce() error {
	path := filepath.Join(c.cfg.DataDir, AdminConfigFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	cfg, err := c.NewAdminConfig("admin", "controller start")
	if err != nil {
		return err
	}
	if err := cfg.Write(path); err != nil {
		return err
	}
	c.log.Info("wrote admin client config", "path", path)
	return nil
}

func serverSANs(listenHost string, extra []string) sans {
	var s sans
	s.add("localhost")
	s.add("127.0.0.1")
	s.add("::1")
	if h, err := os.Hostname(); err == nil {
		s.add(h)
	}
	if ip, err := netip.ParseAddr(listenHost); err == nil && ip.IsUnspecified() || listenHost == "" {
		for _, a := range localAddrs() {
			s.add(a.String())
		}
	} else {
		s.add(listenHost)
	}
	for _, e := range extra {
		s.add(e)
	}
	return s
}

func (s *sans) add(name string) {
	if name == "" {
		return
	}
	if ip := net.ParseIP(name); ip != nil {
		for _, have := range s.ips {
			if have.Equal(ip) {
				return
			}
		}
		s.ips = append(s.ips, ip)
		return
	}
	for _, have := range s.dns {
		if have == name {
			return
		}
	}
	s.dns = append(s.dns, name)
}

func localAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	return netaddr.GlobalUnicast(addrs)
}

func defaultAdvertiseURLs(host string, port int) []string {
	hostPort := func(h string) string { return "https://" + net.JoinHostPort(h, strconv.Itoa(port)) }
	if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
		var urls []string
		for _, a := range localAddrs() {
			urls = append(urls, hostPort(a.String()))
		}
		if len(urls) == 0 {
			urls = []string{hostPort("127.0.0.1")}
		}
		return urls
	}
	return []string{hostPort(host)}
}
