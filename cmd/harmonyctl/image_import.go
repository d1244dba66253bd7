package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func imageImportCommand(g *globals) *cobra.Command {
	var provider string
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "import FILE.ova --provider P",
		Short: "Import a golden OVA into a provider as a VM template (a no-op if already imported)",
		Long: `Upload an OVA to the controller, which validates it, imports it into the
provider's folder (templates/) with govmomi's importer, snapshots it so that
clones can be linked, marks it a template, and records its component
versions. The same file imported again is a no-op.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			sum, size, err := fileSHA256(args[0])
			if err != nil {
				return err
			}
			images, err := c.Images(cmd.Context(), provider)
			if err != nil {
				return err
			}
			for _, img := range images {
				if img.SHA256 == sum && img.State == v1.ImageReady {
					fmt.Fprintf(os.Stderr, "%s is already imported into %s as %s (template %s)\n", args[0], provider, img.Name, img.Template)
					return nil
				}
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			var sent atomic.Int64
			done := make(chan struct{})
			defer close(done)
			go func() {
				t := time.NewTicker(2 * time.Second)
				defer t.Stop()
				start, told := time.Now(), false
				for {
					select {
					case <-done:
						return
					case <-t.C:
						n := sent.Load()
						if n < size {
							rate := float64(n) / time.Since(start).Seconds()
							fmt.Fprintf(os.Stderr, "  uploading: %d of %d MiB (%d%%, %.1f MiB/s)\n", n>>20, size>>20, n*100/max(size, 1), rate/(1<<20))
						} else if !told {
							// The answer comes after the controller has read
							// the whole OVA back: say why there is a pause.
							fmt.Fprintf(os.Stderr, "  uploaded %d MiB in %s; the controller is validating the OVA\n", size>>20, time.Since(start).Round(time.Second))
							told = true
						}
					}
				}
			}()
			op, _, err := c.ImportImage(cmd.Context(), provider, io.TeeReader(f, countWriter{&sent}), size)
			if err != nil {
				return err
			}
			if op == nil {
				fmt.Fprintf(os.Stderr, "%s is already imported into %s\n", args[0], provider)
				return nil
			}
			return wf.finish(cmd.Context(), c, *op)
		},
	}
	cmd.Flags().StringVar(&provider, "provider", "", "provider to import into")
	_ = cmd.MarkFlagRequired("provider")
	addWaitFlags(cmd, &wf, true)
	return cmd
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

type countWriter struct{ n *atomic.Int64 }

func (c countWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}
