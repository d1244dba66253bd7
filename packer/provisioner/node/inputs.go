package node

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/images/components"
)

// inputs is what the pin file and the bundle say this role's image gets.
type inputs struct {
	Packages   []components.Package
	Kubernetes []kubernetesDir
	Images     []bundleImage
	Binaries   []bundleBinary
	bundle     *components.Bundle
	pins       *components.Pins
}

type kubernetesDir struct {
	Version  string
	Dir      string
	Binaries []string
	// Multicall, when set, is the one file each binary links to.
	Multicall string
}

// bundleBinary is a module-built daemon from the bundle and where the
// image gets it.
type bundleBinary struct {
	Path string // in the bundle
	Dest string // in the image
}

type bundleImage struct {
	components.BundleImage
	Path string
}

func loadInputs(c *Config) (*inputs, error) {
	pins, err := components.Load(c.ComponentsFile)
	if err != nil {
		return nil, err
	}
	bundle, err := components.LoadBundle(c.BundleDir)
	if err != nil {
		return nil, err
	}
	in := &inputs{Packages: pins.PackagesFor(c.Role), bundle: bundle, pins: pins}
	for _, p := range in.Packages {
		if !validName(p.Name) || !validName(p.Version) {
			return nil, fmt.Errorf("package %q=%q: not safe to pass to apt", p.Name, p.Version)
		}
	}
	// The bundle must hold what the pins say, or the image would record
	// one version and carry another.
	for i, k := range pins.Kubernetes {
		if i >= len(bundle.Kubernetes) || bundle.Kubernetes[i].Version != k.Version {
			return nil, fmt.Errorf("bundle %s: Kubernetes %s is pinned but not in the bundle (rebuild it: make bundle)", c.BundleDir, k.Version)
		}
	}
	pinned := map[string]bool{}
	for _, img := range pins.Images {
		pinned[img.Ref] = true
	}
	for _, img := range bundle.Images {
		if !pinned[img.Ref] {
			return nil, fmt.Errorf("bundle %s: image %s is not in %s (rebuild it: make bundle)", c.BundleDir, img.Ref, c.ComponentsFile)
		}
		delete(pinned, img.Ref)
	}
	for ref := range pinned {
		return nil, fmt.Errorf("bundle %s: pinned image %s is missing (rebuild it: make bundle)", c.BundleDir, ref)
	}

	for _, pin := range pins.BinariesFor(c.Role) {
		i := slices.IndexFunc(bundle.Binaries, func(b components.BundleBinary) bool { return b.Name == pin.Name })
		if i < 0 || bundle.Binaries[i].Version != pin.Version {
			return nil, fmt.Errorf("bundle %s: %s %s is pinned but not in the bundle (rebuild it: make bundle)", c.BundleDir, pin.Name, pin.Version)
		}
		in.Binaries = append(in.Binaries, bundleBinary{Path: filepath.Join(c.BundleDir, "binaries", pin.Name), Dest: pin.Path})
	}

	// The appliance runs no kubelet and no containers: kubectl for the
	// operator is all it takes from Kubernetes.
	for i, k := range bundle.Kubernetes {
		bins := k.Binaries
		if c.Role == RoleControlPlane {
			if i > 0 {
				break
			}
			bins = []string{"kubectl"}
		}
		in.Kubernetes = append(in.Kubernetes, kubernetesDir{
			Version: k.Version, Dir: filepath.Join(c.BundleDir, "kubernetes", k.Version), Binaries: bins, Multicall: k.Multicall,
		})
	}
	if c.Role == RoleNode {
		for _, img := range bundle.Images {
			in.Images = append(in.Images, bundleImage{BundleImage: img, Path: filepath.Join(c.BundleDir, "images", img.File)})
		}
	}
	return in, nil
}

// manifest is image.json: the versions the image really carries, read
// back from the machine where they can be (Debian packages, the agent).
func (p *Provisioner) manifest(ctx context.Context, r *remote, plan *plan) ([]byte, error) {
	c := &p.config
	epoch, _ := strconv.ParseInt(c.SourceDateEpoch, 10, 64) // checked in Prepare
	m := components.ImageManifest{
		Role:    c.Role,
		Version: c.ImageVersion,
		Built:   time.Unix(epoch, 0).UTC().Format(time.RFC3339),
	}
	agent, err := r.output(ctx, "/usr/local/bin/harmony-agent --version", true)
	if err != nil {
		return nil, fmt.Errorf("harmony-node: agent version: %w", err)
	}
	m.Components = append(m.Components, components.Component{
		Name: "harmony-agent", Version: lastField(agent), Source: "this repository",
	})
	if c.Role == RoleControlPlane {
		controller, err := r.output(ctx, "/usr/local/bin/harmony-controller --version", true)
		if err != nil {
			return nil, fmt.Errorf("harmony-node: controller version: %w", err)
		}
		m.Components = append(m.Components, components.Component{
			Name: "harmony-controller", Version: lastField(controller), Source: "this repository",
		})
	}
	if len(plan.PackageNames) > 0 {
		out, err := r.scriptOutput(ctx, "query-packages.sh", queryScript, plan, true)
		if err != nil {
			return nil, fmt.Errorf("harmony-node: installed package versions: %w", err)
		}
		installed := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				installed[f[0]] = f[1]
			}
		}
		for _, pkg := range plan.inputs.Packages {
			if installed[pkg.Name] != pkg.Version {
				return nil, fmt.Errorf("harmony-node: %s is %q on the machine, pinned %q", pkg.Name, installed[pkg.Name], pkg.Version)
			}
			m.Components = append(m.Components, components.Component{
				Name: pkg.Name, Version: pkg.Version, Source: "debian " + plan.inputs.pins.Debian.Suite,
			})
		}
	}
	for _, bc := range plan.inputs.bundle.Components {
		if c.Role == RoleNode || bc.Name == "kubernetes" { // the appliance carries kubectl only
			m.Components = append(m.Components, bc)
		}
	}
	for _, u := range plan.inputs.pins.UnavailableFor(c.Role) {
		m.Components = append(m.Components, components.Component{
			Name: u.Name, Version: "absent", Source: "pinned " + u.Version + ", not carried: " + u.Reason,
		})
	}
	for _, img := range plan.inputs.Images {
		m.ContainerImages = append(m.ContainerImages, components.ContainerImage{Ref: img.Ref, Digest: img.Digest})
	}
	return m.Encode()
}

// lastField is the version in "harmony-agent version v0.1.0".
func lastField(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return "unknown"
	}
	return f[len(f)-1]
}
