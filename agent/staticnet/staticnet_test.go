package staticnet_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/staticnet"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// keys is an in-memory guestinfo. A missing key reads as "", as with
// vmware-rpctool and the backdoor.
type keys struct {
	m   map[string]string
	err error
}

func (k *keys) Get(_ context.Context, key string) (string, error) { return k.m[key], k.err }
func (k *keys) Set(_ context.Context, key, value string) error    { k.m[key] = value; return nil }

func validConfig() *v1.NetworkConfig {
	return &v1.NetworkConfig{
		APIVersion: v1.APIVersion, Kind: "NetworkConfig",
		Address: "198.18.10.21/24", Gateway: "198.18.10.1",
		DNS: []string{"198.18.10.53", "198.18.10.54"}, Hostname: "w-1",
	}
}

func encode(t *testing.T, cfg *v1.NetworkConfig) string {
	t.Helper()
	s, err := cfg.EncodeGuestinfo()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const wantNetwork = `# Written by harmony-agent network apply from guestinfo.harmony.network
# at every boot. It sorts before 80-harmony-dhcp.network and networkd
# applies only the first file that matches a link: this NIC runs no DHCP.
[Match]
Name=en* eth* host0
Type=ether

[Network]
Address=198.18.10.21/24
Gateway=198.18.10.1
DNS=198.18.10.53
DNS=198.18.10.54
LinkLocalAddressing=no
IPv6AcceptRA=no
`

type fixture struct {
	root      string
	keys      *keys
	hostnames []string
	log       bytes.Buffer
}

func newFixture(t *testing.T) *fixture {
	return &fixture{root: t.TempDir(), keys: &keys{m: map[string]string{}}}
}

func (f *fixture) apply() (staticnet.Outcome, error) {
	a := staticnet.Applier{
		Root: f.root, Reader: f.keys,
		SetHostname: func(name string) error { f.hostnames = append(f.hostnames, name); return nil },
		Log:         slog.New(slog.NewTextHandler(&f.log, nil)),
	}
	return a.Apply(context.Background())
}

func (f *fixture) read(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(f.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func (f *fixture) requireNoFiles(t *testing.T) {
	t.Helper()
	var found []string
	filepath.WalkDir(f.root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			found = append(found, path)
		}
		return nil
	})
	if len(found) > 0 {
		t.Fatalf("files written: %v", found)
	}
}

func TestApplyWritesConfig(t *testing.T) {
	f := newFixture(t)
	// The newline vmware-rpctool may leave is ignored.
	f.keys.m[v1.NetworkGuestinfoKey] = encode(t, validConfig()) + "\n"
	got, err := f.apply()
	if err != nil || got != staticnet.Written {
		t.Fatalf("Apply = %q, %v; want written", got, err)
	}
	if s := f.read(t, staticnet.NetworkFile); s != wantNetwork {
		t.Errorf("network file:\n%s\nwant:\n%s", s, wantNetwork)
	}
	if s := f.read(t, staticnet.HostnameFile); s != "w-1\n" {
		t.Errorf("hostname file %q", s)
	}
	if want := "# Written by harmony-agent network apply from guestinfo.harmony.network.\nnameserver 198.18.10.53\nnameserver 198.18.10.54\n"; f.read(t, staticnet.ResolvConf) != want {
		t.Errorf("resolv.conf %q, want %q", f.read(t, staticnet.ResolvConf), want)
	}
	if len(f.hostnames) != 1 || f.hostnames[0] != "w-1" {
		t.Errorf("hostnames set: %v", f.hostnames)
	}
	fi, err := os.Stat(filepath.Join(f.root, staticnet.NetworkFile))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("network file mode: %v %v", fi, err)
	}
}

