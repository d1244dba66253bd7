package controller

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/cluster"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
	"github.com/harmonykaas/harmony/ova/archive"
	"github.com/harmonykaas/harmony/ova/ovf"
)

// MaxOVABytes bounds an uploaded OVA.
const MaxOVABytes = 64 << 30

// uploadTimeout replaces the server's read and write deadlines while an
// OVA is uploaded; uploadAnswerTimeout is the write deadline from the end
// of the upload, for the validation and the answer.
const (
	uploadTimeout       = 6 * time.Hour
	uploadAnswerTimeout = 10 * time.Minute
)

// failedWrites remembers a write error, so that a full disk is told apart
// from a client that went away.
type failedWrites struct {
	w   io.Writer
	err error
}

func (f *failedWrites) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil {
		f.err = err
	}
	return n, err
}

const versionPropertyPrefix = "harmony.version."

var imageNameClean = regexp.MustCompile(`[^a-z0-9-]+`)

// imagesDir holds uploaded OVAs until their import is done.
func (c *Controller) imagesDir() string { return filepath.Join(c.cfg.DataDir, "images") }

func imageKey(provider, name string) string { return provider + "/" + name }

func (c *Controller) handleListImages(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	provider := r.URL.Query().Get("provider")
	list := v1.ImageList{Items: []v1.Image{}}
	err := c.store.View(func(tx *store.Tx) error {
		prefix := ""
		if provider != "" {
			prefix = provider + "/"
		}
		items, err := store.ListJSON[v1.Image](tx, store.Images, prefix)
		list.Items = append(list.Items, items...)
		return err
	})
	if err != nil {
		return storeError(err, "images")
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// handleImportImage receives an OVA, validates it, and imports it into
// the provider as a template in the background. The same file imported
// again is a no-op.
func (c *Controller) handleImportImage(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	providerName := r.URL.Query().Get("provider")
	var provider v1.Provider
	if err := c.store.View(func(tx *store.Tx) error { return tx.Get(store.Providers, providerName, &provider) }); err != nil {
		e := storeError(err, fmt.Sprintf("provider %q", providerName))
		e.field = "provider"
		return e
	}
	// The server's deadlines fit API calls, not an OVA of gigabytes: this
	// request gets its own, and a fresh write deadline once the body is in.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(uploadTimeout))
	_ = rc.SetWriteDeadline(time.Now().Add(uploadTimeout))
	if err := os.MkdirAll(c.imagesDir(), 0o700); err != nil {
		return internalError("images directory", err)
	}
	f, err := os.CreateTemp(c.imagesDir(), spoolPattern)
	if err != nil {
		return internalError("spool", err)
	}
	spool := f.Name()
	keep := false
	defer func() {
		if !keep {
			os.Remove(spool)
		}
	}()
	h := sha256.New()
	disk := &failedWrites{w: f}
	_, err = io.Copy(io.MultiWriter(disk, h), r.Body)
	if cerr := f.Close(); err == nil && cerr != nil {
		err, disk.err = cerr, cerr
	}
	switch {
	case disk.err != nil:
		return internalError("spool the upload", disk.err)
	case err != nil:
		return badInput(fmt.Errorf("upload: %w", err))
	}
	_ = rc.SetWriteDeadline(time.Now().Add(uploadAnswerTimeout))
	sum := hex.EncodeToString(h.Sum(nil))

	img, desc, aerr := c.describeOVA(r.Context(), spool)
	if aerr != nil {
		return aerr
	}
	img.Provider, img.SHA256 = providerName, sum
	key := imageKey(providerName, img.Name)
	if e := c.checkImageFits(r.Context(), providerName, desc); e != nil {
		return e
	}

	var existing v1.Image
	var op v1.Operation
	now := c.now().UTC()
	err = c.store.Update(func(tx *store.Tx) error {
		if err := tx.Get(store.Images, key, &existing); err == nil {
			return nil
		}
		final := filepath.Join(c.imagesDir(), sum+".ova")
		if err := os.Rename(spool, final); err != nil {
			return err
		}
		spool = final
		img.State = v1.ImageImporting
		op = v1.Operation{Kind: v1.OperationImport, Image: key, CreatedAt: now}
		if err := tx.AddOperation(&op); err != nil {
			return err
		}
		return tx.Put(store.Images, key, importRecord{Image: *img, OVA: spool, OVFNetwork: desc.Network, Operation: op.ID})
	})
	if err != nil {
		return storeError(err, "image")
	}
	if existing.Name != "" {
		if existing.SHA256 != sum {
			return refuse(http.StatusConflict, v1.CodeConflict,
				"provider %q already has an image %q from a different file (sha256 %s); rebuild with a new version", providerName, img.Name, existing.SHA256)
		}
		writeJSON(w, http.StatusOK, existing)
		return nil
	}
	keep = true
	c.log.Info("image import started", "image", img.Name, "provider", providerName, "sha256", sum, "by", who.name, "operation", op.ID)
	c.imports.start(key)
	writeJSON(w, http.StatusAccepted, op)
	return nil
}

// spoolPattern names an upload in progress; a crash leaves it behind.
const spoolPattern = "upload-*.ova"

// removeStaleSpool removes, at start, uploads a crash cut short and OVAs
// that no unfinished import needs any more: nothing else would.
func (c *Controller) removeStaleSpool() {
	files, _ := filepath.Glob(filepath.Join(c.imagesDir(), "*.ova"))
	if len(files) == 0 {
		return
	}
	needed := map[string]bool{}
	err := c.store.View(func(tx *store.Tx) error {
		recs, err := store.ListJSON[importRecord](tx, store.Images, "")
		for _, r := range recs {
			if r.State == v1.ImageImporting {
				needed[r.OVA] = true
			}
		}
		return err
	})
	if err != nil {
		c.log.Error("stale uploads: read the image records; keeping every file", "err", err)
		return
	}
	for _, f := range files {
		if needed[f] {
			continue
		}
		if err := os.Remove(f); err != nil {
			c.log.Warn("remove a stale upload", "path", f, "err", err)
			continue
		}
		c.log.Info("removed a stale upload", "path", f)
	}
}

// checkImageFits refuses, before anything goes to vCenter, an OVA whose
// disks the provider's template datastore cannot hold: a declared
// capacity above the datastore's size, or more data than it has free
// (disks are imported thin, so their data is what they take).
func (c *Controller) checkImageFits(ctx context.Context, providerName string, desc *ovf.Descriptor) *apiError {
	provider, err := c.provider(providerName)
	if err != nil {
		e := storeError(err, fmt.Sprintf("provider %q", providerName))
		e.field = "provider"
		return e
	}
	ctx, cancel := context.WithTimeout(ctx, providerConnectTimeout)
	defer cancel()
	s, err := c.sessions.get(ctx, provider)
	if err != nil {
		e := refuse(http.StatusBadGateway, v1.CodeVCenterUnreachable, "%v", err)
		e.field = "provider"
		return e
	}
	dsName := provider.Datastores.OS[0]
	capacity, free, err := s.DatastoreSpace(ctx, dsName)
	if err != nil {
		e := refuse(http.StatusBadGateway, v1.CodeVCenterUnreachable, "%v", err)
		e.field = "datastores.os"
		return e
	}
	var data int64
	for _, d := range desc.Disks {
		if d.Capacity > capacity {
			e := refuse(http.StatusUnprocessableEntity, v1.CodePrecheckFailed,
				"disk %s declares a capacity of %d bytes; datastore %s holds %d bytes in all", d.ID, d.Capacity, dsName, capacity)
			e.field = "ova"
			return e
		}
		data += cmp.Or(d.PopulatedSize, d.FileSize)
	}
	if data > free {
		e := refuse(http.StatusUnprocessableEntity, v1.CodePrecheckFailed,
			"the OVA's disks hold %d bytes of data; datastore %s has %d bytes free", data, dsName, free)
		e.field = "ova"
		return e
	}
	return nil
}

// importRecord is an image with what its import needs to resume after a
// restart.
type importRecord struct {
	v1.Image
	OVA        string `json:"ova,omitempty"`
	OVFNetwork string `json:"ovfNetwork,omitempty"`
	Operation  string `json:"operation,omitempty"`
}

// describeOVA validates the archive and reads the image's role, version
// and component versions from its ProductSection properties.
func (c *Controller) describeOVA(ctx context.Context, path string) (*v1.Image, *ovf.Descriptor, *apiError) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, refuse(http.StatusInternalServerError, v1.CodeInternal, "%v", err)
	}
	defer f.Close()
	contents, err := archive.Validate(ctx, f)
	if err != nil {
		return nil, nil, fieldRefusal("ova", "not a valid OVA: %v", err)
	}
	d := contents.Descriptor
	img := &v1.Image{Versions: map[string]string{}}
	for _, p := range d.Properties {
		switch {
		case p.Key == "harmony.image.role":
			img.Role = p.Default
		case p.Key == "harmony.image.version":
			img.Version = p.Default
		case strings.HasPrefix(p.Key, versionPropertyPrefix):
			img.Versions[strings.TrimPrefix(p.Key, versionPropertyPrefix)] = p.Default
		}
	}
	if img.Role == "" || img.Version == "" {
		return nil, nil, fieldRefusal("ova", "the OVF has no harmony.image.role or harmony.image.version property: not a Harmony image")
	}
	for _, k := range []string{"kubernetes", "kubernetes-previous"} {
		if v := img.Versions[k]; v != "" && v != "absent" {
			img.KubernetesVersions = append(img.KubernetesVersions, v)
		}
	}
	img.Name = strings.Trim(imageNameClean.ReplaceAllString(strings.ToLower("harmony-"+img.Role+"-"+img.Version), "-"), "-")
	if len(img.Name) > 63 {
		img.Name = strings.TrimRight(img.Name[:63], "-")
	}
	return img, d, nil
}

