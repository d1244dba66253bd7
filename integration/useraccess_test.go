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
	bin, k8sBin := os.Getenv("HARMONY_BIN"), os.Getenv("HARMONY_K8S_BIN")
	if k8sBin == "" {
		t.Fatal("HARMONY_K8S_BIN is unset: run make kubernetes, or make unit")
	}
	const password = "alice's lab password"
	if _, err := l.ctl.CreateUser(ctx, v1.UserCreate{Name: "alice", Role: v1.UserRoleUser, Password: password}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ctl.Grant(ctx, l.sum.Cluster, v1.GrantRequest{User: "alice", Role: v1.GrantView}); err != nil {
		t.Fatal(err)
	}
	admin, err := clientconfig.Load(l.sum.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "controller-ca.pem")
	if err := os.WriteFile(caFile, []byte(admin.CertificateAuthority), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "alice", "config")
	harmonyctl := func(stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "harmonyctl"), append([]string{"--config", conf}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := harmonyctl(password+"\n", "login", "--server", admin.Server, "--ca-file", caFile, "--username", "alice", "--password-stdin"); err != nil {
		t.Fatalf("login: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "alice.kubeconfig")
	if out, err := harmonyctl("", "cluster", "kubeconfig", l.sum.Cluster, "-o", kubeconfig); err != nil {
		t.Fatalf("kubeconfig: %v\n%s", err, out)
	}
	data, _ := os.ReadFile(kubeconfig)
	if strings.Contains(string(data), "client-key-data") || !strings.Contains(string(data), "credential") {
		t.Errorf("the kubeconfig holds a key, or no exec plugin:\n%s", data)
	}
	kubectl := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(k8sBin, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := kubectl("get", "pods", "-n", "kube-system", "-o", "name")
	if err != nil || !strings.Contains(out, "pod/") {
		t.Fatalf("alice lists pods: %v\n%s", err, out)
	}
	pod := strings.TrimSpace(strings.Split(out, "\n")[0])
	if out, err := kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"); err != nil ||
		!strings.Contains(out, v1.KubernetesUser("alice")) || !strings.Contains(out, v1.GrantView.KubernetesGroup()) {
		t.Errorf("alice as the cluster sees her: %v\n%s", err, out)
	}
	if out, err := kubectl("delete", "-n", "kube-system", pod, "--wait=false"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("alice deletes %s: %v\n%s", pod, err, out)
	}

	if err := l.ctl.Revoke(ctx, l.sum.Cluster, v1.GrantKindUser, "alice"); err != nil {
		t.Fatal(err)
	}
	// The cached certificate lives out its five minutes; a new one is
	// refused at once.
	if err := os.RemoveAll(filepath.Join(dir, "alice", "credentials")); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl("get", "pods", "-n", "kube-system"); err == nil {
		t.Errorf("alice lists pods after her grant was revoked:\n%s", out)
	}
	if out, err := harmonyctl("", "credential", l.sum.Cluster); err == nil || !strings.Contains(out, "not granted") {
		t.Errorf("a credential after the revoke: %v\n%s", err, out)
	}
}
