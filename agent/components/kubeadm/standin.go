package kubeadm

import (
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
)

// podManifest is the part of a static-pod manifest the stand-in reads.
type podManifest struct {
	Spec struct {
		Containers []struct {
			Name    string   `json:"name"`
			Command []string `json:"command"`
			Args    []string `json:"args"`
			Env     []envVar `json:"env"`
		} `json:"containers"`
	} `json:"spec"`
}

// standInUnit turns the kube-apiserver manifest kubeadm wrote into a unit:
// the container's command and flags, with Config.APIServerBinary in place
// of the image's binary and every absolute path mapped under the host's
// root (where the pod's hostPath volumes would have put them). The same
// manifest gives the same unit, so the manager restarts the apiserver only
// when kubeadm changed the manifest.
func (c *Component) standInUnit(host *reconcile.Host) (service.Unit, error) {
	data, err := kubeapi.ReadBounded(host.Path(APIServerManifest))
	if err != nil {
		return service.Unit{}, fmt.Errorf("read %s: %w", APIServerManifest, err)
	}
	var m podManifest
	if err := yaml.Unmarshal(data, &m); err != nil {
		return service.Unit{}, fmt.Errorf("%s: %w", APIServerManifest, err)
	}
	var argv, env []string
	for _, ctr := range m.Spec.Containers {
		if ctr.Name == "kube-apiserver" {
			argv = append(append(argv, ctr.Command...), ctr.Args...)
			for _, e := range ctr.Env {
				env = append(env, e.Name+"="+e.Value)
			}
		}
	}
	if len(argv) == 0 {
		return service.Unit{}, fmt.Errorf("%s: spec.containers has no kube-apiserver container with a command", APIServerManifest)
	}
	if path.Base(argv[0]) != "kube-apiserver" {
		return service.Unit{}, fmt.Errorf("%s: the container runs %q, not kube-apiserver", APIServerManifest, argv[0])
	}
	cmd := []string{c.cfg.APIServerBinary}
	for _, arg := range argv[1:] {
		cmd = append(cmd, underRoot(host, arg))
	}
	// The environment too: a new one (an etcd restore's) restarts it, as
	// the kubelet would restart the pod.
	return service.Unit{Name: APIServerUnit, Command: cmd, Env: env}, nil
}

// underRoot maps the absolute paths in one argument ("/a", "--flag=/a",
// "--flag=/a,/b") under the host's root; everything else is kept.
func underRoot(host *reconcile.Host, arg string) string {
	prefix, value := "", arg
	if strings.HasPrefix(arg, "-") {
		name, v, ok := strings.Cut(arg, "=")
		if !ok {
			return arg
		}
		prefix, value = name+"=", v
	}
	parts := strings.Split(value, ",")
	for i, p := range parts {
		if path.IsAbs(p) {
			parts[i] = host.Path(p)
		}
	}
	return prefix + strings.Join(parts, ",")
}
