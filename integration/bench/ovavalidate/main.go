// Command ovavalidate measures what archive.Validate costs on hostile
// input: an OVA of GNU long-name entries (1 MiB names, the shape that once
// made the controller use 25 times an upload's size and answer with an
// error bigger than the upload). The reference, measured in the same run,
// is a well-formed OVA of about the same size, made by the product's own
// writer (ova.Assemble) from random, incompressible data: what an honest
// upload of that size costs.
//
//	make bench
package main

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/ova"
	"github.com/harmonykaas/harmony/ova/archive"
	"github.com/harmonykaas/harmony/ova/ovf"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench ovavalidate:", err)
		os.Exit(1)
	}
}

func run() error {
	size := flag.Int64("size", 20<<20, "approximate size of each OVA in bytes")
	flag.Parse()
	dir, err := os.MkdirTemp("", "harmony-bench-ovavalidate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	good := filepath.Join(dir, "good.ova")
	if err := wellFormed(good, *size, dir); err != nil {
		return err
	}
	crafted := filepath.Join(dir, "crafted.ova")
	if err := longNames(crafted, *size); err != nil {
		return err
	}
	fmt.Printf("OVA validation benchmark: %d CPUs, %s\n", runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("%-34s %10s %10s %14s %12s\n", "input", "size MiB", "time ms", "allocated MiB", "error bytes")
	for _, c := range []struct{ name, path string }{
		{"reference: well-formed OVA", good},
		{"crafted: 1 MiB GNU long names", crafted},
	} {
		if err := measure(c.name, c.path); err != nil {
			return err
		}
	}
	return nil
}

func measure(name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, _ := f.Stat()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, verr := archive.Validate(context.Background(), f)
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	errBytes := 0
	if verr != nil {
		errBytes = len(verr.Error())
	}
	fmt.Printf("%-34s %10.1f %10.1f %14.1f %12d\n", name, float64(info.Size())/(1<<20),
		float64(elapsed.Microseconds())/1000, float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), errBytes)
	return nil
}

// wellFormed writes an OVA whose one disk holds size bytes of random data.
func wellFormed(out string, size int64, dir string) error {
	raw := filepath.Join(dir, "disk.raw")
	data := make([]byte, size)
	rand.Read(data)
	if err := os.WriteFile(raw, data, 0o600); err != nil {
		return err
	}
	_, err := ova.Assemble(context.Background(), ova.Options{
		Output:     out,
		Descriptor: ovf.Descriptor{Name: "bench", CPUs: 1, MemoryMiB: 512, OSType: "debian12_64Guest", Network: "nic0"},
		Disks:      []ova.SourceDisk{{ID: "system", RawPath: raw}},
		ModTime:    time.Unix(1700000000, 0),
	})
	return err
}

// longNames writes about size bytes of entries with 1 MiB GNU long names.
func longNames(out string, size int64) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for i := int64(0); i < size>>20; i++ {
		name := strings.Repeat(string(rune('a'+i%26)), 1<<20-1024) // archive/tar takes up to 1 MiB
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 1, Format: tar.FormatGNU}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte("x")); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
