package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-ldap/ldap/v3"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// checkDirectoryAccess: the admin points the controller at a real
// OpenLDAP with an Active-Directory-shaped directory and grants a nested
// group view on the lab's cluster. bob, a member through team-a, signs in
// with his directory password; kubectl lists pods and the cluster's RBAC
// refuses a delete. team-a leaves the group in the directory: at bob's
// next session refresh his credential is refused, and kubectl with it. A
// user disabled in the directory cannot sign in. alice, in the admin
// group, is an admin in Harmony and cluster-admin in the cluster.
func (l *labUnderTest) checkDirectoryAccess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	slapd, err := testutil.StartSlapd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer slapd.Close()
	asAdmin := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(os.Getenv("HARMONY_BIN"), "harmonyctl"), append([]string{"--config", l.sum.AdminConfig}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("harmonyctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	// The settings file holds no password: it comes from the environment.
	settings := slapd.Settings(slapd.URL)
	settings.BindPassword = ""
	data, _ := json.Marshal(settings)
	settingsFile := filepath.Join(t.TempDir(), "ldap.json")
	if err := os.WriteFile(settingsFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	asAdmin([]string{"HARMONY_LDAP_BIND_PASSWORD=" + testutil.SlapdServicePassword}, "ldap", "apply", "-f", settingsFile)
	defer asAdmin(nil, "ldap", "delete")
	if out := asAdmin(nil, "ldap", "lookup", "bob"); !strings.Contains(out, "k8s-viewers") {
		t.Errorf("ldap lookup bob shows no k8s-viewers:\n%s", out)
	}
	asAdmin(nil, "cluster", "grant", l.sum.Cluster, "--group", "k8s-viewers", "--role", "view")

	bob := l.newLabUser(ctx, t, "bob")
	bob.login(t, testutil.SlapdPassword("bob"))
	bob.checkViewOnly(t, v1.KubernetesDirectoryGroup("k8s-viewers"))

	// team-a leaves k8s-viewers in the directory.
	if err := slapd.Modify(ctx, testutil.SlapdGroupDN("k8s-viewers"), func(r *ldap.ModifyRequest) {
		r.Replace("member", []string{testutil.SlapdUserDN("dave")})
	}); err != nil {
		t.Fatal(err)
	}
	// bob's access token ends within 15 minutes; here it is made to end
	// now, and the cached certificate with it, so that the next kubectl
	// call refreshes the session.
	conf, err := clientconfig.Load(bob.config)
	if err != nil {
		t.Fatal(err)
	}
	conf.Session.AccessExpiresAt = time.Now().Add(-time.Minute)
	if err := conf.Write(bob.config); err != nil {
		t.Fatal(err)
	}
	bob.dropCachedCredential(t)
	bob.checkRefused(t)

	// alice is an admin through harmony-admins: harmonyctl's admin
	// commands work for her, and in the cluster she is cluster-admin.
	alice := l.newLabUser(ctx, t, "alice")
	alice.login(t, testutil.SlapdPassword("alice"))
	if out, err := alice.harmonyctl("", "user", "list"); err != nil || !strings.Contains(out, "ldap") {
		t.Errorf("alice lists users: %v\n%s", err, out)
	}
	if out, err := alice.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}"); err != nil ||
		!strings.Contains(out, v1.GrantAdmin.KubernetesGroup()) || !strings.Contains(out, v1.KubernetesDirectoryGroup("harmony-admins")) {
		t.Errorf("alice's groups as the cluster sees them: %v\n%s", err, out)
	}
	if out, err := alice.kubectl("auth", "can-i", "delete", "pods", "-n", "kube-system"); err != nil || strings.TrimSpace(out) != "yes" {
		t.Errorf("alice may delete pods: %v\n%s", err, out)
	}

	// carol is disabled in the directory.
	carol := l.newLabUser(ctx, t, "carol")
	if out, err := carol.tryLogin(testutil.SlapdPassword("carol")); err == nil || !strings.Contains(out, "wrong user name or password") {
		t.Errorf("carol, disabled, signs in: %v\n%s", err, out)
	}
}
