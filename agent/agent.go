// Package agent is harmony-agent: it finds its bootstrap document, enrolls
// over TLS, keeps its certificate renewed, watches its role over mutual
// TLS and reports status. With the node stack enabled it also acts on the
// role through the reconcile runner (nodestack.go).
package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/harmonykaas/harmony/agent/bootstrap"
	"github.com/harmonykaas/harmony/agent/controlclient"
	"github.com/harmonykaas/harmony/agent/identity"
	"github.com/harmonykaas/harmony/agent/metrics"
	"github.com/harmonykaas/harmony/agent/netinfo"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/sdnotify"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/buildinfo"
)

// RoleFile caches the newest role in the state directory. It may hold
// cluster CA keys: mode 0600.
const RoleFile = "role.json"

// Config is how harmony-agent is started.
type Config struct {
	// Bootstrap sources, tried in this order: the file, guestinfo, then
	// the OVF environment (from OVFEnvFile, or from guestinfo.ovfEnv).
	BootstrapFile string
	Guestinfo     bootstrap.GuestinfoReader
	OVFEnvFile    string

	StateDir string
	// Addresses and DNSNames go into the certificate as SANs; with no
	// addresses the primary interface's are used.
	Addresses []string
	DNSNames  []string
	// AddressWait bounds how long enrollment waits for the primary
	// interface's address when Addresses is empty; default 2m, the bound
	// systemd-networkd-wait-online has. The unit starts the agent beside
	// the network, not after network-online.target, so that the agent's
	// own start overlaps the network's; this wait is what keeps its
	// certificate from missing the address.
	AddressWait time.Duration

	// MetricsListen serves /metrics over mutual TLS; "" disables it.
	MetricsListen string
	// MetricsLocalListen serves /metrics in plain HTTP on loopback.
	MetricsLocalListen string

	WatchWait time.Duration // one long poll; default 55s
	RetryBase time.Duration // default 1s
	RetryMax  time.Duration // default 60s
	// RefusedRetryMax caps the backoff between tries of a certificate the
	// controller refused (node_gone): a controller restored from a backup
	// takes its fleet back without anyone touching a VM. Default 5m.
	RefusedRetryMax time.Duration
	BootstrapPoll   time.Duration // re-check for a bootstrap; default 30s
	StatusInterval  time.Duration // status heartbeat; default v1.StatusHeartbeat, which the controller expects

	// NodeStack makes the agent act on its role: the network, keepalived,
	// HAProxy, etcd, kubeadm and the CNI. Root prefixes every path it
	// writes ("/" by default; a per-host directory in the lab). Services
	// default to systemd when it runs the machine, else the process
	// supervisor; Components default to the full set.
	NodeStack  bool
	Root       string
	Services   service.Manager
	Components []reconcile.Component
	// ReconcileInterval between passes without a new role; default 30s.
	ReconcileInterval time.Duration
	// KubeadmBinary and APIServerBinary locate the Kubernetes binaries;
	// defaults /usr/bin/kubeadm and /usr/bin/kube-apiserver.
	KubeadmBinary   string
	APIServerBinary string
	// StandInForKubelet: this host has no kubelet (component tests; VMs
	// and the lab run the real one), so the agent runs the kube-apiserver
	// static pod kubeadm wrote as a process.
	StandInForKubelet bool
	// Notify tells systemd (Type=notify) when the agent is ready and that
	// it is alive; nil, or one without a socket, sends nothing.
	Notify *sdnotify.Notifier

	Logger *slog.Logger
	Now    func() time.Time
	// OnRole is called with each new role revision.
	OnRole func(ctx context.Context, role v1.Role)
}

// Agent is one running harmony-agent.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics.Agent
	store   identity.Store
	sources []bootstrap.Source

	current         atomic.Pointer[identity.Identity]
	bootstrapEvents chan struct{}
	seenMu          sync.Mutex
	seenBootstrap   []byte // file content last read or written by the agent
	refusedToken    string // token id refused for good; not retried
	// refused is the certificate the controller last refused (node
	// deleted or re-created, or a controller restored from an older
	// backup), and when to try it again.
	refusedMu      sync.Mutex
	refusedSerial  string
	refusedUntil   time.Time
	refusedBackoff controlclient.Backoff

	metricsServers []*metrics.Server
	observedRev    atomic.Int64
	statusNow      chan struct{}
	stack          *nodeStack // nil unless Config.NodeStack
	readyOnce      sync.Once
	// controller is the session's client for the controller while one
	// runs: the node stack sends etcd snapshot copies through it.
	controller atomic.Pointer[controlclient.Client]
}

