package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fsnotify/fsnotify"
)

// watchInputs kicks a pass when a file that another program on the node
// writes and a component reads appears, changes or goes (flanneld's
// lease, the kubelet's credential), so that the component acts at once
// rather than on the next periodic pass. Each file's directory may not
// exist yet: the nearest existing ancestor is watched until it does.
func watchInputs(ctx context.Context, inputs []string, kick func(), log interface{ Warn(string, ...any) }) {
	if len(inputs) == 0 {
		return
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("input files are not watched; the periodic pass still reads them", "err", err)
		return
	}
	defer w.Close()
	watched := map[string]bool{}
	arm := func() {
		for _, p := range inputs {
			dir := filepath.Dir(p)
			for dir != filepath.Dir(dir) {
				if _, err := os.Stat(dir); err == nil {
					break
				}
				dir = filepath.Dir(dir)
			}
			if _, ok := watched[dir]; ok {
				continue
			}
			if err := w.Add(dir); err == nil {
				watched[dir] = true
			}
		}
	}
	arm()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if slices.Contains(inputs, ev.Name) {
				kick()
				continue
			}
			// A directory on the way to an input appeared: watch deeper.
			for _, p := range inputs {
				if ev.Op&fsnotify.Create != 0 && strings.HasPrefix(p, ev.Name+string(filepath.Separator)) {
					arm()
					// The input may have been written before the watch.
					kick()
					break
				}
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			log.Warn("watching input files", "err", err)
		}
	}
}
