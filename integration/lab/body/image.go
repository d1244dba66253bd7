package body

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/ctxio"
	"github.com/harmonykaas/harmony/ova/vmdk"
)

// RootPartition is the GPT name of the node image's root file system.
const RootPartition = "root"

// Image is a node image ready to be the lower layer of bodies: its disk as
// a raw file in the cache, and its root partition mounted read-only.
type Image struct {
	OVA    string // the OVA it came from
	SHA256 string // of the OVA, hex; names its cache directory
	Raw    string // the raw disk
	Root   string // the read-only mount of the root partition
	Part   Partition
}

// FindOVA returns the newest file named PREFIX-*.ova in dir, for example
// FindOVA(dir, "harmony-node").
func FindOVA(dir, prefix string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, prefix+"-*.ova"))
	if err != nil {
		return "", err
	}
	var newest string
	var newestTime time.Time
	for _, m := range matches {
		fi, err := os.Stat(m)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if newest == "" || fi.ModTime().After(newestTime) {
			newest, newestTime = m, fi.ModTime()
		}
	}
	if newest == "" {
		return "", fmt.Errorf("no %s-*.ova in %s", prefix, dir)
	}
	return newest, nil
}

// PrepareImage makes the OVA's root file system available read-only under
// cacheDir. The raw disk is cached by the OVA's SHA-256, and the OVA's sum
// by its path, size, modification time and inode, so a second call for the
// same OVA reads neither: it finds the raw disk and its mount and returns.
// Calls from several processes are serialized by a lock file per image.
func PrepareImage(ctx context.Context, ova, cacheDir string, log *slog.Logger) (*Image, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ova, err := filepath.Abs(ova)
	if err != nil {
		return nil, err
	}
	cacheDir, err = filepath.Abs(cacheDir)
	if err != nil {
		return nil, err
	}
	sum, err := ovaSum(ctx, ova, cacheDir)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cacheDir, sum)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, "lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()

	img := &Image{OVA: ova, SHA256: sum, Raw: filepath.Join(dir, "disk.raw"), Root: filepath.Join(dir, "root")}
	if _, err := os.Stat(img.Raw); errors.Is(err, os.ErrNotExist) {
		start := time.Now()
		if err := convertOVA(ctx, ova, img.Raw); err != nil {
			return nil, err
		}
		log.Info("converted the OVA's disk to raw", "ova", ova, "raw", img.Raw, "took", time.Since(start).Round(time.Millisecond))
	} else if err != nil {
		return nil, err
	}
	f, err := os.Open(img.Raw)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		img.Part, err = findPartition(f, fi.Size(), RootPartition)
	}
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", img.Raw, err)
	}

	if err := os.MkdirAll(img.Root, 0o755); err != nil {
		return nil, err
	}
	if m, ok, err := MountAt(img.Root); err != nil {
		return nil, err
	} else if ok {
		if m.FSType != "ext4" {
			return nil, fmt.Errorf("%s: already mounted, as %s, not the image's ext4", img.Root, m.FSType)
		}
		log.Debug("image already mounted", "root", img.Root)
		return img, nil
	}
	// mount(8) sets up the loop device with autoclear: unmounting frees it.
	opts := fmt.Sprintf("loop,ro,offset=%d,sizelimit=%d", img.Part.Offset, img.Part.Size)
	if out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", opts, img.Raw, img.Root).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mount %s at %s: %w: %s", img.Raw, img.Root, err, strings.TrimSpace(string(out)))
	}
	log.Info("mounted the image's root read-only", "root", img.Root, "offset", img.Part.Offset)
	return img, nil
}

// Release unmounts the image's root. Bodies still running from it keep
// their own copy of the mount; the loop device goes when the last one ends.
func (img *Image) Release(ctx context.Context) error {
	return unmountAll(ctx, img.Root)
}

// ReleaseImages unmounts every image root under cacheDir, for `lab down`.
// The raw disks stay: the next `lab up` reuses them.
func ReleaseImages(ctx context.Context, cacheDir string) error {
	cacheDir, err := filepath.Abs(cacheDir)
	if err != nil {
		return err
	}
	return unmountAll(ctx, cacheDir)
}