// New validates the configuration and binds the metrics listeners.
func New(cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	setDefault(&cfg.WatchWait, 55*time.Second)
	setDefault(&cfg.RetryBase, time.Second)
	setDefault(&cfg.AddressWait, 2*time.Minute)
	setDefault(&cfg.RetryMax, time.Minute)
	setDefault(&cfg.BootstrapPoll, 30*time.Second)
	setDefault(&cfg.StatusInterval, v1.StatusHeartbeat)
	setDefault(&cfg.RefusedRetryMax, 5*time.Minute)
	if cfg.StateDir == "" {
		return nil, errors.New("a state directory is required")
	}
	for _, a := range cfg.Addresses {
		if net.ParseIP(a) == nil {
			return nil, fmt.Errorf("--address %q is not an IP address", a)
		}
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	a := &Agent{
		cfg: cfg, log: cfg.Logger, now: cfg.Now, metrics: metrics.New(),
		store:           identity.Store{Dir: cfg.StateDir},
		bootstrapEvents: make(chan struct{}, 1),
		statusNow:       make(chan struct{}, 1),
		refusedBackoff:  controlclient.Backoff{Base: cfg.RetryBase, Max: cfg.RefusedRetryMax},
	}
	if cfg.BootstrapFile != "" {
		a.sources = append(a.sources, bootstrap.File{Path: cfg.BootstrapFile})
	}
	if cfg.Guestinfo != nil {
		a.sources = append(a.sources, bootstrap.Guestinfo{Reader: cfg.Guestinfo})
	}
	if cfg.OVFEnvFile != "" || cfg.Guestinfo != nil {
		a.sources = append(a.sources, bootstrap.OVFEnv{Reader: cfg.Guestinfo, Path: cfg.OVFEnvFile})
	}
	if cfg.NodeStack {
		var err error
		if a.stack, err = a.newNodeStack(); err != nil {
			return nil, err
		}
	}
	// What New made so far is released when a later step fails: the
	// service manager's connection (or its search) and the listeners.
	fail := func(err error) (*Agent, error) {
		a.closeMetrics()
		if a.stack != nil && a.stack.closeServices != nil {
			a.stack.closeServices()
		}
		return nil, err
	}
	if cfg.MetricsListen != "" {
		s, err := metrics.ListenTLS(cfg.MetricsListen, a.metrics.Handler(), a.currentCert, a.currentPool)
		if err != nil {
			return fail(err)
		}
		a.metricsServers = append(a.metricsServers, s)
	}
	if cfg.MetricsLocalListen != "" {
		s, err := metrics.ListenLocal(cfg.MetricsLocalListen, a.metrics.Handler())
		if err != nil {
			return fail(err)
		}
		a.metricsServers = append(a.metricsServers, s)
	}
	return a, nil
}

func setDefault(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

func (a *Agent) closeMetrics() {
	for _, s := range a.metricsServers {
		s.Close()
	}
}

// MetricsAddrs are the bound metrics listeners, TLS first.
func (a *Agent) MetricsAddrs() []net.Addr {
	var out []net.Addr
	for _, s := range a.metricsServers {
		out = append(out, s.Addr())
	}
	return out
}

func (a *Agent) currentCert() *tls.Certificate {
	if id := a.current.Load(); id != nil {
		return &id.Cert
	}
	return nil
}

func (a *Agent) currentPool() *x509.CertPool {
	if id := a.current.Load(); id != nil {
		return id.CAPool
	}
	return nil
}

// Run works until ctx is done, or until the node stack cannot start (no
// service manager), which it returns.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, s := range a.metricsServers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Serve(ctx, a.log); err != nil {
				a.log.Error("metrics server stopped", "err", err)
			}
		}()
	}
	if a.cfg.BootstrapFile != "" {
		if err := a.watchBootstrapFile(ctx, &wg); err != nil {
			return err
		}
	}
	// A node stack that cannot start ends the run with its error.
	stackErr := make(chan error, 1)
	stopped := func() error {
		select {
		case err := <-stackErr:
			return err
		default:
			return nil
		}
	}
	if a.stack != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.stack.run(ctx, a.log); err != nil {
				stackErr <- err
				cancel()
			}
		}()
	}

	switch id, err := a.store.Load(); {
	case err == nil:
		a.setIdentity(id)
		a.log.Info("loaded identity from state directory", "node", id.NodeName,
			"not_after", id.Leaf().NotAfter, "state_dir", a.cfg.StateDir)
	case errors.Is(err, identity.ErrNone):
		a.log.Info("no identity yet; looking for a bootstrap document", "state_dir", a.cfg.StateDir)
	default:
		a.log.Error("identity in the state directory is unusable; a new bootstrap token is needed", "err", err)
	}

	// Sessions that end at once (a controller that keeps refusing) back off.
	if a.cfg.Notify != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.cfg.Notify.Watchdog(ctx, a.alive)
		}()
		defer a.cfg.Notify.Stopping()
	}

	pause := controlclient.Backoff{Base: a.cfg.RetryBase, Max: a.cfg.RetryMax}
	for {
		id, err := a.ensureIdentity(ctx)
		if err != nil {
			return stopped() // ctx done
		}
		if a.stack == nil {
			a.ready("enrolled as " + id.NodeName)
		}
		started := time.Now()
		reason := a.session(ctx, id)
		if ctx.Err() != nil {
			return stopped()
		}
		a.log.Info("re-checking identity", "reason", reason)
		if time.Since(started) > time.Minute {
			pause.Reset()
		}
		if err := controlclient.Sleep(ctx, pause.Next()); err != nil {
			return stopped()
		}
	}
}

