package vsphere

import (
	"context"
	"fmt"
	"log/slog"
	"path"

	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// BaseSnapshot is the snapshot every template gets so that clones can be
// linked.
const BaseSnapshot = "harmony-base"

// TemplatesFolder is the subfolder of the provider's folder holding
// imported templates.
const TemplatesFolder = "templates"

// Template is an imported image in vCenter.
type Template struct {
	Path     string
	Snapshot string
	// CapacityBytes is the sum of its disks, what a full clone needs.
	CapacityBytes int64
}

// TemplateImport says which OVA becomes which template.
type TemplateImport struct {
	OVA  string
	Name string
	// OVFNetwork is the network name in the OVF, mapped to the provider's.
	OVFNetwork string
	Progress   func(uploaded int64)
	Log        *slog.Logger
}

// ImportTemplate imports the OVA into the provider's templates folder,
// snapshots it and marks it as a template. A complete template of that
// name is returned as it is; a half-made one (a crash mid-import) is
// destroyed and made again.
func (s *Session) ImportTemplate(ctx context.Context, t TemplateImport) (*Template, error) {
	folder, err := s.ensureFolder(ctx, path.Join(s.folder.InventoryPath, TemplatesFolder))
	if err != nil {
		return nil, err
	}
	if have, err := s.FindTemplate(ctx, t.Name); err != nil || have != nil {
		return have, err
	}
	if vm, err := s.FindVM(ctx, folder, t.Name); err != nil {
		return nil, err
	} else if vm != nil {
		if err := s.Destroy(ctx, vm.Reference()); err != nil {
			return nil, fmt.Errorf("remove the half-imported %s: %w", t.Name, err)
		}
	}
	imported, err := ImportOVA(ctx, s.Client.Client, ImportOptions{
		OVA: t.OVA, Datacenter: s.datacenter.InventoryPath, Datastore: s.Provider.Datastores.OS[0],
		ResourcePool: s.poolPath(), Folder: folder.InventoryPath, Name: t.Name,
		Networks: map[string]string{t.OVFNetwork: s.Provider.Network}, Progress: t.Progress, Log: t.Log,
	})
	if err != nil {
		return nil, err
	}
	vm := s.VM(imported.VM)
	task, err := vm.CreateSnapshot(ctx, BaseSnapshot, "Harmony: linked clones start here", false, false)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err == nil {
		err = vm.MarkAsTemplate(ctx)
	}
	if err != nil {
		_ = s.Destroy(context.WithoutCancel(ctx), imported.VM)
		return nil, fmt.Errorf("make %s a template: %w", t.Name, err)
	}
	return s.FindTemplate(ctx, t.Name)
}

// FindTemplate returns a complete template (marked as a template, with
// its base snapshot) of that name, or nil.
func (s *Session) FindTemplate(ctx context.Context, name string) (*Template, error) {
	folder, err := s.ensureFolder(ctx, path.Join(s.folder.InventoryPath, TemplatesFolder))
	if err != nil {
		return nil, err
	}
	vm, err := s.FindVM(ctx, folder, name)
	if err != nil || vm == nil {
		return nil, err
	}
	var m mo.VirtualMachine
	if err := vm.Properties(ctx, vm.Reference(), []string{"config.template", "config.hardware", "snapshot"}, &m); err != nil {
		return nil, fmt.Errorf("read template %s: %w", name, err)
	}
	if m.Config == nil || !m.Config.Template {
		return nil, nil
	}
	t := &Template{Path: path.Join(folder.InventoryPath, name)}
	if m.Snapshot != nil && hasSnapshot(m.Snapshot.RootSnapshotList, BaseSnapshot) {
		t.Snapshot = BaseSnapshot
	}
	for _, d := range m.Config.Hardware.Device {
		if disk, ok := d.(*types.VirtualDisk); ok {
			t.CapacityBytes += disk.CapacityInBytes
		}
	}
	return t, nil
}

func hasSnapshot(list []types.VirtualMachineSnapshotTree, name string) bool {
	for _, s := range list {
		if s.Name == name || hasSnapshot(s.ChildSnapshotList, name) {
			return true
		}
	}
	return false
}
