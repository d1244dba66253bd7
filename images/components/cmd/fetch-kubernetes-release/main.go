// Command fetch-kubernetes-release downloads the official kubeadm,
// kubelet and kubectl of one pinned Kubernetes version from dl.k8s.io and
// checks each against the sha256 in images/components.yaml. It is the
// "release" source of the pin file, for machines with internet; this one
// has none, so here the binaries are built from the module instead
// (scripts/build-kubernetes.sh).
//
//	fetch-kubernetes-release -pins images/components.yaml -version v1.34.2 -dir DIR
//
// A binary already in DIR with the pinned sha256 is kept; one without a
// pinned sha256 is refused.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/harmonykaas/harmony/images/components"
)

func main() {
	pinsPath := flag.String("pins", "images/components.yaml", "the pin file")
	version := flag.String("version", "", "the pinned Kubernetes version, e.g. v1.34.2")
	dir := flag.String("dir", "", "directory to put kubeadm, kubelet and kubectl in")
	timeout := flag.Duration("timeout", 10*time.Minute, "limit for each download")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, log, *pinsPath, *version, *dir, *timeout); err != nil {
		log.Error("fetch-kubernetes-release failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, pinsPath, version, dir string, timeout time.Duration) error {
	if version == "" {
		return errors.New("-version: required")
	}
	if dir == "" {
		return errors.New("-dir: required")
	}
	pins, err := components.Load(pinsPath)
	if err != nil {
		return err
	}
	k, err := pins.KubernetesVersion(version)
	if err != nil {
		return err
	}
	// Refuse up front, before downloading anything, if any pin is missing.
	for _, b := range components.KubernetesBinaries {
		if k.Release.SHA256[b] == "" {
			return fmt.Errorf("kubernetes %s: release.sha256.%s is not pinned in %s; refusing an unchecked download", version, b, pinsPath)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	client := &http.Client{Timeout: timeout}
	for _, b := range components.KubernetesBinaries {
		path := filepath.Join(dir, b)
		if have, err := fileSHA256(path); err == nil && have == k.Release.SHA256[b] {
			log.Info("already present", "binary", path, "version", version)
			continue
		}
		log.Info("downloading", "binary", b, "version", version, "from", k.Release.URL)
		if err := k.FetchRelease(ctx, client, b, dir); err != nil {
			return err
		}
	}
	fmt.Println(dir)
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
