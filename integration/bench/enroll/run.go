package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/identity"
	"github.com/harmonykaas/harmony/integration/bench/procstat"
)

// Targets.
const (
	targetEnrollN      = 1000
	targetEnrollWithin = 10 * time.Second
	// Issue 16 raised it from 0.5.
	targetRatio     = 0.7
	targetWatches   = 10000
	targetMemory    = 1 << 30
	targetFanoutP99 = time.Second
)

// results are the figures the summary prints; zero where a phase did not run.
type results struct {
	noFile    uint64
	create    time.Duration
	enroll    timing
	reference timing
	// The server process's CPU time per enrollment and per handshake.
	enrollCPU, referenceCPU time.Duration
	// One handshake's CPU, server and clients together, and the CPU of
	// the checks and signing no enrollment can skip (cryptoFloor).
	handshakeCPU, floorCPU time.Duration
	rest                   timing
	watchesOpen            time.Duration
	memBefore              procstat.Memory
	memWatching            procstat.Memory
	goroutines             float64
	heapInuse              float64
	stackInuse             float64
	fdsController          int
	fanout                 fanoutResult
	scrapes                []scrapeResult
	disturbed              []string // phases during which other work took CPU
}

// bench is one run: its settings, the controller under test, the fleet
// and the figures so far.
type bench struct {
	cfg   *config
	o     out
	tmp   string
	p     *controllerProc
	nodes []*node
	pool  *x509.CertPool // the controller's CA, from the bootstrap documents
	ws    *watches
	r     results
	// version is the controller's build version.
	version string
}

func run(ctx context.Context, cfg *config, w io.Writer) (err error) {
	b := &bench{cfg: cfg, o: out{w}}
	b.o.f("Harmony enrollment benchmark\n")
	b.o.f("command: %s\n", cfg.command())
	b.o.f("settings: nodes=%d enroll=%d concurrency=%d create-concurrency=%d watches=%d fanout=%d\n",
		cfg.nodes, cfg.enroll, cfg.concurrency, cfg.createConcurrency, cfg.watches, cfg.fanout)

	var note string
	if b.r.noFile, note, err = raiseNoFile(); err != nil {
		return err
	}
	b.o.f("RLIMIT_NOFILE: %d (soft = hard), inherited by the child processes\n", b.r.noFile)
	if note != "" {
		b.o.f("    (%s)\n", note)
	}
	if need := uint64(cfg.watches + 1000); b.r.noFile < need {
		b.o.f("warning: %d watches need about %d descriptors in each process\n", cfg.watches, need)
	}

	if b.tmp, err = os.MkdirTemp("", "harmony-bench-"); err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer func() {
		if cfg.keep {
			b.o.f("kept %s (controller data and logs)\n", b.tmp)
			return
		}
		os.RemoveAll(b.tmp)
	}()
	m := describeMachine(b.tmp)

	if b.p, err = startController(ctx, cfg.binDir, b.tmp); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			b.o.f("\ncontroller log ends with:\n%s\n", b.p.logTail(15))
		}
		if serr := b.p.stop(20 * time.Second); serr != nil {
			b.o.f("stop controller: %v\n", serr)
		}
	}()
	defer func() {
		if b.ws != nil {
			b.ws.close()
		}
	}()
	b.version = b.p.version(ctx)
	b.o.f("controller: %s version %s (pid %d, %s) on %s, data directory on %s\n",
		b.p.bin, b.version, b.p.pid(), b.p.goVer, b.p.url, m.dataFS)

	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"create nodes", b.createNodes},
		{"enrollment", b.enroll},
		{"reference handshakes", b.reference},
		{"enrollment of the rest", b.enrollRest},
		{"watches", b.watch},
		{"fan-out", b.fanout},
		{"scrape", b.scrape},
	}
	for _, s := range steps {
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	b.summary(m)
	return nil
}

