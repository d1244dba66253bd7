package access

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-ldap/ldap/v3"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// startSlapd runs a real slapd with the test directory for one test.
func startSlapd(t *testing.T) *testutil.Slapd {
	t.Helper()
	d, err := testutil.StartSlapd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// newDirectoryService is a service with the test directory applied.
func newDirectoryService(t *testing.T) (*Service, *testutil.Slapd) {
	t.Helper()
	d := startSlapd(t)
	s, _ := newTestService(t)
	if _, created, err := s.ApplyLDAP(context.Background(), d.Settings(d.URL)); err != nil || !created {
		t.Fatalf("apply ldap: created %v, %v", created, err)
	}
	return s, d
}

func directoryLogin(t *testing.T, s *Service, name string) v1.Session {
	t.Helper()
	sess, err := s.Login(context.Background(), name, testutil.SlapdPassword(strings.ToLower(name)), client)
	if err != nil {
		t.Fatalf("login %s: %v", name, err)
	}
	return sess
}

func TestDirectoryLogin(t *testing.T) {
	s, _ := newDirectoryService(t)
	ctx := context.Background()

	// AD's sAMAccountName is "Alice"; names are matched without case.
	alice := directoryLogin(t, s, "Alice")
	if alice.User.Name != "alice" || alice.User.Role != v1.UserRoleAdmin || alice.User.Source != v1.UserSourceLDAP ||
		alice.User.DN != testutil.SlapdUserDN("alice") {
		t.Errorf("alice: %+v, want the admin from harmony-admins", alice.User)
	}
	bob := directoryLogin(t, s, "bob")
	// team-a is nested in k8s-viewers and in a loop of two groups: the
	// search follows both and ends.
	want := []string{"harmony-users", "k8s-viewers", "loop-a", "loop-b", "team-a"}
	if bob.User.Role != v1.UserRoleUser || !slices.Equal(bob.User.Groups, want) {
		t.Errorf("bob: role %s, groups %v; want user in %v", bob.User.Role, bob.User.Groups, want)
	}
	if u, err := s.Authenticate(bob.AccessToken); err != nil || !slices.Equal(u.Groups, want) {
		t.Errorf("bob's access token: %+v, %v", u, err)
	}

	for _, c := range []struct{ what, name, password string }{
		{"a wrong password", "bob", "not-" + testutil.SlapdPassword("bob")},
		{"a disabled account (userAccountControl 514)", "carol", testutil.SlapdPassword("carol")},
		{"a user in no group that may sign in", "dave", testutil.SlapdPassword("dave")},
		{"an unknown user", "mallory", "whatever-password"},
		{"a filter wildcard as the name", "*", testutil.SlapdPassword("alice")},
		{"a filter injection as the name", "alice)(|(sAMAccountName=*", testutil.SlapdPassword("alice")},
		// An empty password would be an unauthenticated bind, which LDAP
		// lets succeed.
		{"an empty password", "bob", ""},
	} {
		if _, err := s.Login(ctx, c.name, c.password, client); !errors.Is(err, ErrBadCredentials) {
			t.Errorf("%s: %v, want %v", c.what, err, ErrBadCredentials)
		}
	}
	if users, _ := s.Users(); len(users) != 2 {
		t.Errorf("users recorded: %+v; want alice and bob only", users)
	}

	// Directory users' passwords and roles are the directory's.
	pw := "a-new-password-here"
	if _, err := s.UpdateUser(ctx, "bob", v1.UserUpdate{Password: &pw}); !isFieldError(err, "password") {
		t.Errorf("new password for a directory user: %v, want a field error on password", err)
	}
	admin := v1.UserRoleAdmin
	if _, err := s.UpdateUser(ctx, "bob", v1.UserUpdate{Role: &admin}); !isFieldError(err, "role") {
		t.Errorf("new role for a directory user: %v, want a field error on role", err)
	}
	// Disabling in Harmony holds against the directory's yes.
	yes := true
	if _, err := s.UpdateUser(ctx, "bob", v1.UserUpdate{Disabled: &yes}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Login(ctx, "bob", testutil.SlapdPassword("bob"), client); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("bob disabled in Harmony: %v", err)
	}
}

func TestDirectoryLocalUserComesFirst(t *testing.T) {
	s, _ := newDirectoryService(t)
	// dave may not sign in through the directory; a local dave may.
	addUser(t, s, "dave", v1.UserRoleUser)
	if sess := login(t, s, "dave"); sess.User.Source != v1.UserSourceLocal {
		t.Errorf("dave: %+v, want the local user", sess.User)
	}
	if _, err := s.Login(context.Background(), "dave", testutil.SlapdPassword("dave"), client); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("local dave with the directory's password: %v", err)
	}
}

