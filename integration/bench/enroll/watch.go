package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/harmonykaas/harmony/agent/controlclient"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

const (
	watchWait     = 5 * time.Minute
	activeWatches = "harmony_controller_role_watches_active"
	// fanoutVIP is from 198.18.0.0/15, the range set aside for benchmarks.
	fanoutVIP = "198.18.0.10"
)

// watchResult is how one long poll ended.
type watchResult struct {
	node     int
	status   int
	revision int64
	vip      string
	at       time.Time
	err      error
}

// watches is a fleet of nodes each holding one role long poll on its own
// connection, as harmony-agent does.
type watches struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	clients []*controlclient.Client
	results chan watchResult
}

// openWatches starts one long poll per node, GET PathNodeRole?after=<the
// node's revision>&wait=5m, each with its own controlclient (one TCP and
// TLS connection per node) presenting the node's certificate. At most
// workers requests are on their way at once; one counts as sent when its
// headers are written. It returns once every request is sent, or fails
// when ctx ends first; the long polls live until life ends or close.
func openWatches(ctx, life context.Context, nodes []*node, pool *x509.CertPool, workers int) (*watches, error) {
	wctx, cancel := context.WithCancel(life)
	ws := &watches{
		cancel:  cancel,
		clients: make([]*controlclient.Client, len(nodes)),
		results: make(chan watchResult, len(nodes)),
	}
	sem := make(chan struct{}, workers)
	for i, n := range nodes {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			ws.close()
			return nil, fmt.Errorf("open watches: %d of %d sent: %w", i, len(nodes), ctx.Err())
		}
		cert := n.cert
		c := controlclient.New(n.bootstrap.Controllers, pool, func() *tls.Certificate { return cert })
		ws.clients[i] = c
		var once sync.Once
		release := func() { once.Do(func() { <-sem }) }
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { release() }}
		q := url.Values{"after": {strconv.FormatInt(n.revision, 10)}, "wait": {watchWait.String()}}
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			defer release()
			// As the agent: the request's own deadline is its wait and 30 s.
			reqCtx, cancel := context.WithTimeout(httptrace.WithClientTrace(wctx, trace), watchWait+30*time.Second)
			defer cancel()
			var role v1.Role
			status, err := c.Do(reqCtx, http.MethodGet, v1.PathNodeRole, q, nil, &role)
			ws.results <- watchResult{node: i, status: status, revision: role.Revision, vip: role.Cluster.VIP, at: time.Now(), err: err}
		}()
	}
	for range workers {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			ws.close()
			return nil, fmt.Errorf("open watches: %w", ctx.Err())
		}
	}
	return ws, nil
}

// early returns a watch that ended, if any: none should before the change.
func (ws *watches) early() (watchResult, bool) {
	select {
	case r := <-ws.results:
		return r, true
	default:
		return watchResult{}, false
	}
}

// close ends every long poll and drops the connections.
func (ws *watches) close() {
	ws.cancel()
	done := make(chan struct{})
	go func() {
		ws.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	for _, c := range ws.clients {
		if c != nil {
			c.Close()
		}
	}
}

func describeEnd(nodes []*node, r watchResult) error {
	if r.err != nil {
		return fmt.Errorf("watch of %s ended: %w", nodes[r.node].name, r.err)
	}
	return fmt.Errorf("watch of %s ended with status %d, revision %d", nodes[r.node].name, r.status, r.revision)
}

// waitActive polls the controller's gauge of open watches until it reads
// want, printing progress.
func waitActive(ctx context.Context, o out, p *controllerProc, ws *watches, nodes []*node, want int) error {
	start := time.Now()
	lastPrint := start
	last := -1.0
	err := poll(ctx, 500*time.Millisecond, func() (bool, error) {
		if r, ended := ws.early(); ended {
			return false, describeEnd(nodes, r)
		}
		if err := p.exitedErr(); err != nil {
			return false, err
		}
		reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		v, err := p.metric(reqCtx, activeWatches)
		if err != nil {
			return false, err
		}
		last = v
		if time.Since(lastPrint) >= 5*time.Second {
			o.f("    … %s = %.0f / %d after %s\n", activeWatches, v, want, secs(time.Since(start)))
			lastPrint = time.Now()
		}
		return int(v) == want, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %s = %d (last read %.0f): %w", activeWatches, want, last, err)
	}
	return nil
}

// fanoutResult is the latency from the admin request to each watcher.
type fanoutResult struct {
	put      time.Duration // the admin request alone
	revision int64
	latency  latency
}

// fanout changes the roles of nodes[:f] in one admin request and measures,
// for each of them, the time from just before the request to the return of
// its long poll with the new revision.
func fanout(ctx context.Context, p *controllerProc, ws *watches, nodes []*node, f int) (fanoutResult, error) {
	// Fetch the roles first, outside the timed part.
	admins := make([]*client.Client, min(32, f))
	for i := range admins {
		var err error
		if admins[i], err = p.newAdmin(); err != nil {
			return fanoutResult{}, err
		}
	}
	roles := make([]v1.Role, f)
	err := forEach(ctx, out{}, "", f, len(admins), func(ctx context.Context, w, i int) error {
		role, err := admins[w].Role(ctx, nodes[i].name)
		if err != nil {
			return fmt.Errorf("get role of %s: %w", nodes[i].name, err)
		}
		role.Cluster.VIP = fanoutVIP
		roles[i] = *role
		return nil
	})
	if err != nil {
		return fanoutResult{}, err
	}
	if r, ended := ws.early(); ended {
		return fanoutResult{}, describeEnd(nodes, r)
	}

	t0 := time.Now()
	revision, err := admins[0].SetRoles(ctx, roles)
	if err != nil {
		return fanoutResult{}, fmt.Errorf("put %d roles: %w", f, err)
	}
	res := fanoutResult{put: time.Since(t0), revision: revision}

	lat := make([]time.Duration, 0, f)
	for len(lat) < f {
		select {
		case r := <-ws.results:
			switch {
			case r.err != nil || r.status != http.StatusOK:
				return res, describeEnd(nodes, r)
			case r.node >= f:
				return res, fmt.Errorf("watch of %s, whose role did not change, returned revision %d", nodes[r.node].name, r.revision)
			case r.revision != revision || r.vip != fanoutVIP:
				return res, fmt.Errorf("watch of %s returned revision %d with VIP %q, want %d with %s",
					nodes[r.node].name, r.revision, r.vip, revision, fanoutVIP)
			}
			lat = append(lat, r.at.Sub(t0))
		case <-ctx.Done():
			return res, fmt.Errorf("fan-out: %d of %d watchers saw the change: %w", len(lat), f, ctx.Err())
		}
	}
	res.latency = summarize(lat)
	return res, nil
}
