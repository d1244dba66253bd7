// Command enroll benchmarks a real harmony-controller over TLS on loopback.
//
// It starts bin/harmony-controller as a separate process and measures, in
// order: node creation through the admin API; enrollment of E nodes the way
// the agent enrolls (a new client, hence a full TLS handshake, per node);
// raw TLS handshakes per second against a minimal TLS server in another
// process, as the reference for the enrollment rate; enrollment of the rest
// of the fleet; the controller's memory with W role watches held open; and
// the latency of one admin change fanned out to F watching nodes.
//
// It prints what it measures. Each target is printed next to its figure as
// "met" or "not met"; nothing is asserted. A phase that fails (an error, a
// timeout) ends the run with a non-zero exit status.
//
//	make bench                                     # defaults
//	make bench BENCH_FLAGS='-nodes 200 -enroll 100 -watches 200 -fanout 100'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// config is the run's settings, from the command line.
type config struct {
	nodes             int
	enroll            int
	concurrency       int
	createConcurrency int
	watches           int
	fanout            int
	binDir            string
	phaseTimeout      time.Duration
	watchTimeout      time.Duration
	keep              bool
	args              []string
}

func parseFlags(args []string) (*config, error) {
	c := &config{args: args}
	fs := flag.NewFlagSet("enroll", flag.ContinueOnError)
	fs.IntVar(&c.nodes, "nodes", 10000, "node records to create (N)")
	fs.IntVar(&c.enroll, "enroll", 1000, "nodes enrolled in the timed enrollment phase (E); also the number of reference handshakes")
	fs.IntVar(&c.concurrency, "concurrency", 64, "concurrent enrollments, reference handshakes and watch openings")
	fs.IntVar(&c.createConcurrency, "create-concurrency", 32, "concurrent admin requests when creating node records")
	fs.IntVar(&c.watches, "watches", 10000, "role watches held open at once (W), one connection per node")
	fs.IntVar(&c.fanout, "fanout", 1000, "watching nodes whose roles one admin request changes (F)")
	fs.StringVar(&c.binDir, "bin", "", "directory holding harmony-controller (default $HARMONY_BIN, else ./bin)")
	fs.DurationVar(&c.phaseTimeout, "phase-timeout", 10*time.Minute, "upper bound of each creation, enrollment and handshake phase")
	fs.DurationVar(&c.watchTimeout, "watch-timeout", 3*time.Minute, "how long to wait for all watches to be open")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory (controller data and logs)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	switch {
	case c.nodes < 1:
		return nil, errors.New("-nodes must be at least 1")
	case c.enroll < 1 || c.enroll > c.nodes:
		return nil, fmt.Errorf("-enroll must be between 1 and -nodes (%d)", c.nodes)
	case c.watches < 0 || c.watches > c.nodes:
		return nil, fmt.Errorf("-watches must be between 0 and -nodes (%d)", c.nodes)
	case c.fanout < 0 || c.fanout > c.watches:
		return nil, fmt.Errorf("-fanout must be between 0 and -watches (%d)", c.watches)
	case c.concurrency < 1 || c.createConcurrency < 1:
		return nil, errors.New("concurrency flags must be at least 1")
	}
	if c.binDir == "" {
		c.binDir = os.Getenv("HARMONY_BIN")
	}
	if c.binDir == "" {
		c.binDir = "bin"
	}
	return c, nil
}

// command is how to repeat this run.
func (c *config) command() string {
	return strings.TrimSpace("go run ./integration/bench/enroll " + strings.Join(c.args, " "))
}

func main() {
	// The reference TLS server is this same binary in another process, so
	// that its server and the benchmark's clients are split across
	// processes exactly as the controller and its clients are.
	if len(os.Args) > 1 && os.Args[1] == referenceServeFlag {
		if err := serveReference(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "reference server:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stdout, "\nFAILED:", err)
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// phase bounds one step of the run in time.
func phase(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// out prints to the run's output.
type out struct{ w io.Writer }

func (o out) f(format string, args ...any) { fmt.Fprintf(o.w, format, args...) }