// runImport imports one image whose record says Importing, and records
// the outcome. It is what a restart resumes too: ImportTemplate adopts a
// finished template and redoes a half-made one.
func (c *Controller) runImport(ctx context.Context, key string) {
	var rec importRecord
	if err := c.store.View(func(tx *store.Tx) error { return tx.Get(store.Images, key, &rec) }); err != nil {
		c.log.Error("image import: record", "image", key, "err", err)
		return
	}
	if rec.State != v1.ImageImporting {
		return
	}
	log := c.log.With("image", rec.Name, "provider", rec.Provider)
	finish := func(tmpl *vsphere.Template, importErr error) {
		now := c.now().UTC()
		if importErr != nil && ctx.Err() != nil {
			return // shutting down: the next start resumes
		}
		uerr := c.store.Update(func(tx *store.Tx) error {
			var op v1.Operation
			if err := tx.Get(store.Operations, rec.Operation, &op); err == nil {
				op.State, op.FinishedAt = v1.OperationSucceeded, now
				if importErr != nil {
					op.State, op.Message = v1.OperationFailed, importErr.Error()
				}
				if err := tx.Put(store.Operations, op.ID, op); err != nil {
					return err
				}
			}
			if importErr != nil {
				// Failed imports leave no record, so the admin can try again.
				return tx.Delete(store.Images, key)
			}
			img := rec.Image
			img.State, img.Template, img.Snapshot, img.ImportedAt = v1.ImageReady, tmpl.Path, tmpl.Snapshot, now
			return tx.Put(store.Images, key, img)
		})
		if uerr != nil {
			log.Error("image import: record the outcome", "err", uerr)
		}
		os.Remove(rec.OVA)
		c.hub.notify(operationKey(rec.Operation))
		if importErr != nil {
			log.Error("image import failed", "err", importErr)
		} else {
			log.Info("image imported", "template", tmpl.Path, "snapshot", tmpl.Snapshot)
		}
	}
	provider, err := c.provider(rec.Provider)
	if err != nil {
		finish(nil, fmt.Errorf("provider %s: %w", rec.Provider, err))
		return
	}
	s, err := c.sessions.get(ctx, provider)
	if err != nil {
		finish(nil, err)
		return
	}
	var lastReport time.Time
	tmpl, err := s.ImportTemplate(ctx, vsphere.TemplateImport{
		OVA: rec.OVA, Name: rec.Name, OVFNetwork: rec.OVFNetwork, Log: log,
		Progress: func(n int64) {
			if time.Since(lastReport) < 2*time.Second {
				return
			}
			lastReport = time.Now()
			_ = c.store.Update(func(tx *store.Tx) error {
				var op v1.Operation
				if err := tx.Get(store.Operations, rec.Operation, &op); err != nil {
					return err
				}
				op.Message = fmt.Sprintf("uploaded %d MiB to vCenter", n>>20)
				return tx.Put(store.Operations, op.ID, op)
			})
			c.hub.notify(operationKey(rec.Operation))
		},
	})
	finish(tmpl, err)
}

