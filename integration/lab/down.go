package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/integration/lab/body"
)

// Down removes everything a lab in stateDir made: its processes, network
// namespaces, link and files. It works from lab.json, and also from the
// names alone when Up died before writing it, so it is safe after a crash
// and when there is no lab at all. Files are removed only when lab.json
// is there to say they are the lab's.
func Down(ctx context.Context, stateDir string, log *slog.Logger) error {
	release, err := claim(stateDir)
	if err != nil {
		return fmt.Errorf("lab down: %w", err)
	}
	defer release()
	return down(ctx, stateDir, log)
}

// down is Down for a caller that holds the state directory's claim.
func down(ctx context.Context, stateDir string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return fmt.Errorf("state dir %q: %w", stateDir, err)
	}
	r, err := loadRecord(abs)
	if err != nil {
		return err
	}
	found := r != nil
	if r == nil {
		r = newRecord(abs)
	}

	// Processes first, so that nothing rewrites files or holds a
	// namespace while it goes: lab serve stops its bodies on SIGTERM.
	for _, p := range r.Procs {
		if p.Alive() {
			log.Info("lab down: stop", "process", p.Name, "pid", p.PID)
			killAll(ctx, []int{p.PID}, 30*time.Second)
		}
	}
	var errs []error
	// Bodies that outlived a killed lab serve, from their own records.
	if found {
		bodies, _ := filepath.Glob(filepath.Join(r.vmsDir(), "*", bodyDirName))
		for _, dir := range bodies {
			if err := body.Cleanup(ctx, dir, log); err != nil {
				errs = append(errs, err)
			}
		}
	}
	namespaces := labNamespaces(ctx, r.ID)
	for _, ns := range namespaces {
		if pids := netnsPIDs(ctx, ns); len(pids) > 0 {
			log.Info("lab down: stop processes", "netns", ns, "count", len(pids))
			killAll(ctx, pids, 10*time.Second)
		}
	}
	for _, ns := range namespaces {
		if err := ip(ctx, "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	// The uplink is one end of a veth whose other end was in the switch's
	// namespace: it goes with that namespace, as soon as the kernel has
	// finished tearing it down, which may be now.
	if linkExists(ctx, nil, r.Uplink) {
		if err := ip(ctx, "link", "del", r.Uplink); err != nil && linkExists(ctx, nil, r.Uplink) {
			errs = append(errs, err)
		}
	}
	if len(namespaces) > 0 || found {
		log.Info("lab down: removed", "namespaces", len(namespaces), "state_dir", abs)
	}
	// Files only with a record: without one, the directory may be
	// anything (a mistyped --state /etc holds an "hosts" entry too).
	if found {
		if err := body.ReleaseImages(ctx, r.imagesDir()); err != nil {
			errs = append(errs, err)
		}
	}
	// Never remove files something may still use: a body that would not
	// stop has its data disk bound in.
	if found && len(errs) == 0 {
		if err := removeFiles(abs, r.CreatedDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// labNamespaces lists the namespaces named for lab id, whether or not the
// record lists them.
func labNamespaces(ctx context.Context, id string) []string {
	var names []string
	for _, ns := range listNetns(ctx) {
		if strings.HasPrefix(ns, "hlab-"+id+"-") {
			names = append(names, ns)
		}
	}
	return names
}

// labEntries are what Up makes inside the state directory.
var labEntries = []string{"vms", "datastores", "images", "images.json", "controller", "prometheus", "credentials", "logs", "summary.json", recordName}

// removeFiles removes the lab's files: the whole directory if the lab
// made it, else only the lab's own entries.
func removeFiles(dir string, whole bool) error {
	if whole {
		return os.RemoveAll(dir)
	}
	var errs []error
	for _, e := range labEntries {
		if err := os.RemoveAll(filepath.Join(dir, e)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
