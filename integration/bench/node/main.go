// Command node benchmarks the node stack in the network-namespace lab: it
// builds a lab (3 masters, 1 worker), and measures
//
//   - convergence: from starting the agents (enrollment included) to each
//     node first reported Ready, with kube-apiserver's start included;
//   - the agent's RSS and CPU when converged and idle, next to Debian's
//     prometheus-node-exporter run idle in the same host namespace and
//     scraped as often as Prometheus scrapes the agent, in the same run;
//   - the VIP failover gap: the VIP holder is stopped as a whole host, and
//     the gap is the time until /readyz answers again through the VIP.
//
// Each target is printed next to its figure; nothing is asserted. A phase
// that fails ends the run with a non-zero exit status.
//
//	make bench
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/integration/bench/procstat"
	"github.com/harmonykaas/harmony/integration/lab"
)

// Targets from the node-stack issue.
const (
	targetRSSRatio   = 1.5
	targetConverge   = 20 * time.Second
	targetFailover   = 5 * time.Second
	nodeExporterPort = 9100
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench node:", err)
		os.Exit(1)
	}
}

func run() error {
	var binDir, k8sBin, subnet string
	var idle time.Duration
	flag.StringVar(&binDir, "bin", os.Getenv("HARMONY_BIN"), "directory of harmony-agent and harmony-controller")
	flag.StringVar(&k8sBin, "kubernetes-bin", os.Getenv("HARMONY_K8S_BIN"), "directory of kubeadm and kube-apiserver")
	flag.StringVar(&subnet, "subnet", "198.18.120.0/24", "the bench lab's /24 inside 198.18.0.0/15")
	flag.DurationVar(&idle, "idle", 30*time.Second, "how long the converged lab idles before RSS and CPU are read")
	flag.Parse()
	prefix, err := netip.ParsePrefix(subnet)
	if err != nil {
		return fmt.Errorf("-subnet: %w", err)
	}
	stateDir, err := os.MkdirTemp("", "harmony-bench-node-")
	if err != nil {
		return err
	}
	ctx := context.Background()
	defer lab.Down(ctx, stateDir, nil)

	fmt.Printf("node-stack benchmark: %s, %d CPUs, %s\n", runtime.GOOS, runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))
	sum, err := lab.Up(ctx, lab.Config{StateDir: stateDir, Masters: 3, Workers: 1, Subnet: prefix,
		BinDir: binDir, KubernetesBinDir: k8sBin, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		return err
	}

	fmt.Println("\nconvergence, agent start to node Ready (enrollment and kube-apiserver start included)")
	for _, h := range sum.Hosts {
		d := sum.Ready[h.Name].Sub(sum.AgentsStarted)
		met := ""
		if h.Role == "master" {
			met = fmt.Sprintf("   target < %s: %s", targetConverge, verdict(d < targetConverge))
		}
		fmt.Printf("  %-3s %-6s %6.1f s%s\n", h.Name, h.Role, d.Seconds(), met)
	}

	m1 := sum.Hosts[0]
	exporter, err := startNodeExporter(m1)
	if err != nil {
		return err
	}
	defer exporter.Process.Kill()
	fmt.Printf("\nidle for %s (Prometheus scrapes the agents every 5s; node_exporter is scraped as often)\n", idle)
	agentPIDs := map[string]int{}
	for _, h := range sum.Hosts {
		pid, err := agentPID(h)
		if err != nil {
			return err
		}
		agentPIDs[h.Name] = pid
	}
	cpuBefore := map[int]time.Duration{}
	for _, pid := range append(slices.Collect(maps.Values(agentPIDs)), exporter.Process.Pid) {
		cpuBefore[pid], _ = procstat.CPUTime(pid)
	}
	start := time.Now()
	scrapeURL := "http://" + netip.AddrPortFrom(netip.MustParseAddr(m1.IP), nodeExporterPort).String() + "/metrics"
	for time.Since(start) < idle {
		scrape(scrapeURL)
		time.Sleep(5 * time.Second)
	}
	window := time.Since(start)
	fmt.Println("  process                 VmRSS      CPU (share of one core)")
	exporterMem, err := procstat.ReadMemory(exporter.Process.Pid)
	if err != nil {
		return err
	}
	for _, h := range sum.Hosts {
		pid := agentPIDs[h.Name]
		mem, err := procstat.ReadMemory(pid)
		if err != nil {
			return err
		}
		cpu, _ := procstat.CPUTime(pid)
		ratio := float64(mem.RSS) / float64(exporterMem.RSS)
		fmt.Printf("  harmony-agent %-3s %-6s %6.1f MiB %6.2f %%   %.2f× node_exporter, target ≤ %.1f×: %s\n", h.Name, h.Role,
			mib(mem.RSS), 100*float64(cpu-cpuBefore[pid])/float64(window), ratio, targetRSSRatio, verdict(ratio <= targetRSSRatio))
	}
	cpu, _ := procstat.CPUTime(exporter.Process.Pid)
	fmt.Printf("  node_exporter (reference) %6.1f MiB %6.2f %%\n", mib(exporterMem.RSS),
		100*float64(cpu-cpuBefore[exporter.Process.Pid])/float64(window))

	gap, from, to, err := failover(ctx, stateDir, sum)
	if err != nil {
		return err
	}
	fmt.Printf("\nVIP failover (holder %s stopped as a whole host, VIP to %s): /readyz through the VIP back after %.2f s, target < %s: %s\n",
		from, to, gap.Seconds(), targetFailover, verdict(gap < targetFailover))
	return nil
}

