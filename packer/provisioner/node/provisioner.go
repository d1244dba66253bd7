// Package node is the harmony-node provisioner: it installs the agent, its
// units and the pinned component bundle for the image's role, writes
// /etc/harmony/image.json and runs the sysprep steps. It speaks only
// through Packer's communicator (uploads and shell commands), so it works
// in the harmony-debootstrap chroot as well as over SSH on a VM that
// vsphere-iso or vsphere-clone made.
package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"text/template"

	"github.com/hashicorp/hcl/v2/hcldec"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// Provisioner implements packersdk.Provisioner.
type Provisioner struct {
	config Config
}

var _ packersdk.Provisioner = (*Provisioner)(nil)

func (p *Provisioner) ConfigSpec() hcldec.ObjectSpec { return p.config.FlatMapstructure().HCL2Spec() }

func (p *Provisioner) Prepare(raws ...any) error { return p.config.prepare(raws...) }

// Provision stages the files, installs them, records image.json, and
// cleans the machine for cloning.
func (p *Provisioner) Provision(ctx context.Context, ui packersdk.Ui, comm packersdk.Communicator, _ map[string]any) error {
	c := &p.config
	plan, err := newPlan(c)
	if err != nil {
		return err
	}
	r := &remote{comm: comm, ui: ui, cfg: c}

	ui.Say(fmt.Sprintf("harmony-node: staging %d files (%s) in %s", len(plan.uploads), humanBytes(plan.bytes()), c.StagingDir))
	if err := r.run(ctx, "mkdir -p -m 0700 "+strings.Join(plan.dirs(c.StagingDir), " ")); err != nil {
		return fmt.Errorf("harmony-node: create staging directory: %w", err)
	}
	defer func() {
		// Best effort: a staging directory left in an image is a leak,
		// but the error that got us here matters more.
		_ = r.run(context.WithoutCancel(ctx), "rm -rf "+c.StagingDir)
	}()
	for _, u := range plan.uploads {
		if err := r.uploadFile(u.local, path.Join(c.StagingDir, u.remote)); err != nil {
			return fmt.Errorf("harmony-node: upload %s: %w", u.local, err)
		}
	}

	ui.Say("harmony-node: installing the agent, units and components for the " + c.Role + " role")
	if err := r.script(ctx, "install.sh", installScript, plan); err != nil {
		return err
	}

	manifest, err := p.manifest(ctx, r, plan)
	if err != nil {
		return err
	}
	if err := r.upload(bytes.NewReader(manifest), path.Join(c.StagingDir, "image.json")); err != nil {
		return fmt.Errorf("harmony-node: upload image.json: %w", err)
	}
	if err := r.script(ctx, "install-manifest.sh", manifestScript, plan); err != nil {
		return err
	}

	if c.SkipSysprep {
		ui.Say("harmony-node: skip_sysprep set: machine-id, host keys and logs are left as they are")
		return nil
	}
	ui.Say("harmony-node: sysprep (machine-id, SSH host keys, logs, credentials, caches)")
	return r.script(ctx, "sysprep.sh", sysprepScript, plan)
}

// remote runs commands and uploads through the communicator.
type remote struct {
	comm packersdk.Communicator
	ui   packersdk.Ui
	cfg  *Config
}

// run runs one command and fails on a non-zero exit.
func (r *remote) run(ctx context.Context, command string) error {
	_, err := r.output(ctx, command, false)
	return err
}

// output runs one command and returns its standard output; with quiet,
// the output is not echoed to the UI.
func (r *remote) output(ctx context.Context, command string, quiet bool) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := &packersdk.RemoteCmd{Command: command, Stdout: &stdout, Stderr: &stderr}
	var err error
	if quiet {
		if err = r.comm.Start(ctx, cmd); err == nil {
			cmd.Wait()
		}
	} else {
		err = cmd.RunWithUi(ctx, r.comm, r.ui)
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", command, err)
	}
	if code := cmd.ExitStatus(); code != 0 {
		return "", fmt.Errorf("%s: exit status %d: %s", command, code, strings.TrimSpace(lastLines(stderr.String(), 5)))
	}
	return stdout.String(), nil
}

// exec renders execute_command for a script path.
func (r *remote) exec(scriptPath string) string {
	t := template.Must(template.New("execute_command").Parse(r.cfg.ExecuteCommand))
	var b strings.Builder
	_ = t.Execute(&b, struct{ Path string }{scriptPath})
	return b.String()
}

// script renders one of the provisioner's scripts, uploads it and runs it
// through execute_command. Anything with shell syntax goes through a
// script: communicators quote commands differently (the chroot one hands
// them to a local shell first, which would expand "$").
func (r *remote) script(ctx context.Context, name string, t *template.Template, plan *plan) error {
	_, err := r.scriptOutput(ctx, name, t, plan, false)
	return err
}

func (r *remote) scriptOutput(ctx context.Context, name string, t *template.Template, plan *plan, quiet bool) (string, error) {
	var body bytes.Buffer
	if err := t.Execute(&body, plan); err != nil {
		return "", fmt.Errorf("harmony-node: render %s: %w", name, err)
	}
	dst := path.Join(r.cfg.StagingDir, name)
	if err := r.upload(&body, dst); err != nil {
		return "", fmt.Errorf("harmony-node: upload %s: %w", name, err)
	}
	out, err := r.output(ctx, r.exec(dst), quiet)
	if err != nil {
		return "", fmt.Errorf("harmony-node: %s: %w", name, err)
	}
	return out, nil
}

func (r *remote) uploadFile(local, dst string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	return r.comm.Upload(dst, f, &st)
}

func (r *remote) upload(body io.Reader, dst string) error { return r.comm.Upload(dst, body, nil) }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func humanBytes(n int64) string {
	const mib = 1 << 20
	return fmt.Sprintf("%.1f MiB", float64(n)/mib)
}

// sortedKeys is for deterministic scripts and manifests.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
