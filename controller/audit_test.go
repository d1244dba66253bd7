package controller

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// Every change is audited with who, from where, what and the answer,
// refused ones and logins too; reads and the nodes' own reports are not;
// no password reaches the audit store or file.
func TestAuditRecordsChangesWithoutSecrets(t *testing.T) {
	tc := startController(t, t.TempDir())
	tc.putClusterRecord("x")
	node := tc.certClient(tc.enrolledNode("w1"))
	const alicePassword = "alice's audited password"
	if r := doJSON(t, tc.admin, "POST", tc.url+v1.PathUsers, v1.UserCreate{Name: "alice", Password: alicePassword}); r.status != http.StatusCreated {
		t.Fatalf("create alice: %d %s", r.status, r.body)
	}
	if r := doJSON(t, tc.anonClient(), "POST", tc.url+v1.PathLogin, v1.LoginRequest{Username: "alice", Password: "a wrong guess at it"}); r.status != http.StatusUnauthorized {
		t.Fatalf("wrong login: %d", r.status)
	}
	alice := tc.loginClient("alice", alicePassword)
	if r := doJSON(t, alice, "POST", tc.url+v1.PathUsers, v1.UserCreate{Name: "mallory", Password: "mallory's own password"}); r.status != http.StatusForbidden {
		t.Fatalf("alice creates a user: %d", r.status)
	}
	if r := doJSON(t, tc.admin, "POST", tc.url+v1.PathClusters+"/x/grants", v1.GrantRequest{User: "alice", Role: v1.GrantView}); r.status != http.StatusCreated {
		t.Fatalf("grant: %d %s", r.status, r.body)
	}
	doJSON(t, alice, "GET", tc.url+v1.PathClusters, nil)
	doJSON(t, node, "POST", tc.url+v1.PathNodeStatus, v1.Status{})

	r := doJSON(t, tc.admin, "GET", tc.url+v1.PathAudit, nil)
	var list v1.AuditList
	r.decode(t, &list)
	var got []string
	for _, e := range list.Items {
		got = append(got, strings.Join([]string{e.Actor, e.User, e.Route, e.Cluster, http.StatusText(e.Status), e.Code}, "|"))
		if e.Remote == "" || e.Time.IsZero() || e.Path == "" {
			t.Errorf("entry without where or when: %+v", e)
		}
	}
	expect := []string{
		"harmony:admins admin|admin|POST " + v1.PathNodes + "||Created|",
		"anonymous||POST " + v1.PathEnroll + "||OK|",
		"harmony:admins admin|admin|POST " + v1.PathUsers + "||Created|",
		"anonymous|alice|POST " + v1.PathLogin + "||Unauthorized|" + v1.CodeBadCredentials,
		"anonymous|alice|POST " + v1.PathLogin + "||OK|",
		"user alice|alice|POST " + v1.PathUsers + "||Forbidden|" + v1.CodeForbidden,
		"harmony:admins admin|admin|POST " + v1.PathClusters + "/{name}/grants|x|Created|",
	}
	if strings.Join(got, "\n") != strings.Join(expect, "\n") {
		t.Errorf("audit entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(expect, "\n"))
	}
	r = doJSON(t, tc.admin, "GET", tc.url+v1.PathAudit+"?user=alice&since=1h", nil)
	r.decode(t, &list)
	if len(list.Items) != 3 {
		t.Errorf("alice's entries: %d, want 3", len(list.Items))
	}
	r = doJSON(t, tc.admin, "GET", tc.url+v1.PathAudit+"?cluster=x", nil)
	r.decode(t, &list)
	if len(list.Items) != 1 || list.Items[0].Route != "POST "+v1.PathClusters+"/{name}/grants" {
		t.Errorf("cluster x's entries: %+v", list.Items)
	}
	if r := doJSON(t, tc.admin, "GET", tc.url+v1.PathAudit+"?since=yesterday", nil); r.status != http.StatusBadRequest || r.err.Field != "since" {
		t.Errorf("a bad since: %d %s", r.status, r.body)
	}
	if r := doJSON(t, alice, "GET", tc.url+v1.PathAudit, nil); r.status != http.StatusForbidden {
		t.Errorf("a user reads the audit: %d", r.status)
	}

	path := filepath.Join(tc.dir, AuditLogFile)
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("audit file: %v, %v", info, err)
	}
	data, _ := os.ReadFile(path)
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	lines := 0
	for sc.Scan() {
		var e v1.AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Errorf("audit line %q: %v", sc.Text(), err)
		}
		lines++
	}
	if lines != len(expect) {
		t.Errorf("audit file has %d lines, want %d", lines, len(expect))
	}
	// logrotate moves the file away: the next entry starts a new one.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if r := doJSON(t, tc.admin, "POST", tc.url+v1.PathUsers+"/alice/end-sessions", nil); r.status != http.StatusOK {
		t.Fatalf("end-sessions: %d %s", r.status, r.body)
	}
	rotated, _ := os.ReadFile(path + ".1")
	fresh, err := os.ReadFile(path)
	if err != nil || strings.Count(string(fresh), "\n") != 1 || !strings.Contains(string(fresh), "end-sessions") || string(rotated) != string(data) {
		t.Errorf("after rotation: new file %q (%v), rotated file changed: %v", fresh, err, string(rotated) != string(data))
	}
	stored, _ := os.ReadFile(filepath.Join(tc.dir, store.FileName))
	for _, secret := range []string{alicePassword, "a wrong guess at it", "mallory's own password"} {
		if strings.Contains(string(data), secret) {
			t.Errorf("the audit file holds a password")
		}
		if strings.Contains(string(stored), secret) {
			t.Errorf("the store holds a password in clear")
		}
	}
}

