package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
)

// SnapshotDir is where, under the data directory, a member keeps its
// snapshots: on the data disk, which an upgrade by reimage moves across.
// Each is what `etcdctl snapshot save` writes (the database, then its
// SHA-256), so `etcdctl snapshot restore` takes it as it is.
const SnapshotDir = "snapshots"

// snapshotRetryAfter is how long after a failed snapshot the next try
// waits.
const snapshotRetryAfter = 5 * time.Minute

// snapshotFile is one complete snapshot in the directory.
type snapshotFile struct {
	name  string
	taken time.Time
}

// snapshotState is what the directory held after a pass, for the
// metrics and the agent's report: when each snapshot was taken, oldest
// first.
type snapshotState struct {
	taken []time.Time
}

// newest is when the newest was taken; zero when there is none.
func (s snapshotState) newest() time.Time {
	if len(s.taken) == 0 {
		return time.Time{}
	}
	return s.taken[len(s.taken)-1]
}

// snapshots takes a snapshot from the local member when the newest one is
// an interval old, or none covers since (the role's request), and keeps
// the newest few. A failure is returned for the status and metrics; it
// does not fail the pass, since etcd itself runs. Settings that turn
// snapshots off leave the ones taken.
func (c *Component) snapshots(ctx context.Context, cl *Client, dir string, sched v1.EtcdSnapshotSchedule, since time.Time, dbSize uint64) ([]string, snapshotState, error) {
	if !sched.Enabled {
		c.snapshotErr = nil
		files, _, err := listSnapshots(dir)
		return nil, stateOf(files), err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, snapshotState{}, fmt.Errorf("snapshot directory: %w", err)
	}
	files, leftovers, err := listSnapshots(dir)
	if err != nil {
		return nil, snapshotState{}, err
	}
	var actions []string
	for _, name := range leftovers {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return actions, stateOf(files), fmt.Errorf("remove an unfinished snapshot: %w", err)
		}
		actions = append(actions, "removed unfinished snapshot "+name)
	}
	now := c.cfg.Now().UTC()
	var takeErr error
	asked := !since.IsZero() && !since.Equal(c.snapshotServed) &&
		!slices.ContainsFunc(files, func(f snapshotFile) bool { return v1.EtcdSnapshotCovers(f.taken, since) })
	if (asked || snapshotDue(files, now, sched.Interval)) && !now.Before(c.snapshotRetry) {
		var f snapshotFile
		var size int64
		f, size, takeErr = c.takeSnapshot(ctx, cl, dir, now, dbSize)
		c.snapshotErr = takeErr
		if takeErr != nil {
			c.snapshotRetry = now.Add(snapshotRetryAfter)
		} else {
			c.snapshotServed = since
			files = withSnapshot(files, f)
			actions = append(actions, fmt.Sprintf("took snapshot %s (%d bytes)", f.name, size))
		}
	}
	for len(files) > sched.Keep {
		if err := os.Remove(filepath.Join(dir, files[0].name)); err != nil {
			return actions, stateOf(files), errors.Join(takeErr, fmt.Errorf("remove an old snapshot: %w", err))
		}
		actions = append(actions, "removed snapshot "+files[0].name)
		files = files[1:]
	}
	return actions, stateOf(files), takeErr
}

func stateOf(files []snapshotFile) snapshotState {
	var s snapshotState
	for _, f := range files {
		s.taken = append(s.taken, f.taken)
	}
	return s
}

// snapshotDue reports whether the newest snapshot is interval old. One
// dated in the future (the clock was set back) does not count, or none
// would be taken until the clock caught up.
func snapshotDue(files []snapshotFile, now time.Time, interval time.Duration) bool {
	for _, f := range slices.Backward(files) {
		if !f.taken.After(now) {
			return now.Sub(f.taken) >= interval
		}
	}
	return true
}

