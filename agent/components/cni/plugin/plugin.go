// Package plugin is the contract between the CNI component
// (agent/components/cni) and one pod-network implementation (flannel,
// Contiv). A plugin only says what a node needs, as a Plan; the component
// writes the files, issues the certificates, runs the units and removes
// what a node no longer needs, the same way for every plugin. Adding
// another CNI (Calico, Cilium) is one package that implements Plugin and
// one line in the component's registry.
package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/harmonykaas/harmony/agent/files"
	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Plugin is one pod-network implementation.
type Plugin interface {
	// Name is the value of role.Cluster.CNI.Type that selects it.
	Name() string
	// Plan validates the role against the host and says what this node
	// needs. It must not touch the host: a role it refuses leaves every
	// file as it was. Errors name the role field (cluster.podCIDR: ...).
	Plan(host *reconcile.Host, role *v1.Role) (*Plan, error)
	// Owned lists everything the plugin may put on any node, so that the
	// component removes what a node no longer needs after a role change
	// (a master that became a worker) or a switch to another CNI.
	Owned() Owned
}

// Owned is what a plugin may leave on a node, as node paths and unit names.
type Owned struct {
	Files []string
	Units []string
}

// Plan is what one node needs from one plugin.
type Plan struct {
	// Files are written in order, each checked by its Validate before it
	// replaces the live one.
	Files []File
	// Certs are client certificates the units present.
	Certs []Cert
	// Dirs are created (0700) before the units start, such as data
	// directories.
	Dirs []string
	// Units run on this node, in order, but only when every one of
	// Binaries is installed and nothing is Missing.
	Units []service.Unit
	// Binaries are the absolute paths (on the node) the units and the
	// container runtime need.
	Binaries []string
	// Missing lists inputs the role does not provide and the node does not
	// have (a credential, say); the units do not start while any is
	// missing. Each entry says what is missing and why.
	Missing []string
	// Waiting lists what other programs on the node have not produced yet
	// (the kubelet's credential, a daemon's lease): the component is not
	// healthy until it is there, but nothing is wrong. Each entry says
	// what is awaited.
	Waiting []string
	// Apply, when set, runs after the units are up, to push state into the
	// plugin's own control plane (Contiv's netmaster holds the pod network
	// there, not in a file). It returns what it changed; an error leaves
	// the component unhealthy, and the next pass tries again.
	Apply func(ctx context.Context) (actions []string, err error)
}

// File is one configuration file.
type File struct {
	// Path on the node; the component maps it under the host's root.
	Path string
	Data []byte
	Mode os.FileMode
	// Validate checks a candidate before it replaces the live file; nil
	// accepts anything.
	Validate files.Validator
	// Units re-read the file: a change restarts or reloads them.
	Units []string
}

// Cert is a client certificate and key (0600) signed by a CA of the role.
type Cert struct {
	// CA signs the certificate. When the role carries the CA without its
	// key (workers), the pair cannot be issued here; the plan then lists it
	// in Missing instead.
	CA       *v1.KeyPair
	CertPath string
	KeyPath  string
	Leaf     pki.Leaf
	// Units present the certificate: a new pair restarts or reloads them.
	Units []string
}

// AllFiles lists the node paths a plan writes, certificates included.
func (p *Plan) AllFiles() []string {
	var out []string
	for _, f := range p.Files {
		out = append(out, f.Path)
	}
	for _, c := range p.Certs {
		out = append(out, c.CertPath, c.KeyPath)
	}
	return out
}

// FieldErr is a role refusal naming the role field, as plugins' Plan
// returns it.
func FieldErr(field, format string, args ...any) error {
	return &v1.FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// MarshalJSON is indented JSON with a final newline: what an operator
// reads in a plugin's configuration files.
func MarshalJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