// createNodes is phase 1, and makes the nodes' keys and CSRs untimed.
func (b *bench) createNodes(ctx context.Context) error {
	cfg := b.cfg
	b.nodes = make([]*node, cfg.nodes)
	for i := range b.nodes {
		b.nodes[i] = &node{name: nodeName(i)}
	}
	b.o.f("\n[1] create %d node records: POST /api/v1/nodes, %d concurrent\n", cfg.nodes, cfg.createConcurrency)
	pctx, cancel := phase(ctx, cfg.phaseTimeout)
	defer cancel()
	cpu := newCPUMeter(b.p.pid())
	var err error
	if b.r.create, err = createNodes(pctx, b.o, b.p, b.nodes, cfg.createConcurrency); err != nil {
		return err
	}
	b.o.f("    %d nodes in %s (%.0f nodes/s)\n", cfg.nodes, secs(b.r.create), rate(cfg.nodes, b.r.create))
	b.cpu("node records", cpu.report(cfg.nodes, "node"))

	if err := prepareKeys(pctx, b.o, b.nodes, cfg.concurrency); err != nil {
		return fmt.Errorf("node keys: %w", err)
	}
	if b.pool, err = identity.PoolFromPEM([]byte(b.nodes[0].bootstrap.CABundle)); err != nil {
		return fmt.Errorf("CA bundle of the bootstrap document: %w", err)
	}
	return nil
}

// enroll is phase 2: E enrollments, timed.
func (b *bench) enroll(ctx context.Context) error {
	cfg := b.cfg
	addr, err := hostPort(b.nodes[0].bootstrap.Controllers[0])
	if err != nil {
		return err
	}
	tlsDesc, err := probeTLS(ctx, addr, b.pool)
	if err != nil {
		return err
	}
	b.o.f("\n[2] enroll %d nodes: POST /api/v1/enroll, %d concurrent, a new client and TLS connection each\n", cfg.enroll, cfg.concurrency)
	b.o.f("    (keys and CSRs were made beforehand, as each node makes its own)\n")
	b.o.f("    TLS: %s\n", tlsDesc)
	pctx, cancel := phase(ctx, cfg.phaseTimeout)
	defer cancel()
	cpu := newCPUMeter(b.p.pid())
	if b.r.enroll, err = enrollNodes(pctx, b.o, b.nodes[:cfg.enroll], b.pool, cfg.concurrency); err != nil {
		return err
	}
	printEnroll(b.o, b.r.enroll)
	use := cpu.report(b.r.enroll.n, "enrollment")
	b.r.enrollCPU = use.server
	b.cpu("enrollment", use)
	b.o.f("    time for %d at this rate: %s   target < %s: %s\n", targetEnrollN,
		secs(projected(b.r.enroll)), secs(targetEnrollWithin), verdict(projected(b.r.enroll) < targetEnrollWithin))
	return nil
}

