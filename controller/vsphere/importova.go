// Package vsphere is the controller's vSphere provider, on govmomi. It
// starts with the import of Harmony's golden OVAs; cloning clusters from
// them builds on it.
package vsphere

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/nfc"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/ovf/importer"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/harmonykaas/harmony/ova/archive"
	"github.com/harmonykaas/harmony/ova/ovf"
)

// ImportOptions say what to import and where to.
type ImportOptions struct {
	// OVA is the file to import.
	OVA string
	// Datacenter is a name or inventory path; empty means the only one.
	Datacenter string
	// Datastore receives the disks.
	Datastore string
	// ResourcePool is an inventory path such as "Cluster/Resources".
	ResourcePool string
	// Folder for the VM; empty means the datacenter's VM folder.
	Folder string
	// Host is optional: the host the VM is registered on.
	Host string
	// Name is the VM's name.
	Name string
	// Networks maps each network the OVF names to a vSphere network.
	Networks map[string]string
	// Properties are values for the OVF's user-configurable properties.
	Properties map[string]string
	// MarkAsTemplate turns the VM into a template for clones.
	MarkAsTemplate bool
	// Progress, if set, is called with the bytes uploaded so far.
	Progress func(uploaded int64)
	Log      *slog.Logger
}

// Imported is the VM an import made.
type Imported struct {
	VM       types.ManagedObjectReference
	Uploaded int64
}

// ImportOVA validates the OVA, creates the import spec with the property
// and network mappings, imports the vApp and uploads each disk over NFC,
// streamed from the archive. On any error the lease is aborted and
// whatever the import created is destroyed: a failed import leaves
// nothing behind.
func ImportOVA(ctx context.Context, c *vim25.Client, o ImportOptions) (*Imported, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	desc, err := checkOVA(ctx, o)
	if err != nil {
		return nil, err
	}
	t, err := resolve(ctx, c, o)
	if err != nil {
		return nil, err
	}

	imp := &importer.Importer{
		Log:          func(s string) (int, error) { log.Info(strings.TrimSpace(s), "ova", o.OVA); return len(s), nil },
		Client:       c,
		Finder:       t.finder,
		Datacenter:   t.datacenter,
		Datastore:    t.datastore,
		ResourcePool: t.pool,
		Host:         t.host,
		Folder:       t.folder,
		Archive:      &importer.TapeArchive{Path: o.OVA, Opener: importer.Opener{Client: c}},
	}
	var props []importer.Property
	for _, k := range sortedKeys(o.Properties) {
		props = append(props, importer.Property{KeyValue: importer.KeyValue{Key: k, Value: o.Properties[k]}})
	}
	var nets []importer.Network
	for _, k := range sortedKeys(o.Networks) {
		nets = append(nets, importer.Network{Name: k, Network: o.Networks[k]})
	}
	name := o.Name
	log.Info("importing OVA", "ova", o.OVA, "name", name, "disks", len(desc.Disks))
	info, lease, err := imp.ImportVApp(ctx, "*.ovf", importer.Options{
		Name: &name, PropertyMapping: props, NetworkMapping: nets, DiskProvisioning: "thin",
	})
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", o.OVA, err)
	}

	uploaded, err := upload(ctx, imp.Archive, lease, info, o.Progress)
	if err == nil {
		err = lease.Complete(ctx)
	}
	if err != nil {
		abortCtx := context.WithoutCancel(ctx)
		_ = lease.Abort(abortCtx, &types.LocalizedMethodFault{Fault: &types.SystemError{Reason: err.Error()}, LocalizedMessage: err.Error()})
		destroy(abortCtx, c, info.Entity, log)
		return nil, fmt.Errorf("import %s: upload: %w", o.OVA, err)
	}
	vm := object.NewVirtualMachine(c, info.Entity)
	if err := ensureBootSettings(ctx, vm, log); err != nil {
		destroy(context.WithoutCancel(ctx), c, info.Entity, log)
		return nil, fmt.Errorf("import %s: %w", o.OVA, err)
	}
	if o.MarkAsTemplate {
		if err := vm.MarkAsTemplate(ctx); err != nil {
			destroy(context.WithoutCancel(ctx), c, info.Entity, log)
			return nil, fmt.Errorf("import %s: mark %s as a template: %w", o.OVA, name, err)
		}
	}
	log.Info("imported OVA", "ova", o.OVA, "vm", info.Entity.Value, "uploaded_bytes", uploaded)
	return &Imported{VM: info.Entity, Uploaded: uploaded}, nil
}