// ready tells systemd, once, that the agent is up: enrolled, and with the
// node stack on, through its first reconcile pass.
func (a *Agent) ready(status string) {
	if a.cfg.Notify == nil {
		return
	}
	a.readyOnce.Do(func() {
		if err := a.cfg.Notify.Ready(status); err != nil {
			a.log.Warn("could not tell systemd the agent is ready", "err", err)
		}
	})
}

// alive is the watchdog's question: a node stack stuck in one pass for
// longer than any pass may take stops the pings, and systemd restarts
// the agent.
func (a *Agent) alive() error {
	if a.stack == nil {
		return nil
	}
	return a.stack.alive(time.Now())
}

// usable reports whether id can be used now: it is valid, and the
// controller has not refused it, or its next try is due.
func (a *Agent) usable(id *identity.Identity) bool {
	if id == nil || !id.ValidAt(a.now()) {
		return false
	}
	_, wait := a.refusal(id)
	return wait <= 0
}

// refusal says whether the controller refused id, and how long until it
// is tried again.
func (a *Agent) refusal(id *identity.Identity) (refused bool, wait time.Duration) {
	a.refusedMu.Lock()
	defer a.refusedMu.Unlock()
	if a.refusedSerial == "" || a.refusedSerial != id.Leaf().SerialNumber.Text(16) {
		return false, 0
	}
	return true, a.refusedUntil.Sub(a.now())
}

// noteRefusal holds the current certificate back when the controller says
// it no longer grants access. It is tried again after a backoff, capped at
// RefusedRetryMax, and not given up: the controller may have been
// restored from a backup that still has this node.
func (a *Agent) noteRefusal(refused *controlclient.RefusedError) {
	switch refused.Code {
	case v1.CodeNodeGone, v1.CodeBadClientCert, v1.CodeForbidden:
		if id := a.current.Load(); id != nil {
			a.refusedMu.Lock()
			a.refusedSerial = id.Leaf().SerialNumber.Text(16)
			a.refusedUntil = a.now().Add(max(a.refusedBackoff.Next(), a.cfg.RetryBase))
			a.refusedMu.Unlock()
			a.metrics.SetState(metrics.StateRefused)
		}
	}
}

