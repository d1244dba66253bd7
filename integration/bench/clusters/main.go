// Command clusters benchmarks the controller's cluster workflows against
// an in-process vcsim (govmomi v0.56.0's simulator).
//
// It starts bin/harmony-controller as a separate process, applies a
// provider, imports a small node OVA, then times the creation and deletion
// of a 3-master, 2-worker cluster and of a 3-master, W-worker cluster, with
// the controller's CPU time and memory. As the reference, measured in the
// same run against the same simulator, it clones, reconfigures and powers
// on the same number of VMs straight through govmomi with the same
// parallelism: the floor the workflow's bookkeeping sits on.
//
// Then, on a 3+2 cluster, the access paths: local logins (argon2id) next
// to the KDF's own rate, LDAP logins against a real slapd next to a raw
// connect-search-bind, and users' cluster credentials next to raw P-256
// signatures.
//
// Last, a cluster's new operation in a store that holds the finished
// operations of a hundred other clusters, next to a bare synced commit.
//
// Targets (printed as met or not met; nothing is asserted): 3+2 under 30 s
// and 3+100 under 3 min.
//
//	make bench-clusters
//	go run ./integration/bench/clusters -workers 100 -parallelism 8
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/integration/bench/procstat"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

func main() {
	workers := flag.Int("workers", 100, "workers of the large cluster")
	parallelism := flag.Int("parallelism", 8, "the controller's --clone-parallelism")
	accessRounds := flag.Int("access-rounds", 20, "logins per access row (credentials and operations: ten times as many)")
	historyClusters := flag.Int("history-clusters", 100, "clusters whose finished operations fill the store of the operations row")
	binDir := flag.String("bin", "", "directory holding harmony-controller (default $HARMONY_BIN, else ./bin)")
	flag.Parse()
	if *binDir == "" {
		*binDir = os.Getenv("HARMONY_BIN")
	}
	if *binDir == "" {
		*binDir = "bin"
	}
	if err := run(*binDir, *workers, *parallelism, *accessRounds, *historyClusters); err != nil {
		fmt.Fprintln(os.Stderr, "bench clusters:", err)
		os.Exit(1)
	}
}

type bench struct {
	sim  *vcsim.Sim
	c    *client.Client
	proc *exec.Cmd
	img  string
}

