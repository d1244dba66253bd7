package components

import "strings"

// Where a node image keeps the container images it carries, and the stamp
// its first-boot unit (systemd/harmony-images-import.service) leaves once
// containerd has imported them all. The image build puts the images there
// and the agent waits for the stamp; the unit file, being plain systemd,
// repeats both paths, and a test holds it to these.
const (
	ContainerImagesDir      = "/usr/share/harmony/images"
	ContainerImagesImported = "/var/lib/harmony-images/imported"
)

// Where a node image keeps each Kubernetes version it carries (n and
// n-1): KubernetesDir/<version>/bin/{kubeadm,kubelet,kubectl,kube-proxy}.
// kubeadm and kubectl on PATH are n's; kubeadm n deploys either version.
// The kubelet must not be newer than the control plane, so
// /usr/bin/kubelet, which the kubelet unit runs, links to KubeletLink,
// which the image points at n's kubelet and the agent at the cluster's
// version's before the kubelet's first start. The link has a directory of
// its own, not the agent's state directory: sysprep empties that one (no
// clone may inherit an identity), and the agent's unit may write here.
const (
	KubernetesDir = "/opt/harmony/kubernetes"
	KubeletLink   = "/var/lib/harmony-kubelet/kubelet"
)

// KubeletUnit is the kubelet's systemd unit, which a node image installs
// and enables (systemd/kubelet.service); kubeadm starts it, and a master's
// hand-over stops it.
const KubeletUnit = "kubelet.service"

// KubernetesBinary is where an image keeps a Kubernetes binary of a
// version.
func KubernetesBinary(version, name string) string {
	return KubernetesDir + "/" + version + "/bin/" + name
}

// KubernetesVersionAt is the version whose directory holds path when path
// is one of KubernetesBinary's: "/opt/harmony/kubernetes/v1.34.2/bin/kubeadm"
// gives "v1.34.2". The image puts each version's binaries there, so the
// layout answers "which version is this" without starting the binary.
func KubernetesVersionAt(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, KubernetesDir+"/")
	if !ok {
		return "", false
	}
	version, name, ok := strings.Cut(rest, "/bin/")
	if !ok || name == "" || strings.Contains(name, "/") || !kubeVersion.MatchString(version) {
		return "", false
	}
	return version, true
}

// The CNI plugins a node image keeps, in Debian's directory, which the
// image's containerd uses: the reference plugins flannel's configuration
// runs, and loopback, which the container runtime runs for every pod. The
// image build removes the others the package installs; the agent's
// flannel checks these are there.
const CNIBinDir = "/usr/lib/cni"

// CNIPlugins lists them.
func CNIPlugins() []string { return []string{"bridge", "host-local", "portmap", "loopback"} }
