package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/identity"
)

// Targets.
const (
	targetEnrollN      = 1000
	targetEnrollWithin = 10 * time.Second
	targetRatio        = 0.5
	targetWatches      = 10000
	targetMemory       = 1 << 30
	targetFanoutP99    = time.Second
)

// results are the figures the summary prints; zero where a phase did not run.
type results struct {
	noFile        uint64
	create        time.Duration
	enroll        enrollResult
	reference     enrollResult
	rest          enrollResult
	tlsController string
	tlsReference  string
	watchesOpen   time.Duration
	memBefore     procMemory
	memWatching   procMemory
	goroutines    float64
	heapInuse     float64
	fdsController int
	fanout        fanoutResult
}

func run(ctx context.Context, cfg *config, w io.Writer) (err error) {
	o := out{w}
	var r results
	o.f("Harmony enrollment benchmark\n")
	o.f("command: %s\n", cfg.command())
	o.f("settings: nodes=%d enroll=%d concurrency=%d create-concurrency=%d watches=%d fanout=%d\n",
		cfg.nodes, cfg.enroll, cfg.concurrency, cfg.createConcurrency, cfg.watches, cfg.fanout)

	var note string
	if r.noFile, note, err = raiseNoFile(); err != nil {
		return err
	}
	o.f("RLIMIT_NOFILE: %d (soft = hard), inherited by the child processes\n", r.noFile)
	if note != "" {
		o.f("    (%s)\n", note)
	}
	if need := uint64(cfg.watches + 1000); r.noFile < need {
		o.f("warning: %d watches need about %d descriptors in each process\n", cfg.watches, need)
	}

	tmp, err := os.MkdirTemp("", "harmony-bench-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer func() {
		if cfg.keep || err != nil {
			o.f("kept %s (controller data and logs)\n", tmp)
			return
		}
		os.RemoveAll(tmp)
	}()
	m := describeMachine(tmp)

	p, err := startController(ctx, cfg.binDir, tmp)
	if err != nil {
		return err
	}
	defer func() {
		if serr := p.stop(20 * time.Second); serr != nil {
			o.f("stop controller: %v\n", serr)
		}
	}()
	o.f("controller: %s (pid %d, %s) on %s, data directory on %s\n", p.bin, p.pid(), p.goVer, p.url, m.dataFS)

	nodes := make([]*node, cfg.nodes)
	for i := range nodes {
		nodes[i] = &node{name: nodeName(i)}
	}

	// 1. Node records.
	o.f("\n[1] create %d node records: POST %s, %d concurrent\n", cfg.nodes, "/api/v1/nodes", cfg.createConcurrency)
	pctx, cancel := phase(ctx, cfg.phaseTimeout)
	cpu := newCPUMeter(p.pid())
	r.create, err = createNodes(pctx, o, p, nodes, cfg.createConcurrency)
	cancel()
	if err != nil {
		return fmt.Errorf("create nodes: %w", err)
	}
	o.f("    %d nodes in %s (%.0f nodes/s)\n", cfg.nodes, secs(r.create), rate(cfg.nodes, r.create))
	o.f("    %s\n", cpu.report(cfg.nodes, "node"))

	pctx, cancel = phase(ctx, cfg.phaseTimeout)
	err = prepareKeys(pctx, o, nodes, cfg.concurrency)
	cancel()
	if err != nil {
		return fmt.Errorf("node keys: %w", err)
	}
	pool, err := identity.PoolFromPEM([]byte(nodes[0].bootstrap.CABundle))
	if err != nil {
		return fmt.Errorf("CA bundle of the bootstrap document: %w", err)
	}
	ctlAddr, err := hostPort(nodes[0].bootstrap.Controllers[0])
	if err != nil {
		return err
	}
	if r.tlsController, err = probeTLS(ctx, ctlAddr, pool); err != nil {
		return err
	}

	// 2. Timed enrollment.
	first, rest := nodes[:cfg.enroll], nodes[cfg.enroll:]
	o.f("\n[2] enroll %d nodes: POST /api/v1/enroll, %d concurrent, a new client and TLS connection each\n", cfg.enroll, cfg.concurrency)
	o.f("    (keys and CSRs were made beforehand, as each node makes its own)\n")
	o.f("    TLS: %s\n", r.tlsController)
	pctx, cancel = phase(ctx, cfg.phaseTimeout)
	cpu = newCPUMeter(p.pid())
	r.enroll, err = enrollNodes(pctx, o, first, pool, cfg.concurrency)
	cancel()
	if err != nil {
		return fmt.Errorf("enrollment: %w", err)
	}
	printEnroll(o, r.enroll)
	o.f("    %s\n", cpu.report(r.enroll.n, "enrollment"))
	o.f("    time for %d at this rate: %s   target < %s: %s\n", targetEnrollN,
		secs(projected(r.enroll)), secs(targetEnrollWithin), verdict(projected(r.enroll) < targetEnrollWithin))

	// 3. Reference: raw handshakes.
	o.f("\n[3] reference: %d raw TLS handshakes (dial, handshake, close), %d concurrent, against a TLS-only server process\n", cfg.enroll, cfg.concurrency)
	ref, err := startReference(ctx, tmp)
	if err != nil {
		return err
	}
	if r.tlsReference, err = probeTLS(ctx, ref.addr, ref.pool); err != nil {
		_ = ref.stop(10 * time.Second)
		return err
	}
	o.f("    TLS: %s\n", r.tlsReference)
	pctx, cancel = phase(ctx, cfg.phaseTimeout)
	cpu = newCPUMeter(ref.pid())
	r.reference, err = ref.handshakes(pctx, o, cfg.enroll, cfg.concurrency)
	cpuReport := cpu.report(cfg.enroll, "handshake")
	cancel()
	if serr := ref.stop(10 * time.Second); err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("reference handshakes: %w", err)
	}
	o.f("    %d handshakes in %s: %.0f handshakes/s\n", r.reference.n, secs(r.reference.total), r.reference.rate())
	o.f("    latency %s\n", r.reference.latency)
	o.f("    %s\n", cpuReport)
	o.f("    enrollments/s ÷ handshakes/s = %.0f ÷ %.0f = %.2f   target ≥ %.1f: %s\n",
		r.enroll.rate(), r.reference.rate(), ratio(r), targetRatio, verdict(ratio(r) >= targetRatio))

	// 4. The rest of the fleet.
	if len(rest) > 0 {
		o.f("\n[4] enroll the other %d nodes, %d concurrent\n", len(rest), cfg.concurrency)
		pctx, cancel = phase(ctx, cfg.phaseTimeout)
		cpu = newCPUMeter(p.pid())
		r.rest, err = enrollNodes(pctx, o, rest, pool, cfg.concurrency)
		cancel()
		if err != nil {
			return fmt.Errorf("enrollment of the rest: %w", err)
		}
		printEnroll(o, r.rest)
		o.f("    %s\n", cpu.report(r.rest.n, "enrollment"))
	}
	if err := buildIdentities(nodes); err != nil {
		return err
	}

	// 5. Watches and memory.
	if cfg.watches > 0 {
		if r.memBefore, err = readProcMemory(p.pid()); err != nil {
			return err
		}
		o.f("\n[5] open %d role watches: GET /api/v1/node/role?after=<revision>&wait=%s, one connection and client certificate per node, %d opening at once\n",
			cfg.watches, watchWait, cfg.concurrency)
		o.f("    controller before: VmRSS %s, VmHWM %s\n", mib(r.memBefore.rss), mib(r.memBefore.hwm))
		watchers := nodes[:cfg.watches]
		wctx, cancel := phase(ctx, cfg.watchTimeout)
		start := time.Now()
		cpu = newCPUMeter(p.pid())
		// The long polls live until the end of the run; only opening them
		// is bounded by the watch timeout.
		ws, err := openWatches(ctx, wctx, watchers, pool, cfg.concurrency)
		if err == nil {
			o.f("    %d requests sent in %s; waiting for %s = %d\n", cfg.watches, secs(time.Since(start)), activeWatches, cfg.watches)
			err = waitActive(wctx, o, p, ws, watchers, cfg.watches)
		}
		r.watchesOpen = time.Since(start)
		watchCPU := cpu.report(cfg.watches, "watch")
		cancel()
		if err != nil {
			if ws != nil {
				ws.close()
			}
			return fmt.Errorf("watches: %w", err)
		}
		defer ws.close()
		if r.memWatching, err = readProcMemory(p.pid()); err != nil {
			return err
		}
		r.fdsController = countFDs(p.pid())
		mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
		r.goroutines, _ = p.metric(mctx, "go_goroutines")
		r.heapInuse, _ = p.metric(mctx, "go_memstats_heap_inuse_bytes")
		mcancel()
		o.f("    all %d open after %s\n", cfg.watches, secs(r.watchesOpen))
		o.f("    %s\n", watchCPU)
		printWatches(o, cfg, r)

		// 6. Fan-out.
		if cfg.fanout > 0 {
			o.f("\n[6] fan-out: one PUT /api/v1/roles changing %d roles (cluster.vip = %s); latency from just before the request to each watcher's 200\n",
				cfg.fanout, fanoutVIP)
			fctx, cancel := phase(ctx, time.Minute)
			r.fanout, err = fanout(fctx, p, ws, watchers, cfg.fanout)
			cancel()
			if err != nil {
				return fmt.Errorf("fan-out: %w", err)
			}
			o.f("    PUT answered in %s (revision %d)\n", ms(r.fanout.put), r.fanout.revision)
			o.f("    latency %s\n", r.fanout.latency)
			o.f("    p99 %s   target < %s: %s\n", ms(r.fanout.latency.p99), ms(targetFanoutP99), verdict(r.fanout.latency.p99 < targetFanoutP99))
		}
	}

	printSummary(o, cfg, m, p, r)
	return nil
}