func TestApplyIsIdempotent(t *testing.T) {
	f := newFixture(t)
	f.keys.m[v1.NetworkGuestinfoKey] = encode(t, validConfig())
	if got, err := f.apply(); err != nil || got != staticnet.Written {
		t.Fatalf("first Apply = %q, %v", got, err)
	}
	files := []string{staticnet.NetworkFile, staticnet.HostnameFile, staticnet.ResolvConf}
	// An old mtime, so that a rewrite could not hide within the clock's
	// resolution.
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, rel := range files {
		if err := os.Chtimes(filepath.Join(f.root, rel), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := f.apply(); err != nil || got != staticnet.Unchanged {
		t.Fatalf("second Apply = %q, %v; want unchanged", got, err)
	}
	for _, rel := range files {
		fi, err := os.Stat(filepath.Join(f.root, rel))
		if err != nil || !fi.ModTime().Equal(old) {
			t.Errorf("%s rewritten by a rerun (mtime %v, %v)", rel, fi.ModTime(), err)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(f.root, "etc/systemd/network"))
	if len(entries) != 1 {
		t.Errorf("network directory holds %d entries, want the one file (no temporaries left)", len(entries))
	}

	// A changed value rewrites the files.
	cfg := validConfig()
	cfg.Address, cfg.Gateway, cfg.DNS, cfg.Hostname = "198.18.20.7/16", "198.18.0.1", nil, "w-2"
	f.keys.m[v1.NetworkGuestinfoKey] = encode(t, cfg)
	if got, err := f.apply(); err != nil || got != staticnet.Written {
		t.Fatalf("Apply after a change = %q, %v; want written", got, err)
	}
	s := f.read(t, staticnet.NetworkFile)
	if !strings.Contains(s, "\nAddress=198.18.20.7/16\nGateway=198.18.0.1\nLinkLocalAddressing=no\n") || strings.Contains(s, "DNS=") {
		t.Errorf("rewritten network file:\n%s", s)
	}
	if f.read(t, staticnet.HostnameFile) != "w-2\n" {
		t.Errorf("hostname not rewritten")
	}
	// No DNS servers: resolv.conf keeps what it had.
	if !strings.Contains(f.read(t, staticnet.ResolvConf), "198.18.10.53") {
		t.Errorf("resolv.conf touched without DNS servers")
	}
}

func TestApplyAbsent(t *testing.T) {
	f := newFixture(t)
	f.keys.m[v1.NetworkGuestinfoKey] = " \n"
	if got, err := f.apply(); err != nil || got != staticnet.Absent {
		t.Fatalf("Apply = %q, %v; want absent", got, err)
	}
	delete(f.keys.m, v1.NetworkGuestinfoKey)
	if got, err := f.apply(); err != nil || got != staticnet.Absent {
		t.Fatalf("Apply = %q, %v; want absent", got, err)
	}
	f.requireNoFiles(t)
	if len(f.hostnames) != 0 {
		t.Errorf("hostname set without a config: %v", f.hostnames)
	}

	// No guestinfo access at all is the same.
	a := staticnet.Applier{Root: f.root, Log: slog.New(slog.DiscardHandler)}
	if got, err := a.Apply(context.Background()); err != nil || got != staticnet.Absent {
		t.Fatalf("Apply without a reader = %q, %v; want absent", got, err)
	}
	f.requireNoFiles(t)
}

func TestApplyRefusesInvalid(t *testing.T) {
	raw := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	with := func(change func(*v1.NetworkConfig)) func(*testing.T) string {
		return func(t *testing.T) string {
			cfg := validConfig()
			change(cfg)
			return encode(t, cfg)
		}
	}
	for name, tc := range map[string]struct {
		value func(*testing.T) string
		field string
	}{
		"invalid JSON":    {func(*testing.T) string { return raw(`{"apiVersion":`) }, ""},
		"not base64":      {func(*testing.T) string { return "{}" }, ""},
		"bad address":     {with(func(c *v1.NetworkConfig) { c.Address = "198.18.10.300/24" }), "address"},
		"no prefix":       {with(func(c *v1.NetworkConfig) { c.Address = "198.18.10.21" }), "address"},
		"bad gateway":     {with(func(c *v1.NetworkConfig) { c.Gateway = "198.18.11.1" }), "gateway"},
		"bad dns":         {with(func(c *v1.NetworkConfig) { c.DNS = []string{"198.18.10.53", "dns"} }), "dns[1]"},
		"dns with a zone": {with(func(c *v1.NetworkConfig) { c.DNS = []string{"fe80::1%x\n[Network]\nAddress=198.18.0.9/24"} }), "dns[0]"},
		"bad hostname":    {with(func(c *v1.NetworkConfig) { c.Hostname = "W_1" }), "hostname"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.keys.m[v1.NetworkGuestinfoKey] = tc.value(t)
			got, err := f.apply()
			if err == nil {
				t.Fatalf("Apply = %q, nil; want an error", got)
			}
			var fe *v1.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("error %q: want a *v1.FieldError for field %q", err, tc.field)
			}
			if !strings.Contains(err.Error(), v1.NetworkGuestinfoKey) {
				t.Errorf("error %q does not name the key", err)
			}
			f.requireNoFiles(t)
			if len(f.hostnames) != 0 {
				t.Errorf("hostname set from an invalid config: %v", f.hostnames)
			}
		})
	}
}

// An invalid value later leaves the file of an earlier valid one: the
// last address known good beats none on a network without DHCP.
func TestApplyInvalidKeepsEarlierFile(t *testing.T) {
	f := newFixture(t)
	f.keys.m[v1.NetworkGuestinfoKey] = encode(t, validConfig())
	if _, err := f.apply(); err != nil {
		t.Fatal(err)
	}
	f.keys.m[v1.NetworkGuestinfoKey] = "!!"
	if _, err := f.apply(); err == nil {
		t.Fatal("Apply accepted an invalid value")
	}
	if f.read(t, staticnet.NetworkFile) != wantNetwork {
		t.Error("the earlier file changed")
	}
}

func TestApplyReadError(t *testing.T) {
	f := newFixture(t)
	f.keys.err = errors.New("Failed sending message to VMware.")
	if _, err := f.apply(); err == nil || !strings.Contains(err.Error(), "Failed sending message") {
		t.Fatalf("Apply = %v; want the read error", err)
	}
	f.requireNoFiles(t)
}

func TestApplyHostnameAndResolvConfFailuresAreNotFatal(t *testing.T) {
	f := newFixture(t)
	f.keys.m[v1.NetworkGuestinfoKey] = encode(t, validConfig())
	// resolv.conf managed elsewhere (a symlink) is left alone.
	etc := filepath.Join(f.root, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../run/systemd/resolve/stub-resolv.conf", filepath.Join(etc, "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	a := staticnet.Applier{
		Root: f.root, Reader: f.keys,
		SetHostname: func(string) error { return errors.New("operation not permitted") },
		Log:         slog.New(slog.NewTextHandler(&f.log, nil)),
	}
	if got, err := a.Apply(context.Background()); err != nil || got != staticnet.Written {
		t.Fatalf("Apply = %q, %v; want written despite the hostname failure", got, err)
	}
	if target, err := os.Readlink(filepath.Join(etc, "resolv.conf")); err != nil || !strings.Contains(target, "stub-resolv.conf") {
		t.Errorf("resolv.conf symlink replaced: %q %v", target, err)
	}
	if !strings.Contains(f.log.String(), "could not set the hostname") {
		t.Errorf("hostname failure not logged:\n%s", f.log.String())
	}
}

func TestRenderRefusesUnparsed(t *testing.T) {
	// Render is given validated configs, but never copies text it has
	// not parsed.
	cfg := validConfig()
	cfg.Gateway = "198.18.10.1\nDNS=1.1.1.1"
	if _, err := staticnet.Render(cfg); err == nil {
		t.Fatal("Render accepted a gateway with a newline")
	}
}