// ensureBootSettings makes sure the VM has what every Harmony OVA says and
// the VM cannot work without: EFI firmware (the disks boot only through
// EFI) and the guestInfo OVF environment transport (how the agent reads
// its properties). vCenter's import applies both from the descriptor;
// an importer that drops them (govmomi's simulator does) gets them set
// here, with a warning.
func ensureBootSettings(ctx context.Context, vm *object.VirtualMachine, log *slog.Logger) error {
	var m mo.VirtualMachine
	if err := vm.Properties(ctx, vm.Reference(), []string{"config.firmware", "config.vAppConfig"}, &m); err != nil {
		return fmt.Errorf("read %s: %w", vm.Reference().Value, err)
	}
	spec := types.VirtualMachineConfigSpec{}
	changed := false
	if m.Config == nil || m.Config.Firmware != string(types.GuestOsDescriptorFirmwareTypeEfi) {
		spec.Firmware = string(types.GuestOsDescriptorFirmwareTypeEfi)
		changed = true
	}
	var transport []string
	if m.Config != nil && m.Config.VAppConfig != nil {
		transport = m.Config.VAppConfig.GetVmConfigInfo().OvfEnvironmentTransport
	}
	if !slices.Contains(transport, ovf.TransportGuestInfo) {
		spec.VAppConfig = &types.VmConfigSpec{OvfEnvironmentTransport: append(transport, ovf.TransportGuestInfo)}
		changed = true
	}
	if !changed {
		return nil
	}
	log.Warn("the import dropped settings the OVF states; setting them", "vm", vm.Reference().Value,
		"firmware", spec.Firmware, "ovf_environment_transport", ovf.TransportGuestInfo)
	task, err := vm.Reconfigure(ctx, spec)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("reconfigure %s: %w", vm.Reference().Value, err)
	}
	return nil
}

// upload streams each disk the lease asks for from the archive.
func upload(ctx context.Context, a importer.Archive, lease *nfc.Lease, info *nfc.LeaseInfo, progress func(int64)) (int64, error) {
	updater := lease.StartUpdater(ctx, info)
	defer updater.Done()
	var total atomic.Int64
	for _, item := range info.Items {
		f, size, err := a.Open(item.Path)
		if err != nil {
			return total.Load(), fmt.Errorf("%s: %w", item.Path, err)
		}
		r := &countingReader{r: f, n: &total, progress: progress}
		err = lease.Upload(ctx, item, r, soap.Upload{ContentLength: size})
		f.Close()
		if err != nil {
			return total.Load(), fmt.Errorf("%s: %w", item.Path, err)
		}
	}
	return total.Load(), nil
}

type countingReader struct {
	r        io.Reader
	n        *atomic.Int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	total := c.n.Add(int64(n))
	if c.progress != nil && n > 0 {
		c.progress(total)
	}
	return n, err
}

// destroy removes a VM a failed import made; the import's own disks go
// with it (they are not persistent disks).
func destroy(ctx context.Context, c *vim25.Client, ref types.ManagedObjectReference, log *slog.Logger) {
	if ref.Value == "" {
		return
	}
	vm := object.NewVirtualMachine(c, ref)
	task, err := vm.Destroy(ctx)
	if err == nil {
		err = task.Wait(ctx)
	}
	// An aborted lease may already have removed it.
	if err != nil && !strings.Contains(err.Error(), "ManagedObjectNotFound") && !strings.Contains(err.Error(), "has already been deleted") {
		log.Warn("could not remove the VM of a failed import", "vm", ref.Value, "err", err)
	}
}

