package components

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// FetchRelease downloads one official Kubernetes binary (Release.URL +
// "/" + binary) into dir/binary, mode 0755, and checks it against the
// sha256 pinned in the pin file. A binary with no pinned sha256 is refused
// before anything is downloaded: an unchecked binary must never reach an
// image. The file appears only once it has been checked (it is written to
// a temporary file in dir and renamed), so a failed or killed download
// leaves nothing a later run would trust.
func (k Kubernetes) FetchRelease(ctx context.Context, client *http.Client, binary, dir string) error {
	if !slices.Contains(KubernetesBinaries, binary) {
		return fmt.Errorf("kubernetes %s: %q is not one of %s", k.Version, binary, strings.Join(KubernetesBinaries, ", "))
	}
	want := k.Release.SHA256[binary]
	if want == "" {
		return fmt.Errorf("kubernetes %s: release.sha256.%s is not pinned in images/components.yaml; refusing an unchecked download", k.Version, binary)
	}
	if !sha256Hex.MatchString(want) {
		return fmt.Errorf("kubernetes %s: release.sha256.%s %q: want 64 lowercase hex digits", k.Version, binary, want)
	}
	url := strings.TrimSuffix(k.Release.URL, "/") + "/" + binary
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("kubernetes %s: %s: %w", k.Version, binary, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("kubernetes %s: download %s: %w", k.Version, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kubernetes %s: download %s: %s", k.Version, url, resp.Status)
	}

	tmp, err := os.CreateTemp(dir, "."+binary+".download-*")
	if err != nil {
		return fmt.Errorf("kubernetes %s: %s: %w", k.Version, binary, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename this is a no-op
	sum := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, sum), resp.Body); err != nil {
		tmp.Close()
		return fmt.Errorf("kubernetes %s: download %s: %w", k.Version, url, err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != want {
		tmp.Close()
		return fmt.Errorf("kubernetes %s: %s has sha256 %s, the pin file says %s; refusing it", k.Version, url, got, want)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("kubernetes %s: %s: %w", k.Version, binary, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("kubernetes %s: %s: %w", k.Version, binary, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, binary)); err != nil {
		return fmt.Errorf("kubernetes %s: %s: %w", k.Version, binary, err)
	}
	return nil
}

// KubernetesVersion returns the pinned release with this version.
func (p *Pins) KubernetesVersion(version string) (Kubernetes, error) {
	var have []string
	for _, k := range p.Kubernetes {
		if k.Version == version {
			return k, nil
		}
		have = append(have, k.Version)
	}
	return Kubernetes{}, fmt.Errorf("kubernetes %s: not pinned (the pin file has %s)", version, strings.Join(have, ", "))
}
