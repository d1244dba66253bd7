package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/integration/lab"
)

// failoverTimes are counted from the moment the holder lost power: the
// lab downs a powered-off VM's link before it kills the body.
type failoverTimes struct {
	from, to string
	// settled is how long etcd and the apiservers took to settle first.
	settled time.Duration
	// lostPower is when the link went down, after the power-off began.
	lostPower time.Duration
	vipMoved  time.Duration
	readyz    time.Duration
}

// failover waits until the cluster has settled, powers the VIP holder off
// and times the VIP's move and /readyz through the VIP.
func failover(ctx context.Context, stateDir string, sum *lab.Summary, m masters) (failoverTimes, error) {
	var f failoverTimes
	began := time.Now()
	if err := settle(ctx, sum, m); err != nil {
		return f, err
	}
	f.settled = time.Since(began)

	f.from = vipHolder(sum)
	if f.from == "" {
		return f, errors.New("no master holds the VIP")
	}
	i := slices.IndexFunc(sum.Nodes, func(n lab.NodeSummary) bool { return n.Name == f.from })
	netns := sum.Nodes[i].Netns
	// Short attempts: one hanging on the dead holder must not hide the
	// moment the VIP answers again.
	c, err := kubeClient(sum, 500*time.Millisecond)
	if err != nil {
		return f, err
	}
	vm, err := lab.OpenVM(stateDir, f.from)
	if err != nil {
		return f, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	start := time.Now()
	down := when(ctx, func() bool { return !linkUp(netns) })
	powered := make(chan error, 1)
	go func() { powered <- vm.Power(ctx, false) }()
	lost, ok := <-down
	if !ok {
		return f, fmt.Errorf("%s's link did not go down within a minute of its power-off: %w", f.from, ctx.Err())
	}
	f.lostPower = lost.Sub(start)
	// Both watches begin after the link went down, so nothing they see
	// can be the old holder still answering.
	moved := when(ctx, func() bool { h := vipHolder(sum); f.to = h; return h != "" && h != f.from })
	back := when(ctx, func() bool { return ready(c, sum.APIServer) })
	at, ok := <-moved
	if !ok {
		return f, fmt.Errorf("the VIP did not move within a minute of %s's power-off", f.from)
	}
	f.vipMoved = at.Sub(lost)
	if at, ok = <-back; !ok {
		return f, errors.New("/readyz through the VIP did not recover within a minute")
	}
	f.readyz = at.Sub(lost)
	if err := <-powered; err != nil {
		return f, fmt.Errorf("power off %s: %w", f.from, err)
	}
	return f, nil
}

// settle waits until, in two readings a second apart, every master's etcd
// follows one leader and has applied all but a few entries of the longest
// log, and every master's apiserver is ready. Right after an upgrade the
// last new master may still be catching up; powering another off then
// would leave etcd without quorum, which is not what the failover measures.
func settle(ctx context.Context, sum *lab.Summary, m masters) error {
	const lag = 20 // entries: leases and events keep the log moving
	c, err := kubeClient(sum, 2*time.Second)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var last error
	for good := 0; good < 2; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd and the apiservers did not settle within 5 minutes: %w", last)
		case <-time.After(time.Second):
		}
		last = settledOnce(c, m, lag)
		if last != nil {
			good = 0
			continue
		}
		good++
	}
	return nil
}

func settledOnce(c *http.Client, m masters, lag uint64) error {
	var leader string
	var longest, leastApplied uint64 = 0, ^uint64(0)
	for _, ip := range m.ips {
		st, err := m.etcd.Status(ip)
		if err != nil {
			return err
		}
		if st.Leader == "" || leader != "" && st.Leader != leader {
			return fmt.Errorf("etcd on %s follows leader %q, another member %q", ip, st.Leader, leader)
		}
		leader = st.Leader
		longest, leastApplied = max(longest, st.RaftIndex), min(leastApplied, st.AppliedIndex)
		if url := "https://" + ip + ":6443"; !ready(c, url) {
			return fmt.Errorf("the apiserver on %s is not ready", ip)
		}
	}
	if longest > leastApplied+lag {
		return fmt.Errorf("an etcd member applied %d entries of %d", leastApplied, longest)
	}
	return nil
}

// ready is whether /readyz at the apiserver URL answers 200.
func ready(c *http.Client, apiServer string) bool {
	resp, err := c.Get(apiServer + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// when returns a channel that receives the first moment cond holds, polled
// every 10 ms, and is closed without a value when ctx ends first.
func when(ctx context.Context, cond func() bool) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		defer close(ch)
		for ctx.Err() == nil {
			if cond() {
				ch <- time.Now()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return ch
}

// linkUp is whether the VM's eth0 is administratively up; a namespace
// already removed counts as down.
func linkUp(netns string) bool {
	out, err := exec.Command("ip", "-n", netns, "-o", "link", "show", "dev", "eth0").Output()
	if err != nil {
		return false
	}
	flags, _, _ := strings.Cut(string(out), ">")
	_, flags, _ = strings.Cut(flags, "<")
	return slices.Contains(strings.Split(flags, ","), "UP")
}

func vipHolder(sum *lab.Summary) string {
	for _, n := range sum.Nodes {
		if n.Role != string(v1.RoleMaster) {
			continue
		}
		out, err := exec.Command("ip", "-n", n.Netns, "-o", "-4", "addr", "show", "dev", "eth0", "up").Output()
		if err == nil && strings.Contains(string(out), " "+sum.VIP+"/") {
			return n.Name
		}
	}
	return ""
}
