//go:build linux

package etcd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harmonykaas/harmony/agent/pki"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// controllerCopies stands in for the controller's side: agent/ never
// imports controller/, and the controller's store and HTTP route have
// their own tests (TestMastersCopyEtcdSnapshotsToTheController), and
// TestLab runs the whole path with real agents and a real controller.
// It keeps what it is sent, takes only a snapshot taken gap after its
// newest, as the controller does; failing makes every call fail, as an
// unreachable controller does.
type controllerCopies struct {
	gap     time.Duration
	copies  map[time.Time][]byte
	failing bool
}

func (c *controllerCopies) List(context.Context) (v1.EtcdSnapshotCopyList, error) {
	if c.failing {
		return v1.EtcdSnapshotCopyList{}, errors.New("dial tcp: connection refused")
	}
	var l v1.EtcdSnapshotCopyList
	for _, taken := range c.taken() {
		l.Items = append(l.Items, v1.EtcdSnapshotCopy{TakenAt: taken, Bytes: int64(len(c.copies[taken]))})
		l.NextAfter = taken.Add(c.gap)
	}
	return l, nil
}

func (c *controllerCopies) Put(_ context.Context, takenAt time.Time, path string) (bool, error) {
	if c.failing {
		return false, errors.New("dial tcp: connection refused")
	}
	if taken := c.taken(); len(taken) > 0 && !takenAt.After(taken[len(taken)-1].Add(c.gap)) {
		return false, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	c.copies[takenAt] = data
	return true, nil
}

func (c *controllerCopies) Get(_ context.Context, takenAt time.Time, w io.Writer, limit int64) error {
	if c.failing {
		return errors.New("dial tcp: connection refused")
	}
	data, ok := c.copies[takenAt]
	switch {
	case !ok:
		return errors.New("404 not_found: no such copy")
	case int64(len(data)) > limit:
		return errors.New("larger than the limit")
	}
	_, err := w.Write(data)
	return err
}

func (c *controllerCopies) taken() []time.Time {
	var taken []time.Time
	for t := range c.copies {
		taken = append(taken, t)
	}
	slices.SortFunc(taken, time.Time.Compare)
	return taken
}

// A real member's newest snapshot is copied to the controller once, and
// not when the controller has one new enough (another master's); a copy
// that fails is reported, counted and tried again 5 minutes later, not
// at every pass; a new agent process asks before it sends again.
func TestTheNewestSnapshotIsCopiedToTheController(t *testing.T) {
	needLab(t, "runs an etcd member")
	ctx := context.Background()
	id := labID(t)
	h := newLabHost(t, id, labSwitch(t, id), "m1", "198.18.34.21")
	now := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	copies := &controllerCopies{gap: 30 * time.Minute, copies: map[time.Time][]byte{}}
	newComponent := func() {
		h.comp = New(Config{DialContext: testutil.NetnsDialer(h.ns), Now: func() time.Time { return now }, Copies: copies})
		h.reg = prometheus.NewRegistry()
		h.reg.MustRegister(h.comp)
	}
	newComponent()
	caPair := newCA(t, "etcd-ca")
	if _, err := pki.LoadCA(caPair); err != nil {
		t.Fatal(err)
	}
	role := testRole(t, "m1", map[string]string{"m1": "198.18.34.21"}, caPair)
	role.Etcd.Snapshots = &v1.EtcdSnapshots{Interval: "1h", Keep: 3}
	dir := h.host.Path(DefaultDataDir + "/" + SnapshotDir)
	pass := func(want ...string) {
		t.Helper()
		st := h.comp.Reconcile(ctx, h.host, role)
		var got []string
		for _, a := range st.Actions {
			if strings.Contains(a, "snapshot") {
				got = append(got, a)
			}
		}
		if !st.Healthy || len(got) != len(want) {
			t.Fatalf("at %s: %+v, want snapshot actions starting %q", now.Format(time.TimeOnly), st, want)
		}
		for i, w := range want {
			if !strings.HasPrefix(got[i], w) {
				t.Fatalf("at %s: actions %q, want them to start %q", now.Format(time.TimeOnly), got, want)
			}
		}
	}
	copied := copies.taken
	eventually(t, 60*time.Second, "m1 healthy, its first snapshot copied", func() error {
		if st := h.comp.Reconcile(ctx, h.host, role); !st.Healthy {
			return errors.New(st.Message)
		}
		if len(copied()) == 0 {
			return errors.New("no copy yet")
		}
		return nil
	})
	first := filepath.Join(dir, etcdsnapshot.Name(now))
	local, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	if remote := copies.copies[now]; !bytes.Equal(local, remote) {
		t.Fatalf("the copy sent is %d bytes, not the member's snapshot of %d", len(remote), len(local))
	}
	pass() // copied once

	// Another master's copy of 01:40 came in: the 02:00 snapshot is
	// within half an interval of it, and not sent.
	copies.copies[now.Add(40*time.Minute)] = local
	now = now.Add(time.Hour)
	pass("took snapshot snapshot-20261129T020000Z.db (")
	pass()

	// The controller cannot be reached: reported, counted, not retried
	// at every pass.
	copies.failing = true
	now = now.Add(time.Hour)
	failing := func() {
		t.Helper()
		st := h.comp.Reconcile(ctx, h.host, role)
		if !st.Healthy || !strings.Contains(st.Message, "; snapshot copy: ask the controller for its copies: dial tcp: connection refused") {
			t.Fatalf("at %s: %+v, want healthy with the copy's failure in the message", now.Format(time.TimeOnly), st)
		}
	}
	failing()
	if got := counter(t, h, "harmony_agent_etcd_snapshot_copy_failures_total"); got != 1 {
		t.Errorf("copy failures counted: %v, want 1", got)
	}
	now = now.Add(4 * time.Minute)
	failing()
	if got := counter(t, h, "harmony_agent_etcd_snapshot_copy_failures_total"); got != 1 {
		t.Errorf("copy failures counted: %v, want 1: no retry within 5 minutes", got)
	}
	copies.failing = false
	now = now.Add(time.Minute)
	pass("copied snapshot snapshot-20261129T030000Z.db to the controller")
	if st := h.comp.Reconcile(ctx, h.host, role); strings.Contains(st.Message, "copy") {
		t.Errorf("after a copy succeeded the message still says %q", st.Message)
	}

	// A new agent process knows nothing it sent: it asks, and sends
	// nothing the controller has.
	newComponent()
	pass()
	want := []time.Time{now.Add(-2*time.Hour - 5*time.Minute), now.Add(-2*time.Hour + 35*time.Minute), now.Add(-5 * time.Minute)}
	if got := copied(); len(got) != len(want) || !got[0].Equal(want[0]) || !got[1].Equal(want[1]) || !got[2].Equal(want[2]) {
		t.Errorf("the controller's copies: %v, want %v", got, want)
	}
}