// Refusals of callers who have not authenticated cannot fill the disk:
// each source gets a burst, then a rate; the rest are counted, in a metric
// and in the source's next entry. An authenticated caller's refusals are
// all recorded.
func TestAnonymousRefusalsAreAuditedWithinABudget(t *testing.T) {
	tc := startController(t, t.TempDir())
	const sent = anonymousBurst + 20
	anon := tc.anonClient()
	start := time.Now()
	for i := range sent {
		if r := doJSON(t, anon, "POST", tc.url+v1.PathUsers, v1.UserCreate{Name: "mallory", Password: "mallory's own password"}); r.status != http.StatusUnauthorized {
			t.Fatalf("anonymous request %d: %d %s", i, r.status, r.body)
		}
	}
	anonymous := func() []v1.AuditEntry {
		var list v1.AuditList
		doJSON(t, tc.admin, "GET", tc.url+v1.PathAudit, nil).decode(t, &list)
		var out []v1.AuditEntry
		for _, e := range list.Items {
			if e.Actor == "anonymous" && e.Route == "POST "+v1.PathUsers {
				out = append(out, e)
			}
		}
		return out
	}
	// The budget refills at one a second: a slow run keeps a few more.
	refilled := int(time.Since(start).Seconds()*anonymousPerMinute/60) + 1
	kept := len(anonymous())
	if kept < anonymousBurst || kept > anonymousBurst+refilled {
		t.Fatalf("%d of %d anonymous refusals recorded, want the burst of %d", kept, sent, anonymousBurst)
	}
	metrics := doJSON(t, tc.admin, "GET", tc.url+v1.PathMetrics, nil)
	if want := fmt.Sprintf("harmony_controller_audit_suppressed_total %d\n", sent-kept); !strings.Contains(string(metrics.body), want) {
		t.Errorf("metrics lack %q", want)
	}
	// A minute later the source is recorded again, with what was left out
	// since its last entry. On a slow run the budget refilled meanwhile,
	// and an entry kept then said what was left out before it: together
	// the entries count every refusal left out.
	tc.clock.Advance(time.Minute)
	doJSON(t, anon, "POST", tc.url+v1.PathUsers, v1.UserCreate{Name: "mallory", Password: "mallory's own password"})
	entries := anonymous()
	said := 0
	for _, e := range entries {
		said += e.Suppressed
	}
	if last := entries[len(entries)-1]; len(entries) != kept+1 || last.Suppressed == 0 || said != sent-kept {
		t.Errorf("after a minute: %d entries, the last %+v, %d left out in all; want %d, saying %d left out", len(entries), last, said, kept+1, sent-kept)
	}

	// A signed-in user's refusals are all recorded.
	if r := doJSON(t, tc.admin, "POST", tc.url+v1.PathUsers, v1.UserCreate{Name: "alice", Password: "alice's own password"}); r.status != http.StatusCreated {
		t.Fatalf("create alice: %d %s", r.status, r.body)
	}
	alice := tc.loginClient("alice", "alice's own password")
	for range sent {
		if r := doJSON(t, alice, "POST", tc.url+v1.PathUsers, v1.UserCreate{Name: "mallory", Password: "mallory's own password"}); r.status != http.StatusForbidden {
			t.Fatalf("alice creates a user: %d", r.status)
		}
	}
	var list v1.AuditList
	doJSON(t, tc.admin, "GET", tc.url+v1.PathAudit+"?user=alice", nil).decode(t, &list)
	refused := 0
	for _, e := range list.Items {
		if e.Status == http.StatusForbidden {
			refused++
		}
	}
	if refused != sent {
		t.Errorf("%d of alice's %d refusals recorded", refused, sent)
	}
}

// The budget's memory is bounded: past anonymousSources sources, the
// refilled ones are forgotten, and new ones share one budget until then.
func TestAnonymousBudgetIsBounded(t *testing.T) {
	var b anonymousBudget
	now := time.Now()
	for i := range anonymousSources {
		if ok, _ := b.admit(fmt.Sprintf("198.18.%d.%d", i/256, i%256), now); !ok {
			t.Fatalf("source %d refused its first entry", i)
		}
	}
	for i := range anonymousBurst {
		if ok, _ := b.admit("198.19.0.1", now); !ok {
			t.Fatalf("overflow entry %d refused", i)
		}
	}
	if ok, _ := b.admit("198.19.0.2", now); ok || len(b.sources) != anonymousSources+1 {
		t.Fatalf("a new source past the bound: admitted %v, %d sources tracked", ok, len(b.sources))
	}
	// A minute on, every budget is whole again: the next new source finds
	// room, and only the one with refusals left out is kept.
	later := now.Add(time.Minute)
	ok, suppressed := b.admit("198.19.0.3", later)
	if !ok || suppressed != 0 || len(b.sources) != 2 {
		t.Errorf("after a minute: admitted %v (%d left out), %d sources tracked, want 2", ok, suppressed, len(b.sources))
	}
	if ok, suppressed := b.admit("198.19.0.2", later); !ok || suppressed != 0 {
		t.Errorf("198.19.0.2 after a minute: %v, %d", ok, suppressed)
	}
	if ok, suppressed := b.admit(otherSources, later); !ok || suppressed != 1 {
		t.Errorf("the shared budget after a minute: %v, %d left out, want 1", ok, suppressed)
	}
}