// reference is phase 3: E raw handshakes against the reference server.
func (b *bench) reference(ctx context.Context) (err error) {
	cfg := b.cfg
	b.o.f("\n[3] reference: %d raw TLS handshakes (dial, handshake, close), %d concurrent, against a TLS-only server process\n", cfg.enroll, cfg.concurrency)
	ref, err := startReference(ctx, b.tmp)
	if err != nil {
		return err
	}
	defer func() {
		if serr := ref.stop(10 * time.Second); err == nil {
			err = serr
		}
	}()
	tlsDesc, err := probeTLS(ctx, ref.addr, ref.pool)
	if err != nil {
		return err
	}
	b.o.f("    TLS: %s\n", tlsDesc)
	pctx, cancel := phase(ctx, cfg.phaseTimeout)
	defer cancel()
	cpu := newCPUMeter(ref.pid())
	if b.r.reference, err = ref.handshakes(pctx, b.o, cfg.enroll, cfg.concurrency); err != nil {
		return err
	}
	b.o.f("    %d handshakes in %s: %.0f handshakes/s\n", b.r.reference.n, secs(b.r.reference.total), b.r.reference.rate())
	b.o.f("    latency %s\n", b.r.reference.latency)
	use := cpu.report(cfg.enroll, "handshake")
	b.r.referenceCPU = use.server
	b.cpu("TLS handshakes", use)
	b.o.f("    enrollments/s ÷ handshakes/s = %.0f ÷ %.0f = %.2f   target ≥ %.1f: %s\n",
		b.r.enroll.rate(), b.r.reference.rate(), b.ratio(), targetRatio, verdict(b.ratio() >= targetRatio))
	b.r.handshakeCPU = use.total
	if b.r.floorCPU, err = cryptoFloor(b.tmp, b.nodes[:cfg.enroll]); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	b.o.f("    floor: checking a CSR and issuing its certificate (controller/ca, %d on one goroutine here) cost %s of CPU;\n"+
		"    a handshake costs %s (server and clients), so no enrollment over it can pass %.2f\n",
		floorRounds, ms(b.r.floorCPU), ms(b.r.handshakeCPU), b.ceiling())
	return nil
}

// ceiling is the ratio an enrollment would reach if everything beyond
// the handshake and the floor cost nothing.
func (b *bench) ceiling() float64 {
	h := b.r.handshakeCPU.Seconds()
	return h / (h + b.r.floorCPU.Seconds())
}

// enrollRest is phase 4: every other node, so that all have identities.
func (b *bench) enrollRest(ctx context.Context) error {
	cfg := b.cfg
	if rest := b.nodes[cfg.enroll:]; len(rest) > 0 {
		b.o.f("\n[4] enroll the other %d nodes, %d concurrent\n", len(rest), cfg.concurrency)
		pctx, cancel := phase(ctx, cfg.phaseTimeout)
		defer cancel()
		cpu := newCPUMeter(b.p.pid())
		var err error
		if b.r.rest, err = enrollNodes(pctx, b.o, rest, b.pool, cfg.concurrency); err != nil {
			return err
		}
		printEnroll(b.o, b.r.rest)
		b.cpu("rest of fleet", cpu.report(b.r.rest.n, "enrollment"))
	}
	return buildIdentities(b.nodes)
}

