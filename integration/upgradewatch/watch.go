// Package upgradewatch watches a lab cluster while it is upgraded, as its
// users would see it: the API through the VIP every 100 ms, a
// Deployment's ready pods and the etcd leader every second, and the
// controller's view of each node's replacement every two seconds. TestLab
// and the lab benchmark both use it.
package upgradewatch

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

// Target is what is watched.
type Target struct {
	// APIServer is the VIP's URL; Kube calls it as the cluster's admin.
	APIServer string
	Kube      *http.Client
	// ConfigMap (default/NAME) is read with /readyz in each API sample.
	ConfigMap string
	// Deployment (default/NAME) has its ready replicas sampled, if set.
	Deployment string
	// Etcd and MasterIPs give the leader.
	Etcd      *Etcd
	MasterIPs []string
	// Controller and Cluster give each node's replacement.
	Controller *client.Client
	Cluster    string
}

// Result is what the clients saw.
type Result struct {
	// API samples (/readyz and the ConfigMap through the VIP, each with
	// one retry, as a client would): how many, how many failed, the
	// longest run of failures and when it began.
	Samples, Failed, LongestRun int
	LongestAt                   time.Time
	// MinReady is the Deployment's fewest ready replicas seen, first at
	// MinReadyAt.
	MinReady   int
	MinReadyAt time.Time
	// Leaders are the etcd leaders seen, in order.
	Leaders []string
	// Replaced is how long each node's replacement took, from the first
	// view that showed it to the first that did not (an old worker: until
	// it is gone).
	Replaced map[string]time.Duration
	// Steps is each node's replacement step by step: every step the
	// controller's view showed, in order, and when it first showed.
	Steps map[string][]Step
}

// Step is a replacement step (ClusterNode.Upgrade) and when a view first
// showed it.
type Step struct {
	Name string
	At   time.Time
}

// Timeline says how long node's replacement showed each step: "HandingOver
// 4s, HandedOver 2s, …", the last until the replacement ended; empty for
// a node not replaced.
func (r *Result) Timeline(node string) string {
	steps := r.Steps[node]
	if len(steps) == 0 {
		return ""
	}
	end := steps[0].At.Add(r.Replaced[node])
	var parts []string
	for i, s := range steps {
		next := end
		if i+1 < len(steps) {
			next = steps[i+1].At
		}
		parts = append(parts, fmt.Sprintf("%s %s", s.Name, next.Sub(s.At).Round(time.Second)))
	}
	return strings.Join(parts, ", ")
}

// Elections counts the leader changes seen.
func (r *Result) Elections() int { return max(len(r.Leaders)-1, 0) }

// Watch runs the clients until Stop.
type Watch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	res      Result
	run      int
	runStart time.Time
}

func newWatch(cancel context.CancelFunc) *Watch {
	return &Watch{cancel: cancel, res: Result{MinReady: 1 << 30, Replaced: map[string]time.Duration{}, Steps: map[string][]Step{}}}
}

// Start starts the clients.
func Start(t Target) *Watch {
	ctx, cancel := context.WithCancel(context.Background())
	w := newWatch(cancel)
	get := func(path string) bool {
		for range 2 {
			resp, err := t.Kube.Get(t.APIServer + path)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return true
				}
			}
		}
		return false
	}
	w.every(ctx, 100*time.Millisecond, func(now time.Time) {
		w.api(get("/readyz") && get("/api/v1/namespaces/default/configmaps/"+t.ConfigMap), now)
	})
	w.every(ctx, time.Second, func(now time.Time) {
		if t.Deployment != "" {
			w.deployment(t, now)
		}
		for _, ip := range t.MasterIPs {
			if leader, err := t.Etcd.Leader(ip); err == nil && leader != "" && leader != "0" {
				w.mu.Lock()
				if n := len(w.res.Leaders); n == 0 || w.res.Leaders[n-1] != leader {
					w.res.Leaders = append(w.res.Leaders, leader)
				}
				w.mu.Unlock()
				break
			}
		}
	})
	w.every(ctx, 2*time.Second, func(now time.Time) {
		if c, err := t.Controller.Cluster(ctx, t.Cluster); err == nil {
			w.nodes(c.Status.Nodes, now)
		}
	})
	return w
}

// Stop ends the clients and returns what they saw. It is called once the
// upgrade has ended, so a replacement still showing ends now: the last
// one ends with the operation, mostly before a next read of the nodes
// could see it gone.
func (w *Watch) Stop() *Result {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for name, steps := range w.res.Steps {
		if _, done := w.res.Replaced[name]; !done {
			w.res.Replaced[name] = now.Sub(steps[0].At)
		}
	}
	res := w.res
	if res.MinReady == 1<<30 {
		res.MinReady = 0
	}
	return &res
}

func (w *Watch) every(ctx context.Context, d time.Duration, fn func(time.Time)) {
	w.wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				fn(now)
			}
		}
	})
}

func (w *Watch) api(ok bool, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.res.Samples++
	if ok {
		w.run = 0
		return
	}
	w.res.Failed++
	if w.run == 0 {
		w.runStart = at
	}
	w.run++
	if w.run > w.res.LongestRun {
		w.res.LongestRun, w.res.LongestAt = w.run, w.runStart
	}
}

func (w *Watch) deployment(t Target, now time.Time) {
	resp, err := t.Kube.Get(t.APIServer + "/apis/apps/v1/namespaces/default/deployments/" + t.Deployment)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var d struct {
		Status struct {
			ReadyReplicas int `json:"readyReplicas"`
		} `json:"status"`
	}
	if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&d) == nil {
		w.mu.Lock()
		if d.Status.ReadyReplicas < w.res.MinReady {
			w.res.MinReady, w.res.MinReadyAt = d.Status.ReadyReplicas, now
		}
		w.mu.Unlock()
	}
}

// nodes notes each step of each node's replacement as it shows, and when
// the replacement is over: a master's while the controller shows its
// step, an old worker's from its surge worker's creation until it is
// gone. The surge worker, which shows "Replaces" for the same time, is not
// a replacement of its own.
func (w *Watch) nodes(nodes []v1.ClusterNode, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	present := map[string]bool{}
	for _, n := range nodes {
		present[n.Name] = true
		if n.Upgrade == "" || strings.HasPrefix(n.Upgrade, v1.UpgradeReplaces) {
			continue
		}
		if steps := w.res.Steps[n.Name]; len(steps) == 0 || steps[len(steps)-1].Name != n.Upgrade {
			w.res.Steps[n.Name] = append(steps, Step{Name: n.Upgrade, At: now})
		}
	}
	for name, steps := range w.res.Steps {
		if _, done := w.res.Replaced[name]; done {
			continue
		}
		showing := false
		for _, n := range nodes {
			if n.Name == name && n.Upgrade != "" {
				showing = true
			}
		}
		if !showing || !present[name] {
			w.res.Replaced[name] = now.Sub(steps[0].At)
		}
	}
}