// checkOVA validates the archive and the options against its descriptor.
func checkOVA(ctx context.Context, o ImportOptions) (*ovf.Descriptor, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.OVA == "" {
		bad("ova: required")
	}
	if o.Datastore == "" {
		bad("datastore: required")
	}
	if o.ResourcePool == "" {
		bad("resourcePool: required")
	}
	if o.Name == "" || len(o.Name) > 80 || strings.ContainsAny(o.Name, "/\\%") {
		bad("name %q: want 1-80 characters without '/', '\\' or '%%'", o.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("import options: %w", err)
	}
	f, err := os.Open(o.OVA)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	contents, err := archive.Validate(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", o.OVA, err)
	}
	d := contents.Descriptor

	if _, ok := o.Networks[d.Network]; !ok {
		bad("networks: the OVF's network %q has no mapping", d.Network)
	}
	for k := range o.Networks {
		if k != d.Network {
			bad("networks: %q is not a network the OVF names (it names %q)", k, d.Network)
		}
	}
	known := map[string]ovf.Property{}
	for _, p := range d.Properties {
		known[p.Key] = p
	}
	for _, k := range sortedKeys(o.Properties) {
		p, ok := known[k]
		switch {
		case !ok:
			bad("properties.%s: the OVF has no such property", k)
		case !p.UserConfigurable:
			bad("properties.%s: fixed in the OVF, not user-configurable", k)
		default:
			if err := checkValue(p.Type, o.Properties[k]); err != nil {
				bad("properties.%s: %w", k, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("import options: %w", err)
	}
	return d, nil
}

func checkValue(typ, v string) error {
	switch typ {
	case ovf.TypeInt:
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("%q is not an int", v)
		}
	case ovf.TypeBoolean:
		if v != "true" && v != "false" {
			return fmt.Errorf("%q is not true or false", v)
		}
	case ovf.TypeIP:
		if _, err := netip.ParseAddr(v); err != nil {
			return fmt.Errorf("%q is not an IP address", v)
		}
	}
	return nil
}

// target is the inventory an import goes into.
type target struct {
	finder     *find.Finder
	datacenter *object.Datacenter
	datastore  *object.Datastore
	pool       *object.ResourcePool
	host       *object.HostSystem
	folder     *object.Folder
}

func resolve(ctx context.Context, c *vim25.Client, o ImportOptions) (*target, error) {
	t := &target{finder: find.NewFinder(c, false)}
	var err error
	if o.Datacenter == "" {
		t.datacenter, err = t.finder.DefaultDatacenter(ctx)
	} else {
		t.datacenter, err = t.finder.Datacenter(ctx, o.Datacenter)
	}
	if err != nil {
		return nil, fmt.Errorf("import: datacenter %q: %w", o.Datacenter, err)
	}
	t.finder.SetDatacenter(t.datacenter)
	if t.datastore, err = t.finder.Datastore(ctx, o.Datastore); err != nil {
		return nil, fmt.Errorf("import: datastore %q: %w", o.Datastore, err)
	}
	if t.pool, err = t.finder.ResourcePool(ctx, o.ResourcePool); err != nil {
		return nil, fmt.Errorf("import: resourcePool %q: %w", o.ResourcePool, err)
	}
	if o.Host != "" {
		if t.host, err = t.finder.HostSystem(ctx, o.Host); err != nil {
			return nil, fmt.Errorf("import: host %q: %w", o.Host, err)
		}
	}
	if o.Folder == "" {
		folders, err := t.datacenter.Folders(ctx)
		if err != nil {
			return nil, fmt.Errorf("import: datacenter folders: %w", err)
		}
		t.folder = folders.VmFolder
	} else if t.folder, err = t.finder.Folder(ctx, o.Folder); err != nil {
		return nil, fmt.Errorf("import: folder %q: %w", o.Folder, err)
	}
	for ovfName, network := range o.Networks {
		if _, err := t.finder.Network(ctx, network); err != nil {
			return nil, fmt.Errorf("import: networks.%s: vSphere network %q: %w", ovfName, network, err)
		}
	}
	return t, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