func printEnroll(o out, e enrollResult) {
	o.f("    %d enrollments in %s: %.0f enrollments/s\n", e.n, secs(e.total), e.rate())
	o.f("    latency   %s\n", e.latency)
	o.f("    handshake %s (the TLS part of each)\n", e.handshake)
}

func printWatches(o out, cfg *config, r results) {
	o.f("    controller with %d watches open: VmRSS %s, VmHWM (peak since start) %s, %d threads, %d descriptors, %.0f goroutines, Go heap in use %s\n",
		cfg.watches, mib(r.memWatching.rss), mib(r.memWatching.hwm), r.memWatching.threads, r.fdsController, r.goroutines, mib(uint64(r.heapInuse)))
	if cfg.watches > 0 && r.memWatching.rss > r.memBefore.rss {
		o.f("    ≈ %.0f KiB of RSS per watch (growth since before the watches)\n",
			float64(r.memWatching.rss-r.memBefore.rss)/1024/float64(cfg.watches))
	}
	note := ""
	if cfg.watches != targetWatches {
		note = fmt.Sprintf(" (the target is for %d watches; this run holds %d)", targetWatches, cfg.watches)
	}
	o.f("    VmRSS %s   target < %s: %s%s\n", mib(r.memWatching.rss), mib(targetMemory), verdict(r.memWatching.rss < targetMemory), note)
	o.f("    VmHWM %s   target < %s: %s%s\n", mib(r.memWatching.hwm), mib(targetMemory), verdict(r.memWatching.hwm < targetMemory), note)
}