// sumRecord remembers an OVA's SHA-256 for as long as the file is the same.
type sumRecord struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	ModTime int64  `json:"modTimeNs"`
	Inode   uint64 `json:"inode"`
	SHA256  string `json:"sha256"`
}

func ovaSum(ctx context.Context, ova, cacheDir string) (string, error) {
	fi, err := os.Stat(ova)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("%s: no inode", ova)
	}
	want := sumRecord{Path: ova, Size: fi.Size(), ModTime: fi.ModTime().UnixNano(), Inode: st.Ino}
	key := sha256.Sum256([]byte(ova))
	recPath := filepath.Join(cacheDir, "sums", hex.EncodeToString(key[:16])+".json")
	if data, err := os.ReadFile(recPath); err == nil {
		var rec sumRecord
		if json.Unmarshal(data, &rec) == nil && len(rec.SHA256) == 64 {
			got := rec
			got.SHA256 = ""
			if got == want {
				return rec.SHA256, nil
			}
		}
	}
	f, err := os.Open(ova)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, ctxio.Reader(ctx, f)); err != nil {
		return "", fmt.Errorf("hash %s: %w", ova, err)
	}
	want.SHA256 = hex.EncodeToString(h.Sum(nil))
	data, err := json.Marshal(want)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(recPath), 0o700); err != nil {
		return "", err
	}
	if err := atomicfile.Write(recPath, data, 0o600); err != nil {
		return "", err
	}
	return want.SHA256, nil
}

// convertOVA writes the virtual disk of the OVA's first .vmdk to raw, as a
// sparse file: chunks that read as zeros are not written. Inflating the
// grains is the cost, so each CPU inflates every n-th chunk with a reader
// of its own (a vmdk.Reader serializes its reads).
func convertOVA(ctx context.Context, ova, raw string) error {
	f, err := os.Open(ova)
	if err != nil {
		return err
	}
	defer f.Close()
	off, size, name, err := findVMDK(f)
	if err != nil {
		return fmt.Errorf("%s: %w", ova, err)
	}
	rd, err := vmdk.NewReader(io.NewSectionReader(f, off, size), size)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", ova, name, err)
	}
	tmp := raw + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // after a successful rename, there is nothing to remove
	defer out.Close()
	capacity := rd.Capacity()
	if err := out.Truncate(capacity); err != nil {
		return fmt.Errorf("size %s: %w", tmp, err)
	}
	const chunk = 1 << 20
	workers := max(1, min(runtime.NumCPU(), 8))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		r := rd
		if w > 0 {
			if r, err = vmdk.NewReader(io.NewSectionReader(f, off, size), size); err != nil {
				return fmt.Errorf("%s: %s: %w", ova, name, err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, chunk)
			for pos := int64(w) * chunk; pos < capacity; pos += int64(workers) * chunk {
				if err := ctx.Err(); err != nil {
					errs[w] = err
					return
				}
				b := buf[:min(chunk, capacity-pos)]
				if _, err := r.ReadAt(b, pos); err != nil && !errors.Is(err, io.EOF) {
					errs[w] = fmt.Errorf("%s: %s at %d: %w", ova, name, pos, err)
					return
				}
				if isZero(b) {
					continue
				}
				if _, err := out.WriteAt(b, pos); err != nil {
					errs[w] = fmt.Errorf("write %s: %w", tmp, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, raw); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}

// findVMDK returns where the first .vmdk member's bytes lie in the OVA.
// A regular tar member is stored contiguously, right after its header:
// after tar's Next, the file's position is where its data starts.
func findVMDK(f *os.File) (off, size int64, name string, err error) {
	tr := tar.NewReader(f)
	var seen []string
	for len(seen) < 64 {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, 0, "", fmt.Errorf("read tar: %w", err)
		}
		seen = append(seen, hdr.Name)
		if !strings.HasSuffix(strings.ToLower(hdr.Name), ".vmdk") {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return 0, 0, "", fmt.Errorf("%s: tar type %q, want a regular file", hdr.Name, hdr.Typeflag)
		}
		pos, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return 0, 0, "", err
		}
		return pos, hdr.Size, hdr.Name, nil
	}
	sort.Strings(seen)
	return 0, 0, "", fmt.Errorf("no .vmdk member (have %v)", seen)
}

// lockFile takes an exclusive flock on path, polling so that ctx bounds the
// wait.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
}
