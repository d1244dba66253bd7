package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// The kubeconfig names harmonyctl and its config as plainly as works: the
// bare name when PATH finds this very binary, and no --config for the
// default one, so the file also works on another machine; otherwise the
// absolute paths.
func TestKubeconfigPluginIsPortableWhenItCanBe(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	onPath := t.TempDir()
	if err := os.Symlink(self, filepath.Join(onPath, v1.CredentialCommand)); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, v1.CredentialCommand), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{onPath: v1.CredentialCommand, other: self, t.TempDir(): self} {
		t.Setenv("PATH", path)
		if got, err := pluginCommand(); err != nil || got != want {
			t.Errorf("PATH=%s: command %q, %v; want %q", path, got, err, want)
		}
	}

	home := t.TempDir()
	t.Setenv("HOME", home)
	if args, err := configArgs(filepath.Join(home, ".harmony", "config")); err != nil || len(args) != 0 {
		t.Errorf("the default config: args %q, %v; want none", args, err)
	}
	t.Chdir(home)
	if args, err := configArgs("lab/config"); err != nil || !slices.Equal(args, []string{"--config", filepath.Join(home, "lab", "config")}) {
		t.Errorf("another config: args %q, %v; want --config with its absolute path", args, err)
	}
}