// watch is phase 5: W long polls held open, and the controller's memory.
func (b *bench) watch(ctx context.Context) error {
	cfg := b.cfg
	if cfg.watches == 0 {
		return nil
	}
	var err error
	if b.r.memBefore, err = procstat.ReadMemory(b.p.pid()); err != nil {
		return err
	}
	b.o.f("\n[5] open %d role watches: GET /api/v1/node/role?after=<revision>&wait=%s, one connection and client certificate per node, %d opening at once\n",
		cfg.watches, watchWait, cfg.concurrency)
	b.o.f("    controller before: VmRSS %s, VmHWM %s\n", mib(b.r.memBefore.RSS), mib(b.r.memBefore.HWM))
	watchers := b.nodes[:cfg.watches]
	wctx, cancel := phase(ctx, cfg.watchTimeout)
	defer cancel()
	start := time.Now()
	cpu := newCPUMeter(b.p.pid())
	// The long polls live until the end of the run; only opening them is
	// bounded by the watch timeout.
	if b.ws, err = openWatches(wctx, ctx, watchers, b.pool, cfg.concurrency); err != nil {
		return err
	}
	b.o.f("    %d requests sent in %s; waiting for %s = %d\n", cfg.watches, secs(time.Since(start)), activeWatches, cfg.watches)
	if err := waitActive(wctx, b.o, b.p, b.ws, watchers, cfg.watches); err != nil {
		return err
	}
	b.r.watchesOpen = time.Since(start)
	use := cpu.report(cfg.watches, "watch")

	if b.r.memWatching, err = procstat.ReadMemory(b.p.pid()); err != nil {
		return err
	}
	b.r.fdsController = countFDs(b.p.pid())
	mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
	defer mcancel()
	b.r.goroutines, _ = b.p.metric(mctx, "go_goroutines")
	b.r.heapInuse, _ = b.p.metric(mctx, "go_memstats_heap_inuse_bytes")
	b.r.stackInuse, _ = b.p.metric(mctx, "go_memstats_stack_inuse_bytes")

	r := b.r
	b.o.f("    all %d open after %s\n", cfg.watches, secs(r.watchesOpen))
	b.cpu("opening watches", use)
	b.o.f("    controller with %d watches open: VmRSS %s, VmHWM (peak since start) %s\n",
		cfg.watches, mib(r.memWatching.RSS), mib(r.memWatching.HWM))
	b.o.f("    of which Go heap in use %s, goroutine stacks %s; %.0f goroutines, %d threads, %d descriptors\n",
		mib(uint64(r.heapInuse)), mib(uint64(r.stackInuse)), r.goroutines, r.memWatching.Threads, r.fdsController)
	if r.memWatching.RSS > r.memBefore.RSS {
		b.o.f("    ≈ %.0f KiB of RSS per watch (growth since before the watches)\n",
			float64(r.memWatching.RSS-r.memBefore.RSS)/1024/float64(cfg.watches))
	}
	note := ""
	if cfg.watches != targetWatches {
		note = fmt.Sprintf(" (the target is for %d watches; this run holds %d)", targetWatches, cfg.watches)
	}
	b.o.f("    VmRSS %s   target < %s: %s%s\n", mib(r.memWatching.RSS), mib(targetMemory), verdict(r.memWatching.RSS < targetMemory), note)
	b.o.f("    VmHWM %s   target < %s: %s%s\n", mib(r.memWatching.HWM), mib(targetMemory), verdict(r.memWatching.HWM < targetMemory), note)
	return nil
}

// fanout is phase 6: one admin change reaching F watchers.
func (b *bench) fanout(ctx context.Context) error {
	cfg := b.cfg
	if cfg.fanout == 0 || b.ws == nil {
		return nil
	}
	b.o.f("\n[6] fan-out: one PUT /api/v1/roles changing %d roles (cluster.vip = %s); latency from just before the request to each watcher's 200\n",
		cfg.fanout, fanoutVIP)
	fctx, cancel := phase(ctx, time.Minute)
	defer cancel()
	var err error
	if b.r.fanout, err = fanout(fctx, b.p, b.ws, b.nodes[:cfg.watches], cfg.fanout); err != nil {
		return err
	}
	f := b.r.fanout
	b.o.f("    PUT answered in %s (revision %d)\n", ms(f.put), f.revision)
	b.o.f("    latency %s\n", f.latency)
	b.o.f("    p99 %s   target < %s: %s\n", ms(f.latency.p99), ms(targetFanoutP99), verdict(f.latency.p99 < targetFanoutP99))
	return nil
}

func printEnroll(o out, e timing) {
	o.f("    %d enrollments in %s: %.0f enrollments/s\n", e.n, secs(e.total), e.rate())
	o.f("    latency   %s\n", e.latency)
	o.f("    handshake %s (the TLS part of each)\n", e.handshake)
}