// accepted records that the controller took the current certificate.
func (a *Agent) accepted() {
	a.refusedMu.Lock()
	defer a.refusedMu.Unlock()
	if a.refusedSerial != "" {
		a.log.Info("the controller accepts this node's certificate again")
		a.metrics.SetState(metrics.StateEnrolled)
	}
	a.refusedSerial, a.refusedUntil = "", time.Time{}
	a.refusedBackoff.Reset()
}

func (a *Agent) setIdentity(id *identity.Identity) {
	a.current.Store(id)
	a.metrics.CertStart.Set(float64(id.Leaf().NotBefore.Unix()))
	a.metrics.CertExpiry.Set(float64(id.Leaf().NotAfter.Unix()))
	if id.ValidAt(a.now()) {
		a.metrics.SetState(metrics.StateEnrolled)
	}
}

// ensureIdentity returns a valid identity, enrolling when a bootstrap
// token calls for it, and waiting for a new bootstrap document when
// nothing else can help. It fails only when ctx is done.
func (a *Agent) ensureIdentity(ctx context.Context) (*identity.Identity, error) {
	for {
		cur := a.current.Load()
		found, err := a.loadBootstrap(ctx)
		if err != nil && !errors.Is(err, bootstrap.ErrAbsent) {
			a.log.Error("bootstrap document unusable", "err", err)
		}
		if found != nil && found.Doc.Token != "" {
			tid, _, _ := v1.SplitToken(found.Doc.Token)
			switch {
			case cur != nil && cur.TokenID == tid:
				// Enrolled with this token before a crash removed it.
				a.clearToken(ctx, found)
			case tid == a.refusedToken:
				// Refused for good already; wait for a new document.
			default:
				id, err := a.enroll(ctx, found.Doc)
				if err == nil {
					a.clearToken(ctx, found)
					return id, nil
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				a.refusedToken = tid
				a.metrics.SetState(metrics.StateRefused)
			}
		}
		if cur = a.current.Load(); a.usable(cur) {
			if found != nil {
				a.adoptControllers(cur, found.Doc)
			}
			a.metrics.SetState(metrics.StateEnrolled)
			return a.current.Load(), nil
		}
		switch {
		case a.refusedToken != "" && found != nil && found.Doc.Token != "":
			a.log.Error("waiting for a new bootstrap document; the current token was refused",
				"hint", "on the controller: harmonyctl node token NODE -o FILE")
		case cur != nil && cur.ValidAt(a.now()):
			_, wait := a.refusal(cur)
			a.log.Error("the controller no longer accepts this node's certificate (node deleted or re-created, or the controller restored from an older backup); trying it again later, and watching for a new bootstrap document",
				"retry_in", wait.Round(time.Second), "hint", "on the controller: harmonyctl node token "+cur.NodeName+" -o FILE")
			if err := a.waitBootstrapChange(ctx, min(a.cfg.BootstrapPoll, max(wait, 0))); err != nil {
				return nil, err
			}
			continue
		case cur != nil:
			a.metrics.SetState(metrics.StateExpired)
			a.log.Error("certificate expired and no bootstrap token is available",
				"not_after", cur.Leaf().NotAfter, "hint", "on the controller: harmonyctl node token "+cur.NodeName+" -o FILE")
		default:
			a.metrics.SetState(metrics.StateWaiting)
			a.log.Warn("no identity and no bootstrap token; waiting for a bootstrap document", "sources", a.sourceNames())
		}
		if err := a.waitBootstrapChange(ctx, a.cfg.BootstrapPoll); err != nil {
			return nil, err
		}
	}
}

func (a *Agent) sourceNames() []string {
	var names []string
	for _, s := range a.sources {
		names = append(names, s.Name())
	}
	return names
}

// adoptControllers takes new controller URLs from a token-less document
// that trusts the same CA, by its bundle or by its pin.
func (a *Agent) adoptControllers(cur *identity.Identity, doc *v1.Bootstrap) {
	if doc.NodeName != cur.NodeName || slices.Equal(doc.Controllers, cur.Controllers) {
		return
	}
	sameCA := doc.CABundle == "" || bytes.Equal(bytes.TrimSpace([]byte(doc.CABundle)), bytes.TrimSpace(cur.CAPEM))
	if sameCA && doc.CAPin != "" {
		// A pin-only document: its pin must be of the CA this node trusts.
		cas, err := v1.ParseCertificatesPEM(cur.CAPEM)
		sameCA = err == nil && v1.PinMatchesAny(doc.CAPin, cas)
	}
	if !sameCA {
		a.log.Warn("bootstrap document names another CA; ignoring its controller URLs until a new token re-enrolls this node")
		return
	}
	next := *cur
	next.Controllers = doc.Controllers
	if err := a.store.SaveEnrollment(next.Enrollment); err != nil {
		a.log.Error("save controller URLs", "err", err)
		return
	}
	a.current.Store(&next)
	a.log.Info("controller URLs changed", "controllers", doc.Controllers)
}

// enroll makes a key and CSR and trades them with the token for a
// certificate, retrying across controller URLs until it succeeds, is
// refused for good, or ctx is done.
func (a *Agent) enroll(ctx context.Context, doc *v1.Bootstrap) (*identity.Identity, error) {
	a.metrics.SetState(metrics.StateEnrolling)
	backoff := controlclient.Backoff{Base: a.cfg.RetryBase, Max: a.cfg.RetryMax}
	caPEM := []byte(doc.CABundle)
	for len(caPEM) == 0 {
		fetched, err := controlclient.FetchPinnedCA(ctx, doc.Controllers, doc.CAPin)
		if err == nil {
			caPEM = fetched
			break
		}
		a.metrics.RequestErrors.WithLabelValues(controlclient.Reason(err)).Inc()
		d := backoff.Next()
		a.log.Warn("fetch pinned CA failed", "reason", controlclient.Reason(err), "err", err, "retry_in", d.Round(time.Millisecond))
		if err := controlclient.Sleep(ctx, d); err != nil {
			return nil, err
		}
	}
	pool, err := identity.PoolFromPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	key, err := identity.NewKey()
	if err != nil {
		return nil, err
	}
	csr, err := identity.CSR(key, doc.NodeName, a.cfg.DNSNames, a.addresses(ctx))
	if err != nil {
		return nil, err
	}
	client := controlclient.New(doc.Controllers, pool, nil)
	defer client.Close()
	client.OnError = a.countError
	tid, _, _ := v1.SplitToken(doc.Token)
	a.log.Info("enrolling", "node", doc.NodeName, "controllers", doc.Controllers, "token_id", tid)
	for {
		var resp v1.CertificateResponse
		_, err := client.Do(ctx, http.MethodPost, v1.PathEnroll, nil, v1.EnrollRequest{Token: doc.Token, CSR: csr}, &resp)
		if err == nil {
			e := identity.Enrollment{NodeName: doc.NodeName, Controllers: doc.Controllers, TokenID: tid, EnrolledAt: a.now().UTC()}
			id, err := identity.New(e, key, []byte(resp.Certificate), caPEM)
			if err != nil {
				return nil, fmt.Errorf("enrollment answer: %w", err)
			}
			if err := a.store.Save(id, key, []byte(resp.Certificate)); err != nil {
				return nil, fmt.Errorf("save identity: %w", err)
			}
			a.setIdentity(id)
			a.log.Info("enrolled", "node", id.NodeName, "serial", id.Leaf().SerialNumber.Text(16), "not_after", id.Leaf().NotAfter)
			return id, nil
		}
		var refused *controlclient.RefusedError
		if errors.As(err, &refused) && refused.Permanent() {
			a.log.Error("enrollment refused by the controller", "reason", refused.Code, "message", refused.Message, "controller", refused.URL)
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d := backoff.Next()
		a.log.Warn("enrollment attempt failed", "reason", controlclient.Reason(err), "err", err, "retry_in", d.Round(time.Millisecond))
		if err := controlclient.Sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

func (a *Agent) countError(reason string) {
	a.metrics.RequestErrors.WithLabelValues(reason).Inc()
}

// addresses are the certificate's IP SANs: the configured ones, else the
// primary interface's, waited for up to AddressWait (DHCP, or networkd
// still applying the static address, at boot).
func (a *Agent) addresses(ctx context.Context) []net.IP {
	var ips []net.IP
	for _, s := range a.cfg.Addresses {
		ips = append(ips, net.ParseIP(s))
	}
	if len(ips) > 0 {
		return ips
	}
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, a.cfg.AddressWait)
	defer cancel()
	// Polled on this goroutine, not watched over netlink: netinfo acts in
	// the calling thread's network namespace.
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	iface, addrs, err := netinfo.Primary()
	for ; err != nil; iface, addrs, err = netinfo.Primary() {
		select {
		case <-waitCtx.Done():
			a.log.Warn("no primary interface address for the certificate", "waited", time.Since(start).Round(time.Millisecond), "err", err)
			return nil
		case <-poll.C:
		}
	}
	// A master's keepalived may hold the cluster's API VIP on this
	// interface. It is not this node's: no inventory lists it, and the
	// controller would refuse the CSR, and with it the token, for good.
	vip, _ := netip.ParseAddr(a.cachedRole().Cluster.VIP)
	for _, addr := range addrs {
		if addr != vip.Unmap() {
			ips = append(ips, net.IP(addr.AsSlice()))
		}
	}
	a.log.Info("certificate addresses from the primary interface", "interface", iface, "addresses", ips)
	return ips
}

func (a *Agent) clearToken(ctx context.Context, found *bootstrap.Found) {
	if err := found.Source.ClearToken(ctx, found.Doc); err != nil {
		a.log.Warn("could not remove the used token from the bootstrap source", "source", found.Source.Name(), "err", err)
		return
	}
	a.log.Info("removed the used token from the bootstrap source", "source", found.Source.Name())
	a.rememberBootstrapFile()
}

// session runs renewal, the role watch and status reports until one of
// them needs the identity re-checked, or the bootstrap file changes.
func (a *Agent) session(parent context.Context, id *identity.Identity) string {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	client := controlclient.New(id.Controllers, id.CAPool, a.currentCert)
	defer client.Close()
	client.OnError = a.countError
	a.controller.Store(client)
	defer a.controller.CompareAndSwap(client, nil)

	var wg sync.WaitGroup
	done := make(chan string, 3)
	run := func(f func(context.Context, *controlclient.Client) string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done <- f(ctx, client)
		}()
	}
	run(a.renewLoop)
	run(a.watchLoop)
	run(a.statusLoop)
	defer func() {
		cancel() // before Wait: the loops end on it
		wg.Wait()
	}()
	for {
		select {
		case reason := <-done:
			return reason
		case <-a.bootstrapEvents:
			if a.bootstrapFileChanged() {
				return "bootstrap file changed"
			}
		case <-ctx.Done():
			return "stopping"
		}
	}
}

func (a *Agent) renewLoop(ctx context.Context, client *controlclient.Client) string {
	for {
		id := a.current.Load()
		at := id.RenewAt(rand.Float64())
		a.log.Info("certificate renewal scheduled", "at", at.Round(time.Second), "not_after", id.Leaf().NotAfter)
		if err := controlclient.Sleep(ctx, time.Until(at)); err != nil {
			return ""
		}
		backoff := controlclient.Backoff{Base: a.cfg.RetryBase, Max: a.cfg.RetryMax}
		for {
			err := a.renew(ctx, client, id)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ""
			}
			var refused *controlclient.RefusedError
			if errors.As(err, &refused) && refused.Permanent() {
				a.log.Error("renewal refused by the controller", "reason", refused.Code, "message", refused.Message)
				a.noteRefusal(refused)
				return "renewal refused: " + refused.Code
			}
			left := id.Leaf().NotAfter.Sub(a.now())
			if left <= 0 {
				return "certificate expired before it could be renewed"
			}
			d := min(backoff.Next(), left)
			a.log.Warn("renewal failed", "reason", controlclient.Reason(err), "err", err, "retry_in", d.Round(time.Millisecond), "expires_in", left.Round(time.Second))
			if err := controlclient.Sleep(ctx, d); err != nil {
				return ""
			}
		}
	}
}

func (a *Agent) renew(ctx context.Context, client *controlclient.Client, id *identity.Identity) error {
	key, err := identity.NewKey()
	if err != nil {
		return err
	}
	csr, err := identity.CSR(key, id.NodeName, a.cfg.DNSNames, id.Leaf().IPAddresses)
	if err != nil {
		return err
	}
	var resp v1.CertificateResponse
	if _, err := client.Do(ctx, http.MethodPost, v1.PathRenew, nil, v1.RenewRequest{CSR: csr}, &resp); err != nil {
		return err
	}
	next, err := identity.New(a.current.Load().Enrollment, key, []byte(resp.Certificate), id.CAPEM)
	if err != nil {
		return fmt.Errorf("renewal answer: %w", err)
	}
	if err := a.store.Save(next, key, []byte(resp.Certificate)); err != nil {
		return fmt.Errorf("save identity: %w", err)
	}
	a.setIdentity(next)
	client.Rotate(a.cfg.WatchWait + time.Minute)
	a.log.Info("certificate renewed", "serial", next.Leaf().SerialNumber.Text(16), "not_after", next.Leaf().NotAfter)
	return nil
}

func (a *Agent) watchLoop(ctx context.Context, client *controlclient.Client) string {
	var after int64
	cached := a.cachedRevision()
	backoff := controlclient.Backoff{Base: a.cfg.RetryBase, Max: a.cfg.RetryMax}
	for {
		var role v1.Role
		q := url.Values{"after": {strconv.FormatInt(after, 10)}, "wait": {a.cfg.WatchWait.String()}}
		reqCtx, cancel := context.WithTimeout(ctx, a.cfg.WatchWait+30*time.Second)
		status, err := client.Do(reqCtx, http.MethodGet, v1.PathNodeRole, q, nil, &role)
		cancel()
		if ctx.Err() != nil {
			return ""
		}
		if err != nil {
			var refused *controlclient.RefusedError
			if errors.As(err, &refused) && refused.Permanent() {
				a.log.Error("role watch refused by the controller", "reason", refused.Code, "message", refused.Message)
				a.noteRefusal(refused)
				return "role watch refused: " + refused.Code
			}
			d := backoff.Next()
			if controlclient.Unavailable(err) {
				a.log.Info("the controller is restarting; watching again soon", "retry_in", d.Round(time.Millisecond))
			} else {
				a.log.Warn("role watch failed", "reason", controlclient.Reason(err), "err", err, "retry_in", d.Round(time.Millisecond))
			}
			if err := controlclient.Sleep(ctx, d); err != nil {
				return ""
			}
			continue
		}
		backoff.Reset()
		a.accepted()
		if status != http.StatusOK || role.Revision <= after {
			continue
		}
		if err := role.Validate(); err != nil || role.NodeName != a.current.Load().NodeName {
			a.countError("bad_response")
			a.log.Error("controller sent an invalid role; ignoring it", "err", err, "node", role.NodeName)
			after = role.Revision
			continue
		}
		after = role.Revision
		a.acceptRole(ctx, role, cached)
	}
}

func (a *Agent) acceptRole(ctx context.Context, role v1.Role, cached int64) {
	shown, _ := json.Marshal(role.Redacted())
	msg := "new role revision"
	if role.Revision == cached {
		msg = "role unchanged since the last run"
	}
	a.log.Info(msg, "revision", role.Revision, "role", role.Role, "cluster", role.Cluster.Name, "document", string(shown))
	data, err := json.MarshalIndent(role, "", "  ")
	if err == nil {
		err = atomicfile.Write(filepath.Join(a.cfg.StateDir, RoleFile), data, 0o600)
	}
	if err != nil {
		a.log.Error("cache role", "err", err)
	}
	a.metrics.RoleRevision.Set(float64(role.Revision))
	a.observedRev.Store(role.Revision)
	if a.cfg.OnRole != nil {
		a.cfg.OnRole(ctx, role)
	}
	if a.stack != nil {
		a.stack.offer(role)
	}
	a.reportStatusSoon()
}

// reportStatusSoon wakes the status loop.
func (a *Agent) reportStatusSoon() {
	select {
	case a.statusNow <- struct{}{}:
	default:
	}
}

func (a *Agent) cachedRevision() int64 { return a.cachedRole().Revision }

// cachedRole is the role last accepted, from the state directory; the
// zero Role when there is none or it cannot be read.
func (a *Agent) cachedRole() v1.Role {
	var r v1.Role
	if data, err := os.ReadFile(filepath.Join(a.cfg.StateDir, RoleFile)); err == nil {
		if json.Unmarshal(data, &r) != nil {
			return v1.Role{}
		}
	}
	return r
}

// capabilities are the role fields this agent acts on beyond the first
// v1 ones; the controller sends no agent a field it does not list.
func capabilities() []string {
	return []string{v1.CapabilityHandOver, v1.CapabilityKeepPods, v1.CapabilityVRRPv3, v1.CapabilityEtcdSnapshots, v1.CapabilityEtcdRestore,
		v1.CapabilityEtcdRestoreFromController, v1.CapabilityEtcdRemoveMembers}
}

func (a *Agent) statusLoop(ctx context.Context, client *controlclient.Client) string {
	ticker := time.NewTicker(a.cfg.StatusInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-ticker.C:
		case <-a.statusNow:
		}
		st := v1.Status{
			APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseEnrolled,
			ObservedRevision: a.observedRev.Load(), AgentVersion: buildinfo.Version,
			Capabilities: capabilities(),
		}
		for _, ip := range a.current.Load().Leaf().IPAddresses {
			st.Addresses = append(st.Addresses, ip.String())
		}
		if a.stack != nil {
			a.stack.report(&st)
		}
		if _, err := client.Do(ctx, http.MethodPost, v1.PathNodeStatus, nil, st, nil); err != nil && ctx.Err() == nil {
			a.log.Warn("status report failed", "reason", controlclient.Reason(err), "err", err)
		}
	}
}

