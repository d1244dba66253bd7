package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/integration/lab"
)

// transferMiB is what each throughput run sends: large enough that the
// connection's start is noise, small enough for the 2-core machine.
const transferMiB = 512

// realSeconds reads busybox time -p's report: "real 2.07".
var realSeconds = regexp.MustCompile(`(?m)^real ([0-9.]+)$`)

// throughput measures a TCP bulk transfer from a pod on one worker to a
// pod on the other (flannel's VXLAN), next to the same transfer between
// host-network pods on the same two workers (the lab's bare bridge), with
// the same image and tools (busybox dd and time, OpenBSD nc, in make
// test-images' agnhost), so that the ratio is the overlay's cost. Returns MiB/s.
func throughput(ctx context.Context, stateDir string, sum *lab.Summary, k8sBin, testImages string) (overlay, bridge float64, err error) {
	var workers []string
	for _, n := range sum.Nodes {
		if n.Role == "worker" {
			workers = append(workers, n.Name)
		}
	}
	if len(workers) < 2 {
		return 0, 0, fmt.Errorf("throughput needs two workers, the lab has %d", len(workers))
	}
	ref, err := os.ReadFile(filepath.Join(testImages, "agnhost.ref"))
	if err != nil {
		return 0, 0, fmt.Errorf("the test images (make test-images): %w", err)
	}
	for _, w := range workers[:2] {
		vm, err := lab.OpenVM(stateDir, w)
		if err != nil {
			return 0, 0, err
		}
		if err := vm.LoadImage(ctx, filepath.Join(testImages, "agnhost.tar")); err != nil {
			return 0, 0, err
		}
	}
	kubectl := func(stdin string, args ...string) (string, error) {
		out, err := sum.Kubectl(ctx, k8sBin, stdin, args...)
		return string(out), err
	}
	image := strings.TrimSpace(string(ref))
	var manifest strings.Builder
	for _, p := range []struct {
		name, node string
		host       bool
	}{{"bench-recv", workers[0], false}, {"bench-send", workers[1], false}, {"bench-recv-host", workers[0], true}, {"bench-send-host", workers[1], true}} {
		fmt.Fprintf(&manifest, `---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  nodeName: %s
  hostNetwork: %t
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: %s, imagePullPolicy: Never, command: [/bin/sleep, "3600"]}
`, p.name, p.node, p.host, image)
	}
	if _, err := kubectl(manifest.String(), "apply", "-f", "-"); err != nil {
		return 0, 0, err
	}
	defer kubectl("", "delete", "pod", "--wait=false", "bench-recv", "bench-send", "bench-recv-host", "bench-send-host")
	if _, err := kubectl("", "wait", "--for=condition=Ready", "--timeout=3m", "pod/bench-recv", "pod/bench-send", "pod/bench-recv-host", "pod/bench-send-host"); err != nil {
		return 0, 0, err
	}
	run := func(recv, send string, port int) (float64, error) {
		out, err := kubectl("", "get", "pod", recv, "-o", "json")
		if err != nil {
			return 0, err
		}
		var pod struct {
			Status struct{ PodIP string }
		}
		if err := json.Unmarshal([]byte(out), &pod); err != nil {
			return 0, err
		}
		// The receiver discards what one connection sends; the sender
		// times the whole transfer, from its first byte to the close.
		listen := sum.KubectlCommand(ctx, k8sBin,
			"exec", recv, "--", "/bin/sh", "-c", fmt.Sprintf("/bin/nc.openbsd -l %d > /dev/null", port))
		if err := listen.Start(); err != nil {
			return 0, err
		}
		defer listen.Process.Kill()
		time.Sleep(2 * time.Second)
		// busybox's time times the whole transfer: dd into OpenBSD nc
		// (in make test-images' agnhost), which closes its side at the
		// end of its input.
		out, err = kubectl("", "exec", send, "--", "/bin/sh", "-c",
			fmt.Sprintf("time -p sh -c 'dd if=/dev/zero bs=1048576 count=%d 2>/dev/null | /bin/nc.openbsd -N %s %d'", transferMiB, pod.Status.PodIP, port))
		if err != nil {
			return 0, err
		}
		m := realSeconds.FindStringSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("time's report %q", out)
		}
		secs, err := strconv.ParseFloat(m[1], 64)
		if err != nil || secs <= 0 {
			return 0, fmt.Errorf("time's report %q", out)
		}
		listen.Wait()
		return transferMiB / secs, nil
	}
	if overlay, err = run("bench-recv", "bench-send", 5001); err != nil {
		return 0, 0, fmt.Errorf("pod to pod: %w", err)
	}
	if bridge, err = run("bench-recv-host", "bench-send-host", 5002); err != nil {
		return 0, 0, fmt.Errorf("host to host: %w", err)
	}
	return overlay, bridge, nil
}
