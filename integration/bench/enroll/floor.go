package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/integration/bench/procstat"
)

// floorRounds is how many CSRs the floor measurement checks and signs:
// about half a second of CPU, so that the 10 ms clock ticks of the process
// CPU time blur it by 2% at most.
const floorRounds = 1000

// cryptoFloor is the CPU time of the work no enrollment can skip beyond
// its TLS handshake, measured in this process on one goroutine with the
// controller's own code: parsing a node's CSR and checking its
// self-signature (the proof that the node holds the key), then issuing
// the controller's node certificate (controller.NodeLeaf) with
// controller/ca, an ECDSA signature which Go's x509 checks once more, and
// encoding the chain. With everything else free (HTTP, JSON, the store,
// the audit, the garbage collector), enrollments/s ÷ handshakes/s could
// not pass h ÷ (h + floor), h being one handshake's CPU, server and
// clients together.
func cryptoFloor(tmp string, nodes []*node) (time.Duration, error) {
	if len(nodes) == 0 {
		return 0, errors.New("no nodes")
	}
	now := time.Now()
	dir := filepath.Join(tmp, "floor-ca")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	authority, err := ca.Create(dir, "Harmony bench floor CA", now)
	if err != nil {
		return 0, err
	}
	start, err := procstat.CPUTime(os.Getpid())
	if err != nil {
		return 0, err
	}
	for i := range floorRounds {
		n := nodes[i%len(nodes)]
		csr, err := v1.ParseCSR(n.csr)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", n.name, err)
		}
		if err := csr.CheckSignature(); err != nil {
			return 0, fmt.Errorf("%s: CSR signature: %w", n.name, err)
		}
		leaf := controller.NodeLeaf(csr, store.Node{Name: n.name, UID: n.name}, controller.DefaultCertLifetime)
		cert, err := authority.Issue(leaf, now)
		if err != nil {
			return 0, err
		}
		authority.ChainPEM(cert)
	}
	end, err := procstat.CPUTime(os.Getpid())
	if err != nil {
		return 0, err
	}
	return (end - start) / floorRounds, nil
}
