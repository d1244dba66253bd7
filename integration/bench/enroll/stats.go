package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// latency summarizes a set of durations.
type latency struct {
	n                  int
	min, p50, p99, max time.Duration
	mean               time.Duration
}

func summarize(d []time.Duration) latency {
	if len(d) == 0 {
		return latency{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return latency{
		n: len(s), min: s[0], max: s[len(s)-1], mean: sum / time.Duration(len(s)),
		p50: percentile(s, 0.50), p99: percentile(s, 0.99),
	}
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func (l latency) String() string {
	return fmt.Sprintf("p50 %s  p99 %s  max %s  (min %s, mean %s, n=%d)",
		ms(l.p50), ms(l.p99), ms(l.max), ms(l.min), ms(l.mean), l.n)
}

// ms prints a duration in milliseconds with a sensible precision.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f ms", v)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "not met"
}

// forEach runs fn for i in [0,n) on workers goroutines. The first error
// cancels the others and is returned. With a label, it prints progress
// every progressEvery.
func forEach(ctx context.Context, o out, label string, n, workers int, fn func(ctx context.Context, worker, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, w, i); err != nil {
					cancel(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	const progressEvery = 10 * time.Second
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	start := time.Now()
feed:
	for i := range n {
		for {
			select {
			case next <- i:
				continue feed
			case <-ctx.Done():
				break feed
			case <-tick.C:
				if label != "" {
					o.f("    … %s: %d/%d after %s\n", label, done.Load(), n, secs(time.Since(start)))
				}
			}
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// machine describes where the run happened.
type machine struct {
	cpus     int
	model    string
	memTotal string
	kernel   string
	goBench  string
	dataFS   string
}

func describeMachine(dataDir string) machine {
	m := machine{cpus: runtime.NumCPU(), goBench: runtime.Version(), dataFS: filesystem(dataDir)}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.model = procField(data, "model name")
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.memTotal = procField(data, "MemTotal")
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		m.kernel = utsString(u.Sysname[:]) + " " + utsString(u.Release[:]) + " " + utsString(u.Machine[:])
	}
	return m
}

func procField(data []byte, key string) string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func utsString(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}

// filesystem names the file system of dir: the store fsyncs every commit,
// so tmpfs would flatter enrollment.
func filesystem(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	names := map[int64]string{
		0xEF53: "ext2/3/4", 0x01021994: "tmpfs", 0x794c7630: "overlayfs", 0x58465342: "xfs",
		0x9123683E: "btrfs", 0x2FC12FC1: "zfs", 0x65735546: "fuse",
	}
	if n, ok := names[int64(st.Type)]; ok {
		return n
	}
	return "0x" + strconv.FormatInt(int64(st.Type), 16)
}
