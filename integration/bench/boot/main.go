// Command boot measures how long the node image takes to boot under QEMU
// (TCG and OVMF: KVM does not work on these machines) until harmony-agent
// is active, that is enrolled with a controller on this host and through
// its first node-stack pass. The reference points of the same run are the
// kernel's first line and systemd's start, so the agent's own share shows.
//
//	make bench   (after make images)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/integration/imageboot"
)

func main() {
	images := flag.String("images", "out/images", "directory holding harmony-node-*.ova")
	runs := flag.Int("runs", 2, "boots to measure (at most 3)")
	timeout := flag.Duration("timeout", 10*time.Minute, "limit for one boot")
	keep := flag.Bool("keep", false, "keep the temporary directory: serial logs, booted disks, controller data")
	flag.Parse()
	if err := run(*images, min(max(*runs, 1), 3), *timeout, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "bench boot:", err)
		os.Exit(1)
	}
}

var marks = []struct {
	name string
	re   *regexp.Regexp
}{
	{"login prompt", regexp.MustCompile(`login: `)},
	// The reporter's line, seconds after the agent's READY: the
	// reporter's own start (a shell and systemctl under TCG). "agent
	// active" below is systemd's timestamp of the READY itself.
	{"agent reported", regexp.MustCompile(`harmony-boot-report: harmony-agent is active`)},
}

// agentUnitReport is the reporter's line for the agent's unit, its last.
var agentUnitReport = regexp.MustCompile(`harmony-boot-report: unit ` + regexp.QuoteMeta(imageboot.AgentUnit) + ` `)