func printSummary(o out, cfg *config, m machine, p *controllerProc, r results) {
	o.f("\n==== summary ====\n")
	o.f("node records      %6d in %s (%.0f/s)\n", cfg.nodes, secs(r.create), rate(cfg.nodes, r.create))
	o.f("enrollment        %6d in %s: %.0f/s, p50 %s, p99 %s   1,000 in < 10 s: %s (%s)\n",
		r.enroll.n, secs(r.enroll.total), r.enroll.rate(), ms(r.enroll.latency.p50), ms(r.enroll.latency.p99),
		verdict(projected(r.enroll) < targetEnrollWithin), secs(projected(r.enroll)))
	o.f("TLS handshakes    %6d in %s: %.0f/s, p50 %s, p99 %s\n",
		r.reference.n, secs(r.reference.total), r.reference.rate(), ms(r.reference.latency.p50), ms(r.reference.latency.p99))
	o.f("ratio             enrollments/s ÷ handshakes/s = %.2f   ≥ %.1f: %s\n", ratio(r), targetRatio, verdict(ratio(r) >= targetRatio))
	if r.rest.n > 0 {
		o.f("rest of fleet     %6d in %s: %.0f/s, p50 %s, p99 %s\n",
			r.rest.n, secs(r.rest.total), r.rest.rate(), ms(r.rest.latency.p50), ms(r.rest.latency.p99))
	}
	if cfg.watches > 0 {
		o.f("watches           %6d open: controller VmRSS %s, VmHWM %s   < 1 GiB: %s (RSS), %s (peak)\n",
			cfg.watches, mib(r.memWatching.rss), mib(r.memWatching.hwm),
			verdict(r.memWatching.rss < targetMemory), verdict(r.memWatching.hwm < targetMemory))
	}
	if cfg.fanout > 0 {
		o.f("fan-out           %6d roles in one PUT: p50 %s, p99 %s, max %s   p99 < 1 s: %s\n",
			cfg.fanout, ms(r.fanout.latency.p50), ms(r.fanout.latency.p99), ms(r.fanout.latency.max),
			verdict(r.fanout.latency.p99 < targetFanoutP99))
	}
	o.f("\nmachine: %d CPUs, %s, MemTotal %s, %s\n", m.cpus, m.model, m.memTotal, m.kernel)
	o.f("go: bench %s, controller %s; controller data on %s; RLIMIT_NOFILE %d\n", m.goBench, p.goVer, m.dataFS, r.noFile)
	o.f("command: %s\n", cfg.command())
}

// projected is how long targetEnrollN enrollments take at the measured rate.
func projected(e enrollResult) time.Duration {
	if e.rate() == 0 {
		return 0
	}
	return time.Duration(float64(targetEnrollN) / e.rate() * float64(time.Second))
}

func ratio(r results) float64 {
	if r.reference.rate() == 0 {
		return 0
	}
	return r.enroll.rate() / r.reference.rate()
}

func hostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || !strings.HasPrefix(u.Host, "127.0.0.1:") {
		return "", fmt.Errorf("controller URL %q: want https://127.0.0.1:PORT", raw)
	}
	return u.Host, nil
}