func startNodeExporter(h lab.HostSummary) (*exec.Cmd, error) {
	listen := netip.AddrPortFrom(netip.MustParseAddr(h.IP), nodeExporterPort).String()
	cmd := exec.Command("ip", "netns", "exec", h.Netns, "/usr/bin/prometheus-node-exporter", "--web.listen-address="+listen)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start node_exporter: %w", err)
	}
	go cmd.Wait()
	return cmd, nil
}

func scrape(url string) {
	c := &http.Client{Timeout: 4 * time.Second}
	if resp, err := c.Get(url); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// agentPID finds the harmony-agent process of a host.
func agentPID(h lab.HostSummary) (int, error) {
	out, err := exec.Command("ip", "netns", "pids", h.Netns).Output()
	if err != nil {
		return 0, err
	}
	for _, f := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(f)
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && filepath.Base(strings.Split(string(cmdline), "\x00")[0]) == "harmony-agent" {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no harmony-agent in %s", h.Netns)
}

// failover stops the VIP holder and times /readyz through the VIP.
func failover(ctx context.Context, stateDir string, sum *lab.Summary) (time.Duration, string, string, error) {
	holder := vipHolder(sum)
	if holder == "" {
		return 0, "", "", fmt.Errorf("no master holds the VIP")
	}
	ca, err := os.ReadFile(filepath.Join(filepath.Dir(sum.Kubeconfig), "kubernetes", "ca.crt"))
	if err != nil {
		return 0, "", "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	// Short attempts: one hanging on the dead holder must not hide the
	// moment the VIP answers again.
	c := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	ready := func() bool {
		resp, err := c.Get(sum.APIServer + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	stopped := time.Now()
	if err := lab.StopHost(ctx, stateDir, holder); err != nil {
		return 0, "", "", err
	}
	for !ready() {
		if time.Since(stopped) > time.Minute {
			return 0, "", "", fmt.Errorf("/readyz through the VIP did not recover within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(stopped), holder, vipHolder(sum), nil
}

func vipHolder(sum *lab.Summary) string {
	for _, h := range sum.Hosts {
		out, err := exec.Command("ip", "-n", h.Netns, "-o", "-4", "addr", "show", "dev", "eth0", "up").Output()
		if err == nil && strings.Contains(string(out), " "+sum.VIP+"/") {
			return h.Name
		}
	}
	return ""
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT MET"
}