func run(images string, runs int, timeout time.Duration, keep bool) error {
	found, _ := filepath.Glob(filepath.Join(images, "harmony-node-*.ova"))
	if len(found) == 0 {
		return fmt.Errorf("no harmony-node-*.ova in %s: run make images", images)
	}
	sort.Strings(found)
	ova := found[len(found)-1]
	dir, err := os.MkdirTemp("", "harmony-bench-boot-")
	if err != nil {
		return err
	}
	if keep {
		defer fmt.Printf("kept %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	ctx := context.Background()
	pristine := filepath.Join(dir, "pristine.raw")
	if err := imageboot.RawFromOVA(ctx, ova, 0, pristine); err != nil {
		return err
	}
	root, err := imageboot.RootOffset(pristine)
	if err != nil {
		return err
	}
	fmt.Printf("image boot benchmark: %s, %d CPUs, QEMU TCG with 2 vCPUs and 2 GiB, %s\n",
		filepath.Base(ova), runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))

	opts := imageboot.Options{Net: netip.MustParsePrefix("198.18.121.0/24")}
	ctl, admin, err := startController(ctx, dir, opts)
	if err != nil {
		return err
	}
	defer ctl()

	results := map[string][]float64{}
	var chains [][]imageboot.UnitTime
	for i := range runs {
		disk := filepath.Join(dir, fmt.Sprintf("boot%d.raw", i))
		if err := imageboot.CopySparse(pristine, disk); err != nil {
			return err
		}
		spec := v1.NodeSpec{Name: fmt.Sprintf("bench-boot-%d", i), Cluster: "bench", Role: v1.RoleWorker, IPs: []string{opts.GuestAddr().String()}}
		res, err := admin.AddNode(ctx, spec)
		if err != nil {
			return fmt.Errorf("add node: %w", err)
		}
		doc, _ := json.Marshal(res.Bootstrap)
		if err := imageboot.InjectFile(ctx, disk, root, "/etc/harmony/bootstrap.json", doc, 0o600); err != nil {
			return err
		}
		if err := imageboot.InjectAgentReporter(ctx, disk, root); err != nil {
			return err
		}
		o := opts
		o.Disk, o.SerialLog = disk, filepath.Join(dir, fmt.Sprintf("serial%d.log", i))
		bootCtx, cancel := context.WithTimeout(ctx, timeout)
		// A stalled guest is booted once more (imageboot.Boot), said on
		// stderr; the run's figures are its second boot's.
		vm, early, err := imageboot.Boot(bootCtx, o, func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "run %d: "+format+"\n", append([]any{i + 1}, args...)...)
		})
		if err != nil {
			cancel()
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		results["kernel"] = append(results["kernel"], early.Kernel.Seconds())
		results["systemd"] = append(results["systemd"], early.Systemd.Seconds())
		for _, m := range marks {
			at, err := vm.WaitSerial(bootCtx, m.re)
			if err != nil {
				vm.Stop()
				cancel()
				return fmt.Errorf("run %d: %s: %w", i+1, m.name, err)
			}
			results[m.name] = append(results[m.name], at.Sub(vm.Started()).Seconds())
		}
		// The unit lines follow the agent's; give them a moment. They
		// explain the figure and are not part of it: a boot whose lines
		// were lost (a console hang-up) still counts.
		unitsCtx, unitsDone := context.WithTimeout(bootCtx, 2*time.Minute)
		if _, err := vm.WaitSerial(unitsCtx, agentUnitReport); err != nil {
			fmt.Fprintf(os.Stderr, "run %d: the units' times are incomplete: %v\n", i+1, err)
		}
		unitsDone()
		chains = append(chains, imageboot.UnitTimes(vm.Serial()))
		if keep {
			// The kept disk holds the journal only once the VM has
			// written it out; without -keep nothing waits for that.
			if _, err := vm.WaitSerial(bootCtx, imageboot.JournalReport); err != nil {
				fmt.Fprintf(os.Stderr, "run %d: the journal may be incomplete on the kept disk: %v\n", i+1, err)
			}
		}
		vm.Stop()
		cancel()
		if !keep {
			os.Remove(disk)
		}
	}
	// When systemd saw the agent's READY, in seconds since the kernel
	// started, plus when the kernel started: the figure the target is
	// for, without the reporter's delay.
	var active []float64
	for i, chain := range chains {
		for _, u := range chain {
			if u.Unit == imageboot.AgentUnit && u.Active > 0 {
				active = append(active, results["kernel"][i]+u.Active)
			}
		}
	}
	fmt.Printf("%-15s %s\n", "milestone", "seconds after QEMU started, per run")
	for _, name := range []string{"kernel", "systemd"} {
		fmt.Printf("%-15s %v\n", name, rounded(results[name]))
	}
	for _, m := range marks {
		fmt.Printf("%-15s %v\n", m.name, rounded(results[m.name]))
	}
	fmt.Printf("%-15s %v   target < 20 s (TCG)\n", "agent active", rounded(active))
	// Where the time goes, in place of systemd-analyze critical-chain
	// (which answers only once the boot has finished, after the
	// first-boot image import).
	for i, chain := range chains {
		fmt.Printf("run %d: units on the agent's way, seconds since the kernel started (add %.1f for seconds since QEMU started)\n", i+1, results["kernel"][i])
		fmt.Printf("  %-38s %8s %8s %8s\n", "unit", "started", "active", "took")
		for _, u := range chain {
			if u.Active == 0 {
				fmt.Printf("  %-38s %8s\n", u.Unit, "not active")
				continue
			}
			fmt.Printf("  %-38s %8.1f %8.1f %8.1f\n", u.Unit, u.Started, u.Active, u.Active-u.Started)
		}
	}
	return nil
}

func rounded(v []float64) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf("%.1f", x)
	}
	return out
}

// startController runs a controller on 127.0.0.1 that the guest reaches
// at the user network's host address.
func startController(ctx context.Context, dir string, opts imageboot.Options) (func(), *client.Client, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := controller.Config{
		DataDir:       filepath.Join(dir, "controller"),
		Listen:        fmt.Sprintf("127.0.0.1:%d", port),
		AdvertiseURLs: []string{fmt.Sprintf("https://%s:%d", opts.HostAddr(), port)},
		ExtraSANs:     []string{opts.HostAddr().String()},
		Logger:        slog.New(slog.DiscardHandler),
	}
	c, err := controller.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Serve(ctx) }()
	stop := func() { cancel(); <-done; c.Close() }
	adminCfg, err := clientconfig.Load(filepath.Join(cfg.DataDir, controller.AdminConfigFile))
	if err != nil {
		stop()
		return nil, nil, err
	}
	admin, err := client.New(adminCfg, "")
	if err != nil {
		stop()
		return nil, nil, err
	}
	return stop, admin, nil
}
