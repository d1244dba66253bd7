package components

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// Bundle is bundle.json, at the top of the directory `make bundle` makes:
//
//	kubernetes/<version>/{kubeadm,kubelet,kubectl}
//	images/<file>.tar
//	bundle.json
type Bundle struct {
	// Kubernetes lists n first, then n-1.
	Kubernetes []BundleKubernetes `json:"kubernetes"`
	Images     []BundleImage      `json:"images"`
	// Binaries are the module-built daemons, in binaries/<name>.
	Binaries []BundleBinary `json:"binaries,omitempty"`
	// Components are the versions the bundle's contents report, for
	// image.json.
	Components []Component `json:"components"`
}

// BundleKubernetes is one version's binaries in kubernetes/<version>/.
// With Multicall, each of Binaries is a symbolic link to that one file
// beside it, which runs as the name it is called by (tools/multicall).
type BundleKubernetes struct {
	Version   string   `json:"version"`
	Binaries  []string `json:"binaries"`
	Multicall string   `json:"multicall,omitempty"`
	Source    string   `json:"source"`
}

// BundleBinary is one module-built daemon in binaries/.
type BundleBinary struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Source  string `json:"source"`
}

// BundleImage is one container image tarball in images/.
type BundleImage struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	File   string `json:"file"`
}

// ImageManifest is /etc/harmony/image.json: what one image carries.
type ImageManifest struct {
	Role    string `json:"role"`
	Version string `json:"version"`
	// Built is SOURCE_DATE_EPOCH as RFC 3339 UTC, not the wall clock, so
	// that rebuilds give the same bytes.
	Built           string           `json:"built"`
	Components      []Component      `json:"components"`
	ContainerImages []ContainerImage `json:"containerImages,omitempty"`
}

// Component is one versioned thing in an image.
type Component struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Source  string `json:"source"`
}

// ContainerImage is one image imported into containerd at first boot.
type ContainerImage struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
}

var (
	componentName = lazyregexp.New(`^[a-z0-9][a-z0-9-]{0,62}$`)
	digestPattern = lazyregexp.New(`^sha256:[0-9a-f]{64}$`)
	filePattern   = lazyregexp.New(`^[A-Za-z0-9][A-Za-z0-9._-]*\.tar$`)
)

// LoadBundle reads and checks dir/bundle.json and that every file it names
// is there.
func LoadBundle(dir string) (*Bundle, error) {
	var b Bundle
	if err := decodeFile(filepath.Join(dir, "bundle.json"), &b); err != nil {
		return nil, err
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(b.Kubernetes) == 0 {
		bad("kubernetes: empty")
	}
	for i, k := range b.Kubernetes {
		if !kubeVersion.MatchString(k.Version) {
			bad("kubernetes[%d].version %q: want v1.Y.Z", i, k.Version)
			continue
		}
		vdir := filepath.Join(dir, "kubernetes", k.Version)
		if k.Multicall != "" {
			if !componentName.MatchString(k.Multicall) {
				bad("kubernetes[%d].multicall %q: want a plain file name", i, k.Multicall)
				continue
			}
			if err := regularNoLink(filepath.Join(vdir, k.Multicall)); err != nil {
				bad("kubernetes[%d].multicall: %w", i, err)
			}
		}
		for _, bin := range k.Binaries {
			path := filepath.Join(vdir, bin)
			if k.Multicall == "" {
				if err := regularNoLink(path); err != nil {
					bad("kubernetes[%d].binaries: %w", i, err)
				}
			} else if target, err := os.Readlink(path); err != nil || target != k.Multicall {
				bad("kubernetes[%d].binaries: %s: want a symbolic link to %s (%q, %v)", i, path, k.Multicall, target, err)
			}
		}
	}
	for i, img := range b.Images {
		if !imageRef.MatchString(img.Ref) {
			bad("images[%d].ref %q: want registry/name:tag", i, img.Ref)
		}
		if !digestPattern.MatchString(img.Digest) {
			bad("images[%d].digest %q: want sha256:<64 hex>", i, img.Digest)
		}
		if !filePattern.MatchString(img.File) {
			bad("images[%d].file %q: want a plain name ending in .tar", i, img.File)
		} else if err := regular(filepath.Join(dir, "images", img.File)); err != nil {
			bad("images[%d].file: %w", i, err)
		}
	}
	for i, bin := range b.Binaries {
		if !componentName.MatchString(bin.Name) {
			bad("binaries[%d].name %q: want lowercase letters, digits and '-'", i, bin.Name)
		} else if err := regular(filepath.Join(dir, "binaries", bin.Name)); err != nil {
			bad("binaries[%d]: %w", i, err)
		}
	}
	for i, c := range b.Components {
		if err := c.validate(); err != nil {
			bad("components[%d]: %w", i, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	return &b, nil
}

// DecodeImageManifest reads image.json strictly.
func DecodeImageManifest(data []byte) (*ImageManifest, error) {
	var m ImageManifest
	if err := decodeStrict(data, &m); err != nil {
		return nil, fmt.Errorf("image.json: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("image.json: %w", err)
	}
	return &m, nil
}

// LoadImageManifest reads and checks an image.json file.
func LoadImageManifest(path string) (*ImageManifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m, err := DecodeImageManifest(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Validate checks every field.
func (m *ImageManifest) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if m.Role != RoleNode && m.Role != RoleControlPlane {
		bad("role %q: want %s or %s", m.Role, RoleNode, RoleControlPlane)
	}
	if m.Version == "" || len(m.Version) > 128 || !printable(m.Version) {
		bad("version %q: want 1-128 printable characters", m.Version)
	}
	if _, err := time.Parse(time.RFC3339, m.Built); err != nil {
		bad("built %q: want an RFC 3339 time", m.Built)
	}
	names := map[string]bool{}
	for i, c := range m.Components {
		if err := c.validate(); err != nil {
			bad("components[%d]: %w", i, err)
		}
		if names[c.Name] {
			bad("components[%d].name %q: listed twice", i, c.Name)
		}
		names[c.Name] = true
	}
	for i, img := range m.ContainerImages {
		if !imageRef.MatchString(img.Ref) {
			bad("containerImages[%d].ref %q: want registry/name:tag", i, img.Ref)
		}
		if !digestPattern.MatchString(img.Digest) {
			bad("containerImages[%d].digest %q: want sha256:<64 hex>", i, img.Digest)
		}
	}
	return errors.Join(errs...)
}

// Encode is the canonical image.json: indented, with a final newline.
func (m *ImageManifest) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("image.json: %w", err)
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

func (c Component) validate() error {
	var errs []error
	if !componentName.MatchString(c.Name) {
		errs = append(errs, fmt.Errorf("name %q: want lowercase letters, digits and '-'", c.Name))
	}
	if c.Version == "" || len(c.Version) > 128 || !printable(c.Version) {
		errs = append(errs, fmt.Errorf("version %q (%s): want 1-128 printable characters", c.Version, c.Name))
	}
	if len(c.Source) > 512 || !printable(c.Source) {
		errs = append(errs, fmt.Errorf("source (%s): want at most 512 printable characters", c.Name))
	}
	return errors.Join(errs...)
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// regularNoLink is regular, for a file that must not be a symbolic link
// (one could point anywhere on the build machine).
func regularNoLink(path string) error { return regularBy(os.Lstat, path) }

func regular(path string) error { return regularBy(os.Stat, path) }

func regularBy(stat func(string) (os.FileInfo, error), path string) error {
	st, err := stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	return nil
}

func decodeFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := decodeStrict(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// decodeStrict refuses unknown fields and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the document")
	}
	return nil
}
