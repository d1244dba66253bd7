package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/clientconfig"
)

// checkUserAccess: a user with a view grant on the lab's cluster signs in
// with harmonyctl, writes a kubeconfig that holds no secret, and kubectl,
// through harmonyctl's exec plugin, may list pods but not delete one: the
// cluster's own RBAC decides. Once the grant is revoked no new credential
// is issued, and without one kubectl is refused.
func (l *labUnderTest) checkUserAccess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const password = "alice's lab password"
	if _, err := l.ctl.CreateUser(ctx, v1.UserCreate{Name: "alice", Role: v1.UserRoleUser, Password: password}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ctl.Grant(ctx, l.sum.Cluster, v1.GrantRequest{User: "alice", Role: v1.GrantView}); err != nil {
		t.Fatal(err)
	}
	alice := l.newLabUser(ctx, t, "alice")
	alice.login(t, password)
	alice.checkViewOnly(t, v1.GrantView.KubernetesGroup())

	if err := l.ctl.Revoke(ctx, l.sum.Cluster, v1.GrantKindUser, "alice"); err != nil {
		t.Fatal(err)
	}
	// The cached certificate lives out its five minutes; a new one is
	// refused at once.
	alice.dropCachedCredential(t)
	alice.checkRefused(t)
	// Gone: the directory's alice (the next step) is another person.
	if err := l.ctl.DeleteUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
}

// labUser is a person on their own machine: harmonyctl with their own
// config, and kubectl with the kubeconfig it writes.
type labUser struct {
	ctx                    context.Context
	l                      *labUnderTest
	name, dir, caFile      string
	harmonyctlBin, k8sBin  string
	config, kubeconfigFile string
}

func (l *labUnderTest) newLabUser(ctx context.Context, t *testing.T, name string) *labUser {
	t.Helper()
	bin, k8sBin := os.Getenv("HARMONY_BIN"), os.Getenv("HARMONY_K8S_BIN")
	if k8sBin == "" {
		t.Fatal("HARMONY_K8S_BIN is unset: run make kubernetes, or make unit")
	}
	admin, err := clientconfig.Load(l.sum.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	u := &labUser{ctx: ctx, l: l, name: name, dir: dir, caFile: filepath.Join(dir, "controller-ca.pem"),
		harmonyctlBin: filepath.Join(bin, "harmonyctl"), k8sBin: k8sBin,
		config: filepath.Join(dir, name, "config"), kubeconfigFile: filepath.Join(dir, name+".kubeconfig")}
	if err := os.WriteFile(u.caFile, []byte(admin.CertificateAuthority), 0o644); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u *labUser) run(stdin string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(u.ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (u *labUser) harmonyctl(stdin string, args ...string) (string, error) {
	return u.run(stdin, u.harmonyctlBin, append([]string{"--config", u.config}, args...)...)
}

func (u *labUser) kubectl(args ...string) (string, error) {
	return u.run("", filepath.Join(u.k8sBin, "kubectl"), append([]string{"--kubeconfig", u.kubeconfigFile}, args...)...)
}

// tryLogin signs in with password, as a person would with harmonyctl.
func (u *labUser) tryLogin(password string) (string, error) {
	admin, err := clientconfig.Load(u.l.sum.AdminConfig)
	if err != nil {
		return "", err
	}
	return u.harmonyctl(password+"\n", "login", "--server", admin.Server, "--ca-file", u.caFile, "--username", u.name, "--password-stdin")
}

// login signs in and writes the cluster's kubeconfig, which must hold no
// key, only the exec plugin.
func (u *labUser) login(t *testing.T, password string) {
	t.Helper()
	if out, err := u.tryLogin(password); err != nil {
		t.Fatalf("%s signs in: %v\n%s", u.name, err, out)
	}
	if out, err := u.harmonyctl("", "cluster", "kubeconfig", u.l.sum.Cluster, "-o", u.kubeconfigFile); err != nil {
		t.Fatalf("%s's kubeconfig: %v\n%s", u.name, err, out)
	}
	data, _ := os.ReadFile(u.kubeconfigFile)
	if strings.Contains(string(data), "client-key-data") || !strings.Contains(string(data), "credential") {
		t.Errorf("the kubeconfig holds a key, or no exec plugin:\n%s", data)
	}
}

// checkViewOnly: kubectl lists pods, the cluster sees the user in group,
// and its RBAC refuses a delete.
func (u *labUser) checkViewOnly(t *testing.T, group string) {
	t.Helper()
	out, err := u.kubectl("get", "pods", "-n", "kube-system", "-o", "name")
	if err != nil || !strings.Contains(out, "pod/") {
		t.Fatalf("%s lists pods: %v\n%s", u.name, err, out)
	}
	pod := strings.TrimSpace(strings.Split(out, "\n")[0])
	if out, err := u.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"); err != nil ||
		!strings.Contains(out, v1.KubernetesUser(u.name)) || !strings.Contains(out, group) {
		t.Errorf("%s as the cluster sees them: %v\n%s; want group %s", u.name, err, out, group)
	}
	if out, err := u.kubectl("delete", "-n", "kube-system", pod, "--wait=false"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("%s deletes %s: %v\n%s", u.name, pod, err, out)
	}
}

// dropCachedCredential removes the exec plugin's cached certificate, so
// that the next kubectl call asks the controller for one.
func (u *labUser) dropCachedCredential(t *testing.T) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(u.dir, u.name, "credentials")); err != nil {
		t.Fatal(err)
	}
}

// checkRefused: kubectl gets nothing, and the controller issues no
// credential.
func (u *labUser) checkRefused(t *testing.T) {
	t.Helper()
	if out, err := u.kubectl("get", "pods", "-n", "kube-system"); err == nil {
		t.Errorf("%s lists pods without a grant:\n%s", u.name, out)
	}
	if out, err := u.harmonyctl("", "credential", u.l.sum.Cluster); err == nil || !strings.Contains(out, "not granted") {
		t.Errorf("%s's credential without a grant: %v\n%s", u.name, err, out)
	}
}