// listSnapshots returns the complete snapshots in dir, oldest first, and
// the temporary files of writes that never finished. Other entries are
// not the component's and are left alone. A missing dir holds none.
func listSnapshots(dir string) ([]snapshotFile, []string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list snapshots: %w", err)
	}
	var files []snapshotFile
	var leftovers []string
	for _, e := range entries {
		name := e.Name()
		if atomicfile.IsLeftover(name) && etcdsnapshot.HasPrefix(name[1:]) {
			leftovers = append(leftovers, name)
			continue
		}
		if t, ok := etcdsnapshot.ParseName(name); ok && e.Type().IsRegular() {
			files = append(files, snapshotFile{name: name, taken: t})
		}
	}
	slices.SortFunc(files, byTaken)
	return files, leftovers, nil
}

// withSnapshot adds f to files, oldest first. A clock set back to the
// second of an existing snapshot makes f replace that file under the same
// name, and it must be counted once, or pruning would remove it.
func withSnapshot(files []snapshotFile, f snapshotFile) []snapshotFile {
	files = slices.DeleteFunc(files, func(g snapshotFile) bool { return g.name == f.name })
	files = append(files, f)
	slices.SortFunc(files, byTaken)
	return files
}

// byTaken orders snapshots oldest first.
func byTaken(a, b snapshotFile) int { return a.taken.Compare(b.taken) }

// takeSnapshot streams a snapshot from the local member into dir, written
// 0600 (it holds every secret of the cluster) and renamed into place only
// once complete and checked.
func (c *Component) takeSnapshot(ctx context.Context, cl *Client, dir string, now time.Time, dbSize uint64) (snapshotFile, int64, error) {
	limit, err := etcdsnapshot.Room(dir, dbSize)
	if err != nil {
		return snapshotFile{}, 0, fmt.Errorf("snapshot skipped: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.SnapshotTimeout)
	defer cancel()
	f := snapshotFile{name: etcdsnapshot.Name(now), taken: now.Truncate(time.Second)}
	var size int64
	err = atomicfile.WriteFunc(filepath.Join(dir, f.name), 0o600, func(w io.Writer) error {
		var err error
		size, err = cl.Snapshot(ctx, c.localClientURL(), w, limit)
		return err
	})
	if err != nil {
		return snapshotFile{}, 0, fmt.Errorf("take a snapshot: %w", err)
	}
	return f, size, nil
}

// Snapshot streams a snapshot of the member at endpoint into w and returns
// its size. The gateway sends it as JSON chunks; the last 32 bytes are
// etcd's SHA-256 of the rest, checked here, so that a snapshot cut short
// or damaged on the way is an error, never a file that restores wrong.
// More than limit bytes is an error.
func (c *Client) Snapshot(ctx context.Context, endpoint string, w io.Writer, limit int64) (int64, error) {
	const path = "/v3/maintenance/snapshot"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+path, strings.NewReader("{}"))
	if err != nil {
		return 0, fmt.Errorf("POST %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("POST %s%s: %w", endpoint, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
		return 0, apiError(path, resp.StatusCode, raw)
	}
	// Base64 and the chunks' JSON take a third more than the bytes.
	return copySnapshot(w, io.LimitReader(resp.Body, limit/3*4+limit/16+64<<10), limit)
}

// copySnapshot decodes the gateway's chunks from r into w.
func copySnapshot(w io.Writer, r io.Reader, limit int64) (int64, error) {
	dec := json.NewDecoder(r)
	sum := etcdsnapshot.NewChecker()
	var n int64
	for {
		var chunk struct {
			Result *struct {
				Blob []byte `json:"blob"`
			} `json:"result"`
			Error *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		err := dec.Decode(&chunk)
		if errors.Is(err, io.EOF) {
			break
		}
		switch {
		case err != nil:
			return n, fmt.Errorf("snapshot stream after %d bytes: %w", n, err)
		case chunk.Error != nil:
			return n, &APIError{HTTPStatus: http.StatusOK, Code: chunk.Error.Code, Message: truncate(chunk.Error.Message)}
		case chunk.Result == nil:
			return n, fmt.Errorf("snapshot stream after %d bytes: a chunk with neither result nor error", n)
		}
		n += int64(len(chunk.Result.Blob))
		if n > limit {
			return n, fmt.Errorf("snapshot larger than the %d bytes it may take", limit)
		}
		if _, err := w.Write(chunk.Result.Blob); err != nil {
			return n, err
		}
		sum.Write(chunk.Result.Blob)
	}
	return n, sum.Check()
}