func TestDirectoryRefreshReadsGroupsAgain(t *testing.T) {
	s, d := newDirectoryService(t)
	ctx := context.Background()
	addCluster(t, s, "web")
	if _, err := s.Grant(ctx, "web", v1.GrantRequest{Group: "k8s-viewers", Role: v1.GrantView}, "test"); err != nil {
		t.Fatal(err)
	}
	sess := directoryLogin(t, s, "bob")
	if role, _ := s.RoleOn("bob", sess.User.Groups, "web"); role != v1.GrantView {
		t.Fatalf("bob on web through k8s-viewers: %q", role)
	}

	// team-a leaves k8s-viewers in the directory.
	setMembers := func(group string, op func(*ldap.ModifyRequest)) {
		t.Helper()
		if err := d.Modify(ctx, testutil.SlapdGroupDN(group), op); err != nil {
			t.Fatal(err)
		}
	}
	setMembers("k8s-viewers", func(r *ldap.ModifyRequest) {
		r.Replace("member", []string{testutil.SlapdUserDN("dave")})
	})
	fresh, err := s.Refresh(ctx, sess.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(fresh.User.Groups, "k8s-viewers") {
		t.Errorf("groups after the refresh: %v, still with k8s-viewers", fresh.User.Groups)
	}
	u, err := s.Authenticate(fresh.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if role, _ := s.RoleOn("bob", u.Groups, "web"); role != "" {
		t.Errorf("bob on web after leaving k8s-viewers: %q, want none", role)
	}
	// The old access token reads the user record too: the group is gone
	// for it as well, not only for new tokens.
	if u, _ := s.Authenticate(sess.AccessToken); slices.Contains(u.Groups, "k8s-viewers") {
		t.Errorf("the older access token still carries k8s-viewers")
	}

	// Disabled in the directory: the next refresh ends the session.
	if err := d.Modify(ctx, testutil.SlapdUserDN("bob"), func(r *ldap.ModifyRequest) { r.Replace("userAccountControl", []string{"514"}) }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Refresh(ctx, fresh.RefreshToken); !isSessionError(err) {
		t.Errorf("refresh of a user disabled in the directory: %v, want a session error", err)
	}
	if _, err := s.Authenticate(fresh.AccessToken); !isSessionError(err) {
		t.Errorf("access token of the ended session: %v, want a session error", err)
	}
}

func TestDirectoryRefreshEndsWhenGroupRoleGoes(t *testing.T) {
	s, d := newDirectoryService(t)
	ctx := context.Background()
	sess := directoryLogin(t, s, "eve")
	if err := d.Modify(ctx, testutil.SlapdGroupDN("harmony-users"), func(r *ldap.ModifyRequest) {
		r.Delete("member", []string{testutil.SlapdUserDN("eve")})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Refresh(ctx, sess.RefreshToken); !isSessionError(err) {
		t.Errorf("refresh after leaving harmony-users: %v, want a session error", err)
	}
}

func TestDirectoryDown(t *testing.T) {
	d := startSlapd(t)
	s, _ := newTestService(t)
	ctx := context.Background()
	// A second slapd that the test stops.
	own := startSlapd(t)
	if _, _, err := s.ApplyLDAP(ctx, own.Settings(own.URL)); err != nil {
		t.Fatal(err)
	}
	sess := directoryLogin(t, s, "bob")
	own.Close()
	var de *DirectoryError
	if _, err := s.Refresh(ctx, sess.RefreshToken); !errors.As(err, &de) {
		t.Fatalf("refresh with the directory down: %v, want a directory error", err)
	}
	// Not the user's fault: the session stays, and no failure is counted.
	if _, err := s.Authenticate(sess.AccessToken); err != nil {
		t.Errorf("session after a refresh with the directory down: %v", err)
	}
	for range userFreeFailures + 1 {
		if _, err := s.Login(ctx, "bob", testutil.SlapdPassword("bob"), client); !errors.As(err, &de) {
			t.Fatalf("login with the directory down: %v", err)
		}
	}
	// Back, on the other directory: a new URL needs the bind password
	// again.
	settings := d.Settings(d.URL)
	settings.BindPassword = ""
	if _, _, err := s.ApplyLDAP(ctx, settings); !isFieldError(err, "bindPassword") {
		t.Errorf("new url without the bind password: %v, want a field error on bindPassword", err)
	}
	settings.BindPassword = testutil.SlapdServicePassword
	if _, _, err := s.ApplyLDAP(ctx, settings); err != nil {
		t.Fatal(err)
	}
	directoryLogin(t, s, "bob")
}

// Without bindPassword an apply keeps the stored one only for the same
// destination: a new CA could vouch for any server at the same URL, and
// the stored password would be sent there by the apply's own check.
func TestApplyLDAPKeepsTheBindPasswordOnlyForTheSameDestination(t *testing.T) {
	d := startSlapd(t)
	s, _ := newTestService(t)
	ctx := context.Background()
	if _, _, err := s.ApplyLDAP(ctx, d.Settings(d.URL)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what   string
		change func(*v1.LDAP)
	}{
		{"ca", func(l *v1.LDAP) { l.CA = otherCA(t) }},
		{"startTLS", func(l *v1.LDAP) { l.StartTLS = !l.StartTLS }},
		{"bindDN", func(l *v1.LDAP) { l.BindDN = "cn=other," + testutil.SlapdBase }},
		{"url", func(l *v1.LDAP) { l.URL = "ldaps://198.18.0.1:636" }},
	} {
		l := d.Settings(d.URL)
		l.BindPassword = ""
		c.change(&l)
		var fe *v1.FieldError
		if _, _, err := s.ApplyLDAP(ctx, l); !errors.As(err, &fe) || fe.Field != "bindPassword" || !strings.HasPrefix(fe.Problem, c.what+" changed") {
			t.Errorf("%s changed without the bind password: %v, want a field error on bindPassword naming %s", c.what, err, c.what)
		}
	}
	l := d.Settings(d.URL)
	l.BindPassword = ""
	l.TimeoutSeconds = 7
	if _, _, err := s.ApplyLDAP(ctx, l); err != nil {
		t.Errorf("the same destination without the bind password: %v", err)
	}
}

func TestApplyLDAPChecksTheDirectory(t *testing.T) {
	d := startSlapd(t)
	s, _ := newTestService(t)
	ctx := context.Background()
	var de *DirectoryError
	for _, c := range []struct {
		what   string
		change func(*v1.LDAP)
		field  string // "" for a directory error
	}{
		{"a wrong bind password", func(l *v1.LDAP) { l.BindPassword = "wrong" }, ""},
		{"a CA that did not sign the server", func(l *v1.LDAP) { l.CA = otherCA(t) }, ""},
		{"a user base that does not exist", func(l *v1.LDAP) { l.UserSearch.BaseDN = "ou=nobody," + testutil.SlapdBase }, "userSearch.baseDN"},
		{"a group base that does not exist", func(l *v1.LDAP) { l.GroupSearch.BaseDN = "ou=nothing," + testutil.SlapdBase }, "groupSearch.baseDN"},
	} {
		l := d.Settings(d.URL)
		c.change(&l)
		_, _, err := s.ApplyLDAP(ctx, l)
		if c.field == "" && !errors.As(err, &de) || c.field != "" && !isFieldError(err, c.field) {
			t.Errorf("%s: %v", c.what, err)
		}
	}
	if _, err := s.LDAP(); err == nil {
		t.Error("settings stored after refused applies")
	}
	// StartTLS on the plain port works like LDAPS.
	if _, _, err := s.ApplyLDAP(ctx, d.Settings(d.StartTLSURL)); err != nil {
		t.Fatalf("StartTLS: %v", err)
	}
	directoryLogin(t, s, "alice")
	got, err := s.LDAP()
	if err != nil || got.BindPassword != "" || got.URL != d.StartTLSURL {
		t.Errorf("stored settings: %+v, %v; want them without the bind password", got, err)
	}
	// Deleting the settings ends the directory users' sessions.
	if n, err := s.DeleteLDAP(); err != nil || n != 1 {
		t.Errorf("delete: ended %d, %v; want alice's one session", n, err)
	}
}

func TestLookupLDAPUser(t *testing.T) {
	s, _ := newDirectoryService(t)
	info, err := s.LookupLDAPUser(context.Background(), "Eve")
	if err != nil {
		t.Fatal(err)
	}
	if info.Role != v1.UserRoleUser || !slices.Equal(info.Groups, []string{"harmony-users", "system:masters"}) {
		t.Errorf("eve: %+v", info)
	}
	if info, err := s.LookupLDAPUser(context.Background(), "dave"); err != nil || info.Role != "" {
		t.Errorf("dave: %+v, %v; want found with no role", info, err)
	}
	if _, err := s.LookupLDAPUser(context.Background(), "carol"); err == nil {
		t.Error("carol, disabled, found")
	}
}

// addCluster stores a cluster record for grants to name.
func addCluster(t *testing.T, s *Service, name string) {
	t.Helper()
	err := s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Put(store.Clusters, name, map[string]string{"name": name}) })
	if err != nil {
		t.Fatal(err)
	}
}

func isFieldError(err error, field string) bool {
	var fe *v1.FieldError
	return errors.As(err, &fe) && fe.Field == field
}

func otherCA(t *testing.T) string { return string(testutil.NewCA(t).PEM) }

func TestGrantToDirectoryUserBeforeFirstSignIn(t *testing.T) {
	s, _ := newDirectoryService(t)
	ctx := context.Background()
	addCluster(t, s, "web")
	if _, err := s.Grant(ctx, "web", v1.GrantRequest{User: "bob", Role: v1.GrantEdit}, "test"); err != nil {
		t.Fatalf("grant to bob, who never signed in: %v", err)
	}
	sess := directoryLogin(t, s, "bob")
	if role, _ := s.RoleOn("bob", sess.User.Groups, "web"); role != v1.GrantEdit {
		t.Errorf("bob on web: %q, want edit", role)
	}
	// dave may not sign in, and mallory does not exist: no grant.
	for _, name := range []string{"dave", "mallory"} {
		if _, err := s.Grant(ctx, "web", v1.GrantRequest{User: name, Role: v1.GrantView}, "test"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("grant to %s: %v, want not found", name, err)
		}
	}
}

// A name the directory does not have and a wrong password for one it has
// cost the directory the same conversation: nothing in the answer or in
// how long it took says which names exist (the attack: time sign-ins to
// learn the directory's user names, then guess their passwords).
func TestDirectoryUnknownNameCostsWhatAWrongPasswordDoes(t *testing.T) {
	s, d := newDirectoryService(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conversation := func(name, password string) []string {
		t.Helper()
		if _, err := d.Operations(ctx); err != nil { // what came before
			t.Fatal(err)
		}
		if _, err := s.Login(ctx, name, password, client); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("login %s: %v, want %v", name, err, ErrBadCredentials)
		}
		ops, err := d.Operations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ops
	}
	wrong := conversation("bob", "not-"+testutil.SlapdPassword("bob"))
	if !slices.Contains(wrong, "BIND 49") {
		t.Fatalf("a wrong password's conversation %v has no refused bind (BIND 49)", wrong)
	}
	// carol is in the directory, disabled: the user filter leaves her out.
	for _, name := range []string{"mallory", "carol"} {
		if got := conversation(name, "some-password"); !slices.Equal(got, wrong) {
			t.Errorf("signing in as %q: the directory saw %v; a wrong password for bob: %v", name, got, wrong)
		}
	}
}