// importRunner runs image imports in the background for as long as the
// controller serves; Serve resumes the unfinished ones.
type importRunner struct {
	run func(ctx context.Context, key string)
	mu  sync.Mutex
	ctx context.Context
	wg  sync.WaitGroup
}

// begin runs the keys' imports now and every later start under ctx.
func (im *importRunner) begin(ctx context.Context, keys []string) {
	im.mu.Lock()
	im.ctx = ctx
	im.mu.Unlock()
	for _, key := range keys {
		im.start(key)
	}
}

func (im *importRunner) start(key string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.ctx == nil {
		return // begin resumes it
	}
	im.wg.Add(1)
	go func() {
		defer im.wg.Done()
		im.run(im.ctx, key)
	}()
}

// wait returns when every import has stopped after ctx ended.
func (im *importRunner) wait() { im.wg.Wait() }

// pendingImports lists images whose import has not finished.
func (c *Controller) pendingImports() ([]string, error) {
	var keys []string
	err := c.store.View(func(tx *store.Tx) error {
		recs, err := store.ListJSON[importRecord](tx, store.Images, "")
		for _, r := range recs {
			if r.State == v1.ImageImporting {
				keys = append(keys, imageKey(r.Provider, r.Name))
			}
		}
		return err
	})
	return keys, err
}

// readyImage finds a provider's image by name.
func readyImage(tx *store.Tx, provider, name string) (*v1.Image, error) {
	var img v1.Image
	if err := tx.Get(store.Images, imageKey(provider, name), &img); err != nil {
		return nil, err
	}
	if img.State != v1.ImageReady {
		return nil, fmt.Errorf("image %q is %s: %w", name, img.State, cluster.ErrImageNotReady)
	}
	return &img, nil
}
