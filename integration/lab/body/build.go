package body

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// RPCToolPackage is the stand-in vmware-rpctool's package.
const RPCToolPackage = "github.com/harmonykaas/harmony/integration/lab/cmd/vmware-rpctool"

// BuildRPCTool builds the stand-in vmware-rpctool into out, statically
// (CGO_ENABLED=0): it runs inside the node image, whose libc is not the
// host's. moduleDir is the module's root.
func BuildRPCTool(ctx context.Context, moduleDir, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, RPCToolPackage)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w: %s", RPCToolPackage, err, strings.TrimSpace(string(b)))
	}
	return nil
}
