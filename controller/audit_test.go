package controller

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
