// Package cni is the reconcile.Component that gives a node its pod network.
// It picks a plugin by role.Cluster.CNI.Type ("flannel" or "contiv"; empty
// means contiv, what roles said before flannel existed) from a registry, asks it for the node's plan
// (plugin.Plan), and carries the plan out the same way for every plugin:
// files written atomically and only after their checker accepts them
// (the network configuration is parsed with libcni), client certificates
// issued from the role's CAs, units started or restarted when what they
// read changed, and whatever a plugin owns but this node no longer needs
// removed. Adding a CNI is one package under agent/components/cni and one
// line in registry.
//
// A plugin's daemons start only when their binaries are installed. Contiv
// is not packaged in Debian and cannot be fetched in the lab, so there the
// component renders and validates everything, starts nothing, and reports
// Converged and healthy with the message "contiv binaries not installed on
// this host; configuration rendered and validated only". An image that
// ships the binaries sets Config.RequireDaemons, which turns a missing
// binary into Failed. flannel's binaries are in the node image.
package cni

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/harmonykaas/harmony/agent/components/cni/contiv"
	"github.com/harmonykaas/harmony/agent/components/cni/flannel"
	"github.com/harmonykaas/harmony/agent/components/cni/plugin"
	"github.com/harmonykaas/harmony/agent/files"
	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Name names the component.
const Name = "cni"

// DefaultType is the CNI of a role that names none.
const DefaultType = contiv.Name

// Config configures the component and its plugins.
type Config struct {
	Contiv  contiv.Config
	Flannel flannel.Config
	// RequireDaemons makes a missing plugin binary a failure rather than
	// a render-only pass: for images that ship them.
	RequireDaemons bool
}

// registry is every CNI this agent knows, by role.Cluster.CNI.Type.
func registry(cfg Config) []plugin.Plugin {
	return []plugin.Plugin{
		contiv.New(cfg.Contiv),
		flannel.New(cfg.Flannel),
	}
}

// Component converges the pod network.
type Component struct {
	cfg     Config
	plugins map[string]plugin.Plugin
	// names are the plugins' names, sorted, for messages.
	names []string

	// mu serializes passes: two at once would race on the files.
	mu sync.Mutex
}

var _ reconcile.Component = (*Component)(nil)

// New returns the component with every registered plugin.
func New(cfg Config) *Component { return newWithPlugins(cfg, registry(cfg)...) }

func newWithPlugins(cfg Config, plugins ...plugin.Plugin) *Component {
	c := &Component{cfg: cfg, plugins: map[string]plugin.Plugin{}}
	for _, p := range plugins {
		c.plugins[p.Name()] = p
		c.names = append(c.names, p.Name())
	}
	sort.Strings(c.names)
	return c
}

// Name implements reconcile.Component.
func (c *Component) Name() string { return Name }

// Inputs are the node paths that other programs write and the plugins
// read: a change to one is worth a pass at once.
func (c *Component) Inputs() []string {
	var out []string
	for _, name := range c.names {
		if in, ok := c.plugins[name].(interface{ Inputs() []string }); ok {
			out = append(out, in.Inputs()...)
		}
	}
	return out
}

// Reconcile implements reconcile.Component.
func (c *Component) Reconcile(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := reconcile.Status{Component: Name}
	if role == nil {
		return st.Failed(errors.New("no role"))
	}
	typ := role.Cluster.CNI.Type
	if typ == "" {
		typ = DefaultType
	}
	p, ok := c.plugins[typ]
	if !ok {
		return st.Failed(&v1.FieldError{Field: "cluster.cni.type",
			Problem: fmt.Sprintf("unknown CNI %q; this agent knows %s", typ, strings.Join(c.names, ", "))})
	}
	// The plan is pure: a role it refuses changes nothing on the host.
	plan, err := p.Plan(host, role)
	if err != nil {
		return st.Failed(fmt.Errorf("%s: %w", p.Name(), err))
	}

	var missing []string
	for _, f := range plan.Files {
		changed, err := files.WriteOwing(host.Path(f.Path), f.Data, f.Mode, f.Validate, host.OweReload(f.Units...))
		if err != nil {
			return st.Failed(fmt.Errorf("%s: %w", f.Path, err))
		}
		if changed {
			st.Actions = append(st.Actions, "wrote "+f.Path)
		}
	}
	for _, cert := range plan.Certs {
		issued, lack, err := ensureCert(host, cert)
		if err != nil {
			return st.Failed(fmt.Errorf("%s: %w", cert.CertPath, err))
		}
		if lack != "" {
			missing = append(missing, lack)
		}
		if issued {
			st.Actions = append(st.Actions, "issued "+cert.CertPath)
		}
	}
	for _, d := range plan.Dirs {
		if err := os.MkdirAll(host.Path(d), 0o700); err != nil {
			return st.Failed(fmt.Errorf("create %s: %w", d, err))
		}
	}
	removed, err := c.removeStale(ctx, host, plan)
	st.Actions = append(st.Actions, removed...)
	if err != nil {
		return st.Failed(err)
	}

	missing = append(missing, plan.Missing...)
	var absent []string
	for _, b := range plan.Binaries {
		if !executable(b) {
			absent = append(absent, b)
		}
	}
	if len(absent) > 0 || len(missing) > 0 {
		return c.renderOnly(st, p, absent, missing)
	}

	for _, u := range plan.Units {
		// Reloads owed for changed files were recorded above, so that a
		// later failure in this pass cannot lose them.
		actions, err := host.RunUnit(ctx, u, false)
		st.Actions = append(st.Actions, actions...)
		if err != nil {
			return st.Failed(err)
		}
		st.Units = append(st.Units, u.Name)
	}
	st.Phase = reconcile.PhaseConverged
	var down []string
	for _, name := range st.Units {
		s, err := host.Services.State(ctx, name)
		if err != nil || !s.Running {
			d := name
			if s.LastExit != "" {
				d += " (last exit: " + s.LastExit + ")"
			}
			down = append(down, d)
		}
	}
	if len(down) > 0 {
		st.Message = "not running: " + strings.Join(down, ", ")
		return st
	}
	// Applied before waiting: what a plugin pushes into its control
	// plane may be what it waits for (flannel's lease needs its RBAC).
	if plan.Apply != nil {
		actions, err := plan.Apply(ctx)
		st.Actions = append(st.Actions, actions...)
		if err != nil {
			// Retried on the next pass: netmaster may still be electing.
			st.Message = "pod network not applied yet: " + err.Error()
			return st
		}
	}
	if len(plan.Waiting) > 0 {
		st.Message = "waiting for " + strings.Join(plan.Waiting, "; ")
		return st
	}
	st.Healthy = true
	return st
}