func run(binDir string, workers, parallelism, accessRounds, historyClusters int) error {
	ctx := context.Background()
	sim, err := vcsim.Start(vcsim.Options{Hosts: 8})
	if err != nil {
		return err
	}
	defer sim.Close()
	dir, err := os.MkdirTemp("", "bench-clusters-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	port, err := freePort()
	if err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	proc := exec.Command(filepath.Join(binDir, "harmony-controller"), "serve", "--data-dir", filepath.Join(dir, "data"),
		"--listen", "127.0.0.1:"+port, "--clone-parallelism", strconv.Itoa(parallelism), "--log-level", "warn")
	proc.Stdout, proc.Stderr = logFile, logFile
	if err := proc.Start(); err != nil {
		return fmt.Errorf("start controller: %w", err)
	}
	defer func() { proc.Process.Kill(); proc.Wait() }()
	b := &bench{sim: sim, proc: proc}
	if b.c, err = waitClient(filepath.Join(dir, "data", "admin.conf")); err != nil {
		return err
	}
	p := sim.Provider("bench", &v1.IPPool{Network: "198.18.40.0/22", Ranges: []string{"198.18.40.10-198.18.43.250"}, Gateway: "198.18.40.1"})
	if _, err := b.c.ApplyProvider(ctx, &p); err != nil {
		return fmt.Errorf("apply provider: %w", err)
	}
	if b.img, err = b.importImage(ctx, dir); err != nil {
		return err
	}
	mem0, _ := procstat.ReadMemory(proc.Process.Pid)

	fmt.Printf("cluster workflows against in-process vcsim (govmomi v0.56.0), clone parallelism %d\n", parallelism)
	fmt.Printf("%-22s %12s %14s %12s %14s %12s\n", "cluster", "create", "controller CPU", "delete", "direct govmomi", "ratio")
	for _, size := range []struct {
		workers int
		target  time.Duration
	}{{2, 30 * time.Second}, {workers, 3 * time.Minute}} {
		name := fmt.Sprintf("b%d", size.workers)
		cpu0, _ := procstat.CPUTime(proc.Process.Pid)
		s := spec(name, b.img, size.workers)
		created, err := b.timed(ctx, func() (*v1.Operation, error) { return b.c.CreateCluster(ctx, &s) })
		if err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
		cpu1, _ := procstat.CPUTime(proc.Process.Pid)
		deleted, err := b.timed(ctx, func() (*v1.Operation, error) { return b.c.DeleteCluster(ctx, name, true) })
		if err != nil {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		direct, err := directClones(ctx, sim, 3+size.workers, parallelism)
		if err != nil {
			return fmt.Errorf("reference clones: %w", err)
		}
		verdict := "met"
		if created > size.target {
			verdict = "NOT met"
		}
		fmt.Printf("%-22s %12s %14s %12s %14s %11.2fx   target < %s: %s\n", fmt.Sprintf("3 masters + %d workers", size.workers),
			created.Round(time.Millisecond), (cpu1 - cpu0).Round(time.Millisecond), deleted.Round(time.Millisecond),
			direct.Round(time.Millisecond), float64(created)/float64(direct), size.target, verdict)
	}
	mem1, err := procstat.ReadMemory(proc.Process.Pid)
	if err != nil {
		return err
	}
	fmt.Printf("controller memory: %.1f MiB RSS after the provider and image, %.1f MiB RSS now, %.1f MiB peak (VmHWM)\n",
		mib(mem0.RSS), mib(mem1.RSS), mib(mem1.HWM))

	s := spec("access", b.img, 2)
	if _, err := b.timed(ctx, func() (*v1.Operation, error) { return b.c.CreateCluster(ctx, &s) }); err != nil {
		return fmt.Errorf("create access: %w", err)
	}
	if err := b.benchAccess(ctx, dir, filepath.Join(dir, "data", "admin.conf"), "access", accessRounds); err != nil {
		return err
	}
	return benchOperations(dir, historyClusters, accessRounds*10)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func spec(name, image string, workers int) v1.ClusterSpec {
	masters := 3
	return v1.ClusterSpec{APIVersion: v1.APIVersion, Kind: "Cluster", Name: name, Provider: "bench", Image: image,
		Masters: &masters, Workers: workers, VIP: "198.18.43.250", PodCIDR: "198.19.0.0/17", ServiceCIDR: "198.19.128.0/20",
		WorkerSize: &v1.NodeSize{CPUs: 1, MemoryMiB: 2048}, MasterDataDiskGiB: 8}
}

// timed starts an operation and follows it to its end.
func (b *bench) timed(ctx context.Context, start func() (*v1.Operation, error)) (time.Duration, error) {
	t0 := time.Now()
	op, err := start()
	if err != nil {
		return 0, err
	}
	if op, err = b.c.WaitOperation(ctx, op.ID, nil); err != nil {
		return 0, err
	}
	if op.State != v1.OperationSucceeded {
		return 0, errors.New(op.Message)
	}
	return time.Since(t0), nil
}

func (b *bench) importImage(ctx context.Context, dir string) (string, error) {
	path := filepath.Join(dir, "node.ova")
	if err := vcsim.NodeOVA(ctx, path, "bench"); err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, _ := f.Stat()
	op, _, err := b.c.ImportImage(ctx, "bench", f, st.Size())
	if err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	// No operation: this very OVA is imported already.
	if op == nil {
		return "harmony-node-bench", nil
	}
	if op, err = b.c.WaitOperation(ctx, op.ID, nil); err != nil {
		return "", err
	}
	if op.State != v1.OperationSucceeded {
		return "", fmt.Errorf("import: %s", op.Message)
	}
	return "harmony-node-bench", nil
}

// directClones is the reference: n linked clones of the same template,
// each reconfigured and powered on, straight through govmomi with the
// same parallelism and no bookkeeping, then destroyed.
func directClones(ctx context.Context, sim *vcsim.Sim, n, parallelism int) (time.Duration, error) {
	u, _ := url.Parse(sim.URL)
	u.User = url.UserPassword(sim.Username, sim.Password)
	c, err := govmomi.NewClient(ctx, u, true)
	if err != nil {
		return 0, err
	}
	defer c.Logout(ctx)
	f := find.NewFinder(c.Client)
	tmpl, err := f.VirtualMachine(ctx, "/DC0/vm/harmony/templates/harmony-node-bench")
	if err != nil {
		return 0, err
	}
	snap, err := tmpl.FindSnapshot(ctx, "harmony-base")
	if err != nil {
		return 0, err
	}
	cl, err := f.ClusterComputeResource(ctx, "/DC0/host/DC0_C0")
	if err != nil {
		return 0, err
	}
	pool, err := cl.ResourcePool(ctx)
	if err != nil {
		return 0, err
	}
	vmFolder, err := f.Folder(ctx, "/DC0/vm")
	if err != nil {
		return 0, err
	}
	folder, err := vmFolder.CreateFolder(ctx, "reference")
	if err != nil {
		return 0, err
	}
	poolRef := pool.Reference()
	start := time.Now()
	sem := make(chan struct{}, parallelism)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	refs := make([]types.ManagedObjectReference, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			task, err := tmpl.Clone(ctx, folder, fmt.Sprintf("ref-%d", i), types.VirtualMachineCloneSpec{
				Location: types.VirtualMachineRelocateSpec{Pool: &poolRef, DiskMoveType: string(types.VirtualMachineRelocateDiskMoveOptionsCreateNewChildDiskBacking)},
				Snapshot: snap})
			var info *types.TaskInfo
			if err == nil {
				info, err = task.WaitForResult(ctx)
			}
			if err != nil {
				errs <- err
				return
			}
			vm := object.NewVirtualMachine(c.Client, info.Result.(types.ManagedObjectReference))
			refs[i] = vm.Reference()
			if task, err = vm.Reconfigure(ctx, types.VirtualMachineConfigSpec{NumCPUs: 1, MemoryMB: 2048}); err == nil {
				err = task.Wait(ctx)
			}
			if err == nil {
				if task, err = vm.PowerOn(ctx); err == nil {
					err = task.Wait(ctx)
				}
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	for _, ref := range refs {
		vm := object.NewVirtualMachine(c.Client, ref)
		if task, err := vm.PowerOff(ctx); err == nil {
			_ = task.Wait(ctx)
		}
		if task, err := vm.Destroy(ctx); err == nil {
			_ = task.Wait(ctx)
		}
	}
	if task, err := folder.Destroy(ctx); err == nil {
		_ = task.Wait(ctx)
	}
	return took, nil
}

func waitClient(conf string) (*client.Client, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cfg, err := clientconfig.Load(conf)
		if err == nil {
			c, err := client.New(cfg, "")
			if err == nil {
				if _, err = c.Providers(context.Background()); err == nil {
					return c, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("controller did not come up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port, nil
}
