// Package components reads images/components.yaml, the one file that pins
// every component a Harmony image carries, and defines the documents the
// image build passes along: the bundle's bundle.json and the image's
// /etc/harmony/image.json.
package components

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// Roles an image is built for.
const (
	RoleNode         = "node"
	RoleControlPlane = "control-plane"
)

// Pins is images/components.yaml.
type Pins struct {
	Debian      Debian        `json:"debian"`
	Kubernetes  []Kubernetes  `json:"kubernetes"`
	Images      []Image       `json:"images"`
	Binaries    []Binary      `json:"binaries,omitempty"`
	Unavailable []Unavailable `json:"unavailable,omitempty"`
}

// Binary is a daemon built from its Go module, pinned in a tools/
// directory, and installed at Path in the roles' images.
type Binary struct {
	Name string `json:"name"`
	// Module and Version are the Go module the binary's main package is
	// in, as Tools' go.mod requires it.
	Module  string   `json:"module"`
	Version string   `json:"version"`
	Tools   string   `json:"tools"`
	Path    string   `json:"path"`
	Roles   []string `json:"roles"`
	// VersionVariable is the package variable the build sets to Version
	// (go build -ldflags -X), so that the binary reports it.
	VersionVariable string `json:"versionVariable,omitempty"`
}

// Debian is the base distribution and the packages installed from it.
type Debian struct {
	Suite  string `json:"suite"`
	Mirror string `json:"mirror"`
	// SecurityMirror serves <suite>-security; some pinned versions come
	// from there.
	SecurityMirror string    `json:"securityMirror"`
	Packages       []Package `json:"packages"`
}

// Package is one Debian package at an exact version, for the roles that
// carry it.
type Package struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	Roles   []string `json:"roles"`
}

// Kubernetes is one Kubernetes release and its two sources.
type Kubernetes struct {
	Version string `json:"version"`
	// Module is the tools/ directory whose go.mod pins k8s.io/kubernetes
	// at Version; the binaries are built from it.
	Module  string  `json:"module"`
	Release Release `json:"release"`
}

// Release is the official download: URL/<binary>, checked against SHA256.
type Release struct {
	URL    string            `json:"url"`
	SHA256 map[string]string `json:"sha256"`
}

// Image is one container image the node image carries.
type Image struct {
	Ref    string `json:"ref"`
	Source string `json:"source"`
}

// Unavailable is a pinned component nothing here can provide.
type Unavailable struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	Roles   []string `json:"roles"`
	Reason  string   `json:"reason"`
}

// Load reads and checks a pin file.
func Load(path string) (*Pins, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("components: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("components: %s: %w", path, err)
	}
	return p, nil
}