// watchBootstrapFile watches the file's directory, because an atomic
// replace (rename over it) is invisible to a watch on the file itself.
func (a *Agent) watchBootstrapFile(ctx context.Context, wg *sync.WaitGroup) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch bootstrap file: %w", err)
	}
	dir := filepath.Dir(a.cfg.BootstrapFile)
	if err := w.Add(dir); err != nil {
		w.Close()
		if errors.Is(err, os.ErrNotExist) {
			// Normal on a VM bootstrapped through guestinfo.
			a.log.Info("bootstrap file directory does not exist; not watching it", "dir", dir)
			return nil
		}
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	target := filepath.Clean(a.cfg.BootstrapFile)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-w.Events:
				if filepath.Clean(ev.Name) == target && ev.Op&(fsnotify.Create|fsnotify.Write|fsnotify.Rename) != 0 {
					select {
					case a.bootstrapEvents <- struct{}{}:
					default:
					}
				}
			case err := <-w.Errors:
				a.log.Warn("bootstrap file watch error", "err", err)
			}
		}
	}()
	return nil
}

// loadBootstrap reads the bootstrap document. The file's content is
// remembered first: a file rewritten while it is read then shows as a
// change, where remembering after would take the new document as seen.
func (a *Agent) loadBootstrap(ctx context.Context) (*bootstrap.Found, error) {
	a.rememberBootstrapFile()
	return bootstrap.Load(ctx, a.log, a.sources)
}

// rememberBootstrapFile records the file's content, so that the agent's
// own rewrite is not taken for an operator's change.
func (a *Agent) rememberBootstrapFile() {
	if a.cfg.BootstrapFile == "" {
		return
	}
	data, _ := os.ReadFile(a.cfg.BootstrapFile)
	a.seenMu.Lock()
	a.seenBootstrap = data
	a.seenMu.Unlock()
}

func (a *Agent) bootstrapFileChanged() bool {
	data, err := os.ReadFile(a.cfg.BootstrapFile)
	if err != nil {
		return false
	}
	a.seenMu.Lock()
	defer a.seenMu.Unlock()
	if bytes.Equal(data, a.seenBootstrap) {
		return false
	}
	a.log.Info("bootstrap file changed", "path", a.cfg.BootstrapFile)
	a.refusedToken = ""
	return true
}

// waitBootstrapChange waits for a changed bootstrap file, or poll (for
// sources that cannot be watched), or ctx.
func (a *Agent) waitBootstrapChange(ctx context.Context, poll time.Duration) error {
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return nil
		case <-a.bootstrapEvents:
			if a.bootstrapFileChanged() {
				return nil
			}
		}
	}
}