func (b *bench) summary(m machine) {
	cfg, r, o := b.cfg, b.r, b.o
	o.f("\n==== summary ====\n")
	o.f("node records      %6d in %s (%.0f/s)\n", cfg.nodes, secs(r.create), rate(cfg.nodes, r.create))
	o.f("enrollment        %6d in %s: %.0f/s, p50 %s, p99 %s   1,000 in < 10 s: %s (%s)\n",
		r.enroll.n, secs(r.enroll.total), r.enroll.rate(), ms(r.enroll.latency.p50), ms(r.enroll.latency.p99),
		verdict(projected(r.enroll) < targetEnrollWithin), secs(projected(r.enroll)))
	o.f("TLS handshakes    %6d in %s: %.0f/s, p50 %s, p99 %s\n",
		r.reference.n, secs(r.reference.total), r.reference.rate(), ms(r.reference.latency.p50), ms(r.reference.latency.p99))
	o.f("ratio             enrollments/s ÷ handshakes/s = %.2f   ≥ %.1f: %s\n", b.ratio(), targetRatio, verdict(b.ratio() >= targetRatio))
	if r.floorCPU > 0 {
		o.f("ceiling           %.2f: the ratio with nothing but the handshake, the CSR check and the signing (%s + %s of CPU)\n",
			b.ceiling(), ms(r.handshakeCPU), ms(r.floorCPU))
	}
	if r.enrollCPU > 0 {
		// The clients share the machine; this is the server's side alone.
		o.f("server CPU        %s per enrollment, %s per handshake (handshake ÷ enrollment = %.2f)\n",
			ms(r.enrollCPU), ms(r.referenceCPU), r.referenceCPU.Seconds()/r.enrollCPU.Seconds())
	}
	if r.rest.n > 0 {
		o.f("rest of fleet     %6d in %s: %.0f/s, p50 %s, p99 %s\n",
			r.rest.n, secs(r.rest.total), r.rest.rate(), ms(r.rest.latency.p50), ms(r.rest.latency.p99))
	}
	if cfg.watches > 0 {
		o.f("watches           %6d open: controller VmRSS %s, VmHWM %s   < 1 GiB: %s (RSS), %s (peak)\n",
			cfg.watches, mib(r.memWatching.RSS), mib(r.memWatching.HWM),
			verdict(r.memWatching.RSS < targetMemory), verdict(r.memWatching.HWM < targetMemory))
	}
	if cfg.fanout > 0 {
		o.f("fan-out           %6d roles in one PUT: p50 %s, p99 %s, max %s   p99 < 1 s: %s\n",
			cfg.fanout, ms(r.fanout.latency.p50), ms(r.fanout.latency.p99), ms(r.fanout.latency.max),
			verdict(r.fanout.latency.p99 < targetFanoutP99))
	}
	for _, sc := range r.scrapes {
		o.f("scrape            %-24s p50 %s, max %s, %d kB\n", sc.path, ms(sc.latency.p50), ms(sc.latency.max), sc.bytes/1000)
	}
	if len(r.disturbed) > 0 {
		o.f("WARNING: other work took more than %.0f%% of a core during: %s; rerun on an idle machine before trusting those figures\n",
			disturbed, strings.Join(r.disturbed, ", "))
	}
	o.f("\nmachine: %d CPUs, %s, MemTotal %s, %s\n", m.cpus, m.model, m.memTotal, m.kernel)
	o.f("controller: version %s, %s; bench %s; controller data on %s; RLIMIT_NOFILE %d\n",
		b.version, b.p.goVer, m.goBench, m.dataFS, r.noFile)
	o.f("command: %s\n", cfg.command())
}

// cpu prints a phase's CPU use and remembers a phase that other work
// disturbed.
func (b *bench) cpu(name string, u cpuUse) {
	b.o.f("    %s\n", u.text)
	if u.others > disturbed {
		b.r.disturbed = append(b.r.disturbed, name)
	}
}

func (b *bench) ratio() float64 {
	if b.r.reference.rate() == 0 {
		return 0
	}
	return b.r.enroll.rate() / b.r.reference.rate()
}

// projected is how long targetEnrollN enrollments take at the measured rate.
func projected(e timing) time.Duration {
	if e.rate() == 0 {
		return 0
	}
	return time.Duration(float64(targetEnrollN) / e.rate() * float64(time.Second))
}

func hostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || !strings.HasPrefix(u.Host, "127.0.0.1:") {
		return "", fmt.Errorf("controller URL %q: want https://127.0.0.1:PORT", raw)
	}
	return u.Host, nil
}
