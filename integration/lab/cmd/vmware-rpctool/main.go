// Command vmware-rpctool stands in for open-vm-tools' rpctool in the lab's
// bodies. The real tool talks to the hypervisor over the VMware backdoor;
// this one asks the lab over a unix socket bound into the body, and the lab
// reads and writes the VM's ExtraConfig in vcsim. It takes the same
// command line ("info-get KEY", "info-set KEY VALUE" as one argument),
// prints the same messages and exits with the same codes.
//
// Build it static, for it runs inside the node image:
//
//	CGO_ENABLED=0 go build -trimpath -o bin/vmware-rpctool ./integration/lab/cmd/vmware-rpctool
package main

import (
	"context"
	"os"

	"github.com/harmonykaas/harmony/integration/lab/body"
)

func main() {
	socket := os.Getenv(body.GuestinfoSocketEnv)
	if socket == "" {
		socket = body.GuestinfoSocketInBody
	}
	os.Exit(body.RPCTool(context.Background(), socket, os.Args[1:], os.Stdout, os.Stderr))
}
