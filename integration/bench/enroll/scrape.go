package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// scrapeRounds is how many times phase 7 reads each path.
const scrapeRounds = 20

// scrapeResult is one path's timing and size.
type scrapeResult struct {
	path    string
	latency latency
	bytes   int
}

// scrape is phase 7: what a Prometheus costs the controller with the
// whole fleet in its store. /metrics carries the fleet's metrics (node
// certificates, clusters) and /api/v1/metrics/targets the service
// discovery; both read the store at each request. The reference is GET
// /api/v1/nodes, the admin list of the same node records.
func (b *bench) scrape(ctx context.Context) error {
	cfg := b.cfg
	b.o.f("\n[7] scrape with %d nodes: GET %s, %s and (reference, the same node records as the admin API lists them) %s, %d times each, one at a time\n",
		cfg.nodes, v1.PathMetrics, v1.PathMetricsTargets, v1.PathNodes, scrapeRounds)
	sctx, cancel := phase(ctx, cfg.phaseTimeout)
	defer cancel()
	for _, path := range []string{v1.PathMetrics, v1.PathMetricsTargets, v1.PathNodes} {
		r, err := b.timeGets(sctx, path, scrapeRounds)
		if err != nil {
			return err
		}
		b.r.scrapes = append(b.r.scrapes, r)
		b.o.f("    %-24s %s, %d kB\n", path, r.latency, r.bytes/1000)
	}
	return nil
}

// timeGets reads path n times with the admin credential, on one warm
// connection.
func (b *bench) timeGets(ctx context.Context, path string, n int) (scrapeResult, error) {
	r := scrapeResult{path: path}
	var took []time.Duration
	for i := 0; i <= n; i++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.p.url+path, nil)
		if err != nil {
			return r, err
		}
		start := time.Now()
		resp, err := b.p.metrics.Do(req)
		if err != nil {
			return r, fmt.Errorf("get %s: %w", path, err)
		}
		size, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return r, fmt.Errorf("read %s: %w", path, err)
		}
		if resp.StatusCode != http.StatusOK {
			return r, fmt.Errorf("get %s: status %d", path, resp.StatusCode)
		}
		if i == 0 {
			continue // opens the connection
		}
		took = append(took, time.Since(start))
		r.bytes = int(size)
	}
	r.latency = summarize(took)
	return r, nil
}
