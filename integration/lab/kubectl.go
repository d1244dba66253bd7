package lab

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// KubectlCommand is kubectl from k8sBin (make kubernetes) as the lab's
// admin, with the kubeconfig lab up issued.
func (s *Summary) KubectlCommand(ctx context.Context, k8sBin string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, filepath.Join(k8sBin, "kubectl"), append([]string{"--kubeconfig", s.Kubeconfig}, args...)...)
}

// Kubectl runs kubectl as the lab's admin with stdin (if any) as its
// input, and returns what it printed; an error carries the output.
func (s *Summary) Kubectl(ctx context.Context, k8sBin, stdin string, args ...string) ([]byte, error) {
	cmd := s.KubectlCommand(ctx, k8sBin, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}
