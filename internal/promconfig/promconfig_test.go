package promconfig

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Each alert fires on the series that should raise it and not on a
// healthy neighbour: promtool's own evaluation of the rules.
func TestAlertRules(t *testing.T) {
	for _, args := range [][]string{{"check", "rules", RulesFile}, {"test", "rules", "harmony.rules_test.yml"}} {
		if out, err := exec.Command("promtool", args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// What Write leaves is a configuration promtool accepts as it lies, its
// files named relative to it: the directory can move. The key is the
// owner's alone, and the discovery asks the controller given.
func TestWrittenConfigIsComplete(t *testing.T) {
	dir := t.TempDir()
	// promtool checks that the files exist; their content is not read.
	key, _, _, err := WriteCredential(dir, "prom", Credential{Key: []byte("key"), Certificate: []byte("cert"), CA: []byte("ca")})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(key); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key %s: %v, %v; want mode 0600", key, info.Mode(), err)
	}
	if _, err := WriteConfig(dir, "prom", &url.URL{Scheme: "https", Host: "198.18.0.1:9443"}); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(moved, ConfigFile)
	if out, err := exec.Command("promtool", "check", "config", conf).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	data, _ := os.ReadFile(conf)
	for _, want := range []string{"url: https://198.18.0.1:9443/api/v1/metrics/targets", `targets: ["198.18.0.1:9443"]`, "cert_file: prom.crt", "- harmony.rules.yml"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("prometheus.yml lacks %q:\n%s", want, data)
		}
	}
	for _, bad := range []*url.URL{{Scheme: "http", Host: "198.18.0.1:9443"}, {Scheme: "https"}} {
		if _, err := WriteConfig(t.TempDir(), "prom", bad); err == nil {
			t.Errorf("controller URL %q was taken", bad)
		}
	}
}