// renderOnly ends a pass whose units cannot run on this host.
func (c *Component) renderOnly(st reconcile.Status, p plugin.Plugin, absent, missing []string) reconcile.Status {
	var parts []string
	if len(absent) > 0 {
		parts = append(parts, fmt.Sprintf("%s binaries not installed on this host (%s)", p.Name(), strings.Join(absent, ", ")))
	}
	if len(missing) > 0 {
		parts = append(parts, "the node lacks "+strings.Join(missing, "; "))
	}
	msg := strings.Join(parts, "; ")
	// Binaries present but inputs missing: this host means to run the
	// plugin and cannot.
	if (len(absent) > 0 && c.cfg.RequireDaemons) || len(absent) == 0 {
		st.Phase, st.Healthy, st.Message = reconcile.PhaseFailed, false, msg+"; nothing started"
		return st
	}
	st.Phase, st.Healthy = reconcile.PhaseConverged, true
	if len(missing) == 0 {
		st.Message = fmt.Sprintf("%s binaries not installed on this host; configuration rendered and validated only (missing %s)", p.Name(), strings.Join(absent, ", "))
	} else {
		st.Message = fmt.Sprintf("%s binaries not installed on this host; configuration rendered and validated only (missing %s; the node also lacks %s)", p.Name(), strings.Join(absent, ", "), strings.Join(missing, "; "))
	}
	return st
}

// removeStale stops the units and removes the files that any plugin owns
// but this node's plan does not use: a master that became a worker, a
// switch to another CNI, a credential the role no longer carries. Units
// stop before their files go.
func (c *Component) removeStale(ctx context.Context, host *reconcile.Host, plan *plugin.Plan) ([]string, error) {
	wantUnits := map[string]bool{}
	for _, u := range plan.Units {
		wantUnits[u.Name] = true
	}
	wantFiles := plan.AllFiles()
	var actions []string
	for _, name := range c.names {
		for _, u := range c.plugins[name].Owned().Units {
			if wantUnits[u] {
				continue
			}
			a, err := host.StopUnit(ctx, u)
			actions = append(actions, a...)
			if err != nil {
				return actions, err
			}
		}
	}
	for _, name := range c.names {
		for _, f := range c.plugins[name].Owned().Files {
			if slices.Contains(wantFiles, f) {
				continue
			}
			switch err := os.Remove(host.Path(f)); {
			case err == nil:
				actions = append(actions, "removed "+f)
			case !errors.Is(err, os.ErrNotExist):
				return actions, fmt.Errorf("remove stale %s: %w", f, err)
			}
		}
	}
	return actions, nil
}

// ensureCert issues cert when the role carries its CA's key, owing its
// units a reload before the new pair is in place. Otherwise a
// pair delivered by other means must already be there; lack then says
// what is missing.
func ensureCert(host *reconcile.Host, cert plugin.Cert) (issued bool, lack string, err error) {
	certPath, keyPath := host.Path(cert.CertPath), host.Path(cert.KeyPath)
	if cert.CA.Key != "" {
		ca, err := pki.LoadCA(cert.CA)
		if err != nil {
			return false, "", err
		}
		issued, err := ca.EnsureOwing(certPath, keyPath, cert.Leaf, host.OweReload(cert.Units...))
		return issued, "", err
	}
	if err := deliveredPair(certPath, keyPath, cert.CA); err != nil {
		return false, fmt.Sprintf("a client certificate at %s (the role carries its CA without the key, so it cannot be issued here: %v)", cert.CertPath, err), nil
	}
	return false, "", nil
}

// deliveredPair checks a pair the agent did not issue: it loads, the CA
// signed it, and it is valid now.
func deliveredPair(certPath, keyPath string, ca *v1.KeyPair) error {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errors.New("none delivered")
		}
		return err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	cas, err := v1.ParseCertificatesPEM([]byte(ca.Certificate))
	if err != nil {
		return err
	}
	if err := leaf.CheckSignatureFrom(cas[0]); err != nil {
		return fmt.Errorf("not signed by %s", cas[0].Subject)
	}
	if now := time.Now(); now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return fmt.Errorf("not valid now (%s to %s)", leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
	}
	return nil
}

func executable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0
}