// Parse decodes a pin file strictly (unknown fields are errors) and
// validates it.
func Parse(data []byte) (*Pins, error) {
	var p Pins
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

var (
	debianName    = lazyregexp.New(`^[a-z0-9][a-z0-9+.-]+$`)
	debianVersion = lazyregexp.New(`^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$`)
	kubeVersion   = lazyregexp.New(`^v1\.[0-9]+\.[0-9]+$`)
	sha256Hex     = lazyregexp.New(`^[0-9a-f]{64}$`)
	imageRef      = lazyregexp.New(`^[a-z0-9.-]+(/[a-z0-9._-]+)+:[A-Za-z0-9._-]+$`)
	modulePath    = lazyregexp.New(`^tools/[a-z0-9-]+$`)
	goModule      = lazyregexp.New(`^[a-z0-9.-]+\.[a-z]+(/[A-Za-z0-9._-]+)+$`)
	semver        = lazyregexp.New(`^v[0-9]+\.[0-9]+\.[0-9]+$`)
	// Nothing a shell or the linker would read as more than one word.
	versionVariable = lazyregexp.New(`^[a-z0-9.-]+(/[A-Za-z0-9._-]+)*\.[A-Za-z_][A-Za-z0-9_]*$`)
	binaryPath      = lazyregexp.New(`^/usr/(local/bin|lib/[a-z0-9-]+)/[a-z0-9][a-z0-9._-]*$`)
)

// KubernetesBinaries are the binaries each Kubernetes version puts in a
// node image.
var KubernetesBinaries = []string{"kubeadm", "kubelet", "kubectl"}

// Validate checks every field; the error lists each problem by its path.
func (p *Pins) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if p.Debian.Suite == "" || !debianName.MatchString(p.Debian.Suite) {
		bad("debian.suite %q: want a suite name such as bookworm", p.Debian.Suite)
	}
	for field, mirror := range map[string]string{"debian.mirror": p.Debian.Mirror, "debian.securityMirror": p.Debian.SecurityMirror} {
		if u, err := url.Parse(mirror); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("%s %q: want an http(s) URL", field, mirror)
		}
	}
	seen := map[string]bool{}
	for i, pkg := range p.Debian.Packages {
		where := fmt.Sprintf("debian.packages[%d]", i)
		if !debianName.MatchString(pkg.Name) {
			bad("%s.name %q: not a Debian package name", where, pkg.Name)
		}
		if seen[pkg.Name] {
			bad("%s.name %q: listed twice", where, pkg.Name)
		}
		seen[pkg.Name] = true
		if !debianVersion.MatchString(pkg.Version) {
			bad("%s.version %q: want an exact Debian version such as 1:2.2.7-1+b2", where, pkg.Version)
		}
		checkRoles(where, pkg.Roles, bad)
	}

	if len(p.Kubernetes) != 2 {
		bad("kubernetes: %d versions, want 2 (n, then n-1)", len(p.Kubernetes))
	}
	for i, k := range p.Kubernetes {
		where := fmt.Sprintf("kubernetes[%d]", i)
		if !kubeVersion.MatchString(k.Version) {
			bad("%s.version %q: want v1.Y.Z", where, k.Version)
		}
		if !modulePath.MatchString(k.Module) {
			bad("%s.module %q: want a tools/<name> directory", where, k.Module)
		}
		if u, err := url.Parse(k.Release.URL); err != nil || u.Scheme != "https" || u.Host == "" {
			bad("%s.release.url %q: want an https URL", where, k.Release.URL)
		}
		for _, b := range sortedKeys(k.Release.SHA256) {
			if !slices.Contains(KubernetesBinaries, b) {
				bad("%s.release.sha256.%s: not one of %s", where, b, strings.Join(KubernetesBinaries, ", "))
			}
			if !sha256Hex.MatchString(k.Release.SHA256[b]) {
				bad("%s.release.sha256.%s: want 64 lowercase hex digits", where, b)
			}
		}
	}
	if len(p.Kubernetes) == 2 && kubeVersion.MatchString(p.Kubernetes[0].Version) && kubeVersion.MatchString(p.Kubernetes[1].Version) {
		if n, prev := Minor(p.Kubernetes[0].Version), Minor(p.Kubernetes[1].Version); prev != n-1 {
			bad("kubernetes[1].version %s: want minor %d (n-1 of %s)", p.Kubernetes[1].Version, n-1, p.Kubernetes[0].Version)
		}
	}

	refs := map[string]bool{}
	for i, img := range p.Images {
		where := fmt.Sprintf("images[%d]", i)
		if !imageRef.MatchString(img.Ref) {
			bad("%s.ref %q: want registry/name:tag", where, img.Ref)
		}
		if refs[img.Ref] {
			bad("%s.ref %q: listed twice", where, img.Ref)
		}
		refs[img.Ref] = true
		if strings.TrimSpace(img.Source) == "" {
			bad("%s.source: empty; say where the image comes from", where)
		}
	}
	names := map[string]bool{}
	for i, b := range p.Binaries {
		where := fmt.Sprintf("binaries[%d]", i)
		if !componentName.MatchString(b.Name) {
			bad("%s.name %q: want lowercase letters, digits and '-'", where, b.Name)
		}
		if names[b.Name] {
			bad("%s.name %q: listed twice", where, b.Name)
		}
		names[b.Name] = true
		if !goModule.MatchString(b.Module) {
			bad("%s.module %q: want a Go module path such as github.com/org/name", where, b.Module)
		}
		if !semver.MatchString(b.Version) {
			bad("%s.version %q: want an exact version such as v0.28.10", where, b.Version)
		}
		if !modulePath.MatchString(b.Tools) {
			bad("%s.tools %q: want a tools/<name> directory", where, b.Tools)
		}
		if !binaryPath.MatchString(b.Path) {
			bad("%s.path %q: want /usr/local/bin/<name> or /usr/lib/<dir>/<name>", where, b.Path)
		}
		if b.VersionVariable != "" && !versionVariable.MatchString(b.VersionVariable) {
			bad("%s.versionVariable %q: want <package path>.<Variable>", where, b.VersionVariable)
		}
		checkRoles(where, b.Roles, bad)
	}
	for i, u := range p.Unavailable {
		where := fmt.Sprintf("unavailable[%d]", i)
		if u.Name == "" || u.Version == "" || u.Reason == "" {
			bad("%s: name, version and reason are all required", where)
		}
		checkRoles(where, u.Roles, bad)
	}
	return errors.Join(errs...)
}

func checkRoles(where string, roles []string, bad func(string, ...any)) {
	if len(roles) == 0 {
		bad("%s.roles: empty; want %s and/or %s", where, RoleNode, RoleControlPlane)
	}
	for _, r := range roles {
		if r != RoleNode && r != RoleControlPlane {
			bad("%s.roles: %q, want %s or %s", where, r, RoleNode, RoleControlPlane)
		}
	}
}

// UnavailableFor returns what a role's image should carry but cannot.
func (p *Pins) UnavailableFor(role string) []Unavailable {
	var out []Unavailable
	for _, u := range p.Unavailable {
		if slices.Contains(u.Roles, role) {
			out = append(out, u)
		}
	}
	return out
}

// BinariesFor returns the module-built binaries a role's image carries.
func (p *Pins) BinariesFor(role string) []Binary {
	var out []Binary
	for _, b := range p.Binaries {
		if slices.Contains(b.Roles, role) {
			out = append(out, b)
		}
	}
	return out
}

// PackagesFor returns the Debian packages a role's image carries.
func (p *Pins) PackagesFor(role string) []Package {
	var out []Package
	for _, pkg := range p.Debian.Packages {
		if slices.Contains(pkg.Roles, role) {
			out = append(out, pkg)
		}
	}
	return out
}

// Minor is Y of v1.Y.Z, or -1.
func Minor(version string) int {
	var major, minor, patch int
	if _, err := fmt.Sscanf(version, "v%d.%d.%d", &major, &minor, &patch); err != nil {
		return -1
	}
	return minor
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
