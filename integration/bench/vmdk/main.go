// Command vmdk benchmarks the streamOptimized VMDK writer (ova/vmdk)
// against `qemu-img convert -O vmdk -o subformat=streamOptimized` on the
// same raw disk, in the same run: time and size, and their ratios.
//
// The disk is sparse, like a freshly built image: -size bytes with
// -data bytes written in 1 MiB runs spread across it, half random (does
// not compress, like binaries in packages) and half text (compresses,
// like config and docs), and zero runs in between. The target ("Faster
// where it shows"): our writer at a quarter of qemu-img's time or better,
// and no larger. Our writer writes to the file as the image build does
// (ova.Assemble), so the CID costs no extra read pass.
//
//	make bench
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/harmonykaas/harmony/ova/vmdk"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench vmdk:", err)
		os.Exit(1)
	}
}

func run() error {
	size := flag.Int64("size", 2<<30, "raw disk size in bytes")
	data := flag.Int64("data", 512<<20, "bytes of data written into it")
	level := flag.Int("level", 0, "our writer's zlib level (0: its default)")
	flag.Parse()
	dir, err := os.MkdirTemp("", "harmony-bench-vmdk-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	raw := filepath.Join(dir, "disk.raw")
	if err := makeDisk(raw, *size, *data); err != nil {
		return err
	}
	fmt.Printf("VMDK writer benchmark: %d CPUs, raw disk %d MiB with %d MiB of data (half random, half text), %s\n",
		runtime.NumCPU(), *size>>20, *data>>20, time.Now().UTC().Format(time.RFC3339))

	ours := filepath.Join(dir, "ours.vmdk")
	start := time.Now()
	stats, err := writeOurs(raw, ours, *size, *level)
	if err != nil {
		return err
	}
	oursTime := time.Since(start)

	theirs := filepath.Join(dir, "qemu.vmdk")
	start = time.Now()
	if out, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "vmdk", "-o", "subformat=streamOptimized", raw, theirs).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img convert: %w: %s", err, out)
	}
	qemuTime := time.Since(start)
	qemuInfo, err := os.Stat(theirs)
	if err != nil {
		return err
	}
	if out, err := exec.Command("qemu-img", "compare", "-f", "raw", "-F", "vmdk", raw, ours).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img compare: our VMDK differs from the raw disk: %w: %s", err, out)
	}
	if out, err := exec.Command("qemu-img", "check", "-f", "vmdk", ours).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img check: our VMDK: %w: %s", err, out)
	}

	timeRatio := oursTime.Seconds() / qemuTime.Seconds()
	sizeRatio := float64(stats.Bytes) / float64(qemuInfo.Size())
	fmt.Printf("  ours      %6.2f s  %7.1f MiB  (%d grains, populated %d MiB)\n", oursTime.Seconds(), mib(stats.Bytes), stats.Grains, stats.PopulatedBytes>>20)
	fmt.Printf("  qemu-img  %6.2f s  %7.1f MiB\n", qemuTime.Seconds(), mib(qemuInfo.Size()))
	fmt.Printf("  time ratio ours/qemu-img %.2f, target ≤ 0.25: %s\n", timeRatio, verdict(timeRatio <= 0.25))
	fmt.Printf("  size ratio ours/qemu-img %.3f, target ≤ 1: %s\n", sizeRatio, verdict(sizeRatio <= 1))
	fmt.Println("  qemu-img compare and check: our VMDK holds the raw disk's bytes and is consistent")
	return nil
}

func writeOurs(raw, out string, size int64, level int) (vmdk.Stats, error) {
	src, err := os.Open(raw)
	if err != nil {
		return vmdk.Stats{}, err
	}
	defer src.Close()
	dst, err := os.Create(out)
	if err != nil {
		return vmdk.Stats{}, err
	}
	defer dst.Close()
	stats, err := vmdk.Write(context.Background(), dst, src, size, vmdk.Options{Level: level})
	if err != nil {
		return stats, fmt.Errorf("our writer: %w", err)
	}
	// No fsync: qemu-img convert does not sync its output either, so both
	// sides end in the page cache.
	return stats, dst.Close()
}

// makeDisk writes a sparse raw disk: runs of 1 MiB, alternately random
// and text, spread evenly, with holes between them.
func makeDisk(path string, size, data int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	const run = 1 << 20
	runs := data / run
	if runs == 0 || data > size {
		return fmt.Errorf("-data must be at least 1 MiB and at most -size")
	}
	stride := size / runs / run * run
	rng := rand.New(rand.NewPCG(1, 2))
	text := bytes.Repeat([]byte("harmony-agent reconciles keepalived, haproxy, etcd and kubeadm; "), run/64+1)[:run]
	buf := make([]byte, run)
	for i := int64(0); i < runs; i++ {
		chunk := text
		if i%2 == 0 {
			for j := 0; j < run; j += 8 {
				v := rng.Uint64()
				for k := 0; k < 8; k++ {
					buf[j+k] = byte(v >> (8 * k))
				}
			}
			chunk = buf
		}
		if _, err := f.WriteAt(chunk, i*stride); err != nil {
			return err
		}
	}
	return f.Sync()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT MET"
}
