package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrepareRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := func() map[string]any {
		return map[string]any{
			"role": "node", "image_version": "v1", "components_file": file, "bundle_dir": dir,
			"agent_binary": file, "units_dir": dir, "source_date_epoch": "1700000000",
		}
	}
	var p Provisioner
	if err := p.Prepare(good()); err != nil {
		t.Fatal(err)
	}
	if p.config.ExecuteCommand != "/bin/sh -eu {{.Path}}" || p.config.StagingDir != "/tmp/harmony-node" {
		t.Errorf("defaults: %q %q", p.config.ExecuteCommand, p.config.StagingDir)
	}
	for name, tc := range map[string]struct {
		key   string
		value any
		want  string
	}{
		"bad role":             {"role", "worker", `role "worker"`},
		"missing agent":        {"agent_binary", filepath.Join(dir, "nope"), "agent_binary"},
		"bundle not a dir":     {"bundle_dir", file, "bundle_dir"},
		"controller on a node": {"controller_binary", file, "only control-plane images carry the controller"},
		"staging is root":      {"staging_dir", "/", "staging_dir"},
		"staging with quotes":  {"staging_dir", "/tmp/a'b", "staging_dir"},
		"no path in command":   {"execute_command", "sudo sh", "must contain {{.Path}}"},
		"no epoch":             {"source_date_epoch", "", "source_date_epoch: required"},
		"version with spaces":  {"image_version", "v 1", "image_version"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("SOURCE_DATE_EPOCH", "")
			cfg := good()
			cfg[tc.key] = tc.value
			var p Provisioner
			err := p.Prepare(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("control-plane needs the controller", func(t *testing.T) {
		cfg := good()
		cfg["role"] = "control-plane"
		var p Provisioner
		if err := p.Prepare(cfg); err == nil || !strings.Contains(err.Error(), "controller_binary") {
			t.Fatalf("err %v", err)
		}
	})
}

func TestOverlayRefusesOddFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a b"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var p plan
	if err := p.addOverlay(dir); err == nil || !strings.Contains(err.Error(), "shell quoting") {
		t.Fatalf("err %v", err)
	}
	dir = t.TempDir()
	os.MkdirAll(filepath.Join(dir, "etc"), 0o755)
	os.WriteFile(filepath.Join(dir, "etc", "tool"), nil, 0o755)
	os.WriteFile(filepath.Join(dir, "etc", "conf"), nil, 0o600)
	p = plan{}
	if err := p.addOverlay(dir); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range p.Files {
		got[f.Dest] = f.Mode
	}
	if got["/etc/tool"] != "0755" || got["/etc/conf"] != "0644" {
		t.Errorf("overlay modes %v", got)
	}
}
