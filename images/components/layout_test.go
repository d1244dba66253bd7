package components

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The first-boot unit imports from the directory the build fills and
// leaves the stamp the agent waits for: a path changed on one side only
// would make every kubeadm run wait forever.
func TestImportUnitUsesTheLayout(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "systemd", "harmony-images-import.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(data)
	for _, want := range []string{
		"ConditionPathExists=!" + ContainerImagesImported + "\n",
		"StateDirectory=" + filepath.Base(filepath.Dir(ContainerImagesImported)) + "\n",
		"for f in " + ContainerImagesDir + "/*.tar;",
		"ExecStartPost=/usr/bin/touch " + ContainerImagesImported + "\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("harmony-images-import.service lacks %q", want)
		}
	}
}

// The agent repoints the kubelet link under ProtectSystem=strict: its
// unit must let it write the link's directory.
func TestAgentUnitMayRepointTheKubelet(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "systemd", "harmony-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	want := "ReadWritePaths=-" + filepath.Dir(KubeletLink) + "\n"
	if !strings.Contains(string(data), want) {
		t.Errorf("harmony-agent.service lacks %q", want)
	}
}

// The agent reads a kubeadm's version from where the image put it; only
// KubernetesBinary's own paths may answer.
func TestKubernetesVersionAt(t *testing.T) {
	for _, tc := range []struct {
		path, want string
	}{
		{KubernetesBinary("v1.34.2", "kubeadm"), "v1.34.2"},
		{KubernetesBinary("v1.33.4", "kubelet"), "v1.33.4"},
		{"/usr/bin/kubeadm", ""},
		{"kube", ""},
		{KubernetesDir + "/v1.34.2/kubeadm", ""},
		{KubernetesDir + "/v1.34.2/bin/", ""},
		{KubernetesDir + "/v1.34.2/bin/sub/kubeadm", ""},
		{KubernetesDir + "/latest/bin/kubeadm", ""},
		{KubernetesDir + "/v1.34/bin/kubeadm", ""},
		{KubernetesDir + "/../v1.34.2/bin/kubeadm", ""},
		{"/other" + KubernetesDir + "/v1.34.2/bin/kubeadm", ""},
	} {
		got, ok := KubernetesVersionAt(tc.path)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("KubernetesVersionAt(%q) = %q, %v; want %q", tc.path, got, ok, tc.want)
		}
	}
}
