// Command vcsim runs govmomi's vCenter simulator (v0.56.0) as a standalone
// process for trying Harmony without a vCenter: one datacenter DC0, the
// cluster DC0_C0 with three large hosts, datastore LocalDS_0 and port group
// "VM Network". It writes, into --dir, a provider document for it, the
// password as an environment file, a small node OVA to import, and last
// endpoint.json, how a program reaches it (the tests that must not share
// a process with it: vcsim has data races of its own).
//
// It is a stand-in: vcsim keeps no disk contents and runs no guests.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"sigs.k8s.io/yaml"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

func main() {
	listen := flag.String("l", "127.0.0.1:8989", "listen address")
	dir := flag.String("dir", filepath.Join(os.TempDir(), "harmony-vcsim"), "where to write provider.yaml, vcsim.env and node.ova")
	hosts := flag.Int("hosts", 3, "hosts in the cluster DC0_C0")
	delays := flag.String("method-delay", "", "what some vCenter methods take, in milliseconds, as a real vCenter's do: Method=MS,...")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	delay, err := vcsim.ParseMethodDelay(*delays)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vcsim: --method-delay:", err)
		os.Exit(2)
	}
	if err := run(vcsim.Options{Listen: *listen, Hosts: *hosts, MethodDelay: delay}, *dir, log); err != nil {
		fmt.Fprintln(os.Stderr, "vcsim:", err)
		os.Exit(1)
	}
}

func run(opts vcsim.Options, dir string, log *slog.Logger) error {
	sim, err := vcsim.Start(opts)
	if err != nil {
		return err
	}
	defer sim.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	p := sim.Provider("vcsim", &v1.IPPool{Network: "198.18.10.0/24", Ranges: []string{"198.18.10.10-198.18.10.250"},
		Gateway: "198.18.10.1", DNS: []string{"198.18.10.2"}})
	p.VCenter.Password = "" // in vcsim.env, not in the file
	data, err := yaml.Marshal(p)
	if err != nil {
		return err
	}
	providerFile := filepath.Join(dir, "provider.yaml")
	if err := os.WriteFile(providerFile, data, 0o600); err != nil {
		return err
	}
	envFile := filepath.Join(dir, "vcsim.env")
	if err := os.WriteFile(envFile, []byte("HARMONY_VCENTER_PASSWORD="+sim.Password+"\n"), 0o600); err != nil {
		return err
	}
	ovaFile := filepath.Join(dir, "harmony-node-demo.ova")
	if err := vcsim.NodeOVA(context.Background(), ovaFile, "demo"); err != nil {
		return err
	}
	// Last, as the sign that it serves: how a program reaches it.
	endpointFile := filepath.Join(dir, "endpoint.json")
	if err := sim.Endpoint.WriteFile(endpointFile); err != nil {
		return err
	}
	log.Info("vcsim serving", "url", sim.URL, "username", sim.Username, "thumbprint", sim.Thumbprint)
	fmt.Printf(`vcsim is serving %s

  provider document:  %s
  password:           %s (export it: set -a; . %s; set +a)
  a small node OVA:   %s (image name harmony-node-demo)
  endpoint (JSON):    %s

Stop with Ctrl-C.
`, sim.URL, providerFile, envFile, envFile, ovaFile, endpointFile)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}
