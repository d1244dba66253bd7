package vsphere

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"sync"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Session is a logged-in connection to a provider's vCenter, with the
// provider's inventory resolved.
type Session struct {
	Client   *govmomi.Client
	Provider v1.Provider

	finder     *find.Finder
	datacenter *object.Datacenter
	pool       *object.ResourcePool
	// cluster is the compute cluster that owns pool, or nil on a
	// standalone host.
	cluster *object.ClusterComputeResource
	folder  *object.Folder
	network object.NetworkReference

	// files is held exclusively by datastore file operations (make a
	// folder, create, stat or delete a disk) and shared by VM changes
	// that move datastore space (clone, reconfigure, destroy). govmomi's
	// simulator (v0.56.0) reads a datastore's summary unlocked in its file
	// manager while VM changes write it, a data race the race detector
	// catches; on a real vCenter this costs nothing that matters, as file
	// operations are short.
	files sync.RWMutex
}

// idleConnsPerVCenter bounds the connections kept open to a vCenter
// between requests; above the clone parallelism's default, so that
// parallel steps reuse them.
const idleConnsPerVCenter = 32

// Connect logs in to the provider's vCenter and resolves its datacenter,
// resource pool, folder (created if missing) and network. The password
// never goes into a URL, so no error or log line can carry it.
func Connect(ctx context.Context, p v1.Provider) (*Session, error) {
	u, err := url.Parse(p.VCenter.URL)
	if err != nil {
		return nil, fmt.Errorf("vcenter.url: %w", err)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = vim25.Path
	}
	sc := soap.NewClient(u, p.VCenter.Insecure)
	// Go keeps 2 idle connections per host by default: with clones,
	// reconfigures and task waits in flight at once, every request beyond
	// two paid a new TLS handshake with vCenter (14% of the controller's
	// CPU in a 100-worker create).
	sc.DefaultTransport().MaxIdleConnsPerHost = idleConnsPerVCenter
	if p.VCenter.Thumbprint != "" {
		sc.SetThumbprint(u.Host, p.VCenter.Thumbprint)
	}
	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", u.Host, err)
	}
	sm := session.NewManager(vc)
	if err := sm.Login(ctx, url.UserPassword(p.VCenter.Username, p.VCenter.Password)); err != nil {
		return nil, fmt.Errorf("log in to %s as %s: %w", u.Host, p.VCenter.Username, err)
	}
	s := &Session{Client: &govmomi.Client{Client: vc, SessionManager: sm}, Provider: p}
	if err := s.resolve(ctx); err != nil {
		_ = sm.Logout(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// Active reports whether the session is still logged in.
func (s *Session) Active(ctx context.Context) bool {
	ok, err := s.Client.SessionManager.SessionIsActive(ctx)
	return err == nil && ok
}

// Logout ends the session.
func (s *Session) Logout(ctx context.Context) error {
	return s.Client.SessionManager.Logout(ctx)
}

func (s *Session) resolve(ctx context.Context) error {
	p := s.Provider
	s.finder = find.NewFinder(s.Client.Client, false)
	var err error
	if s.datacenter, err = s.finder.Datacenter(ctx, p.Datacenter); err != nil {
		return &FieldError{Field: "datacenter", Err: err}
	}
	s.finder.SetDatacenter(s.datacenter)
	if p.ComputeCluster != "" {
		if s.cluster, err = s.finder.ClusterComputeResource(ctx, p.ComputeCluster); err != nil {
			return &FieldError{Field: "computeCluster", Err: err}
		}
	}
	if p.ResourcePool != "" {
		if s.pool, err = s.finder.ResourcePool(ctx, p.ResourcePool); err != nil {
			return &FieldError{Field: "resourcePool", Err: err}
		}
	} else if s.pool, err = s.cluster.ResourcePool(ctx); err != nil {
		return &FieldError{Field: "computeCluster", Err: err}
	}
	if s.cluster == nil {
		var rp mo.ResourcePool
		if err := s.pool.Properties(ctx, s.pool.Reference(), []string{"owner"}, &rp); err != nil {
			return fmt.Errorf("resource pool owner: %w", err)
		}
		if rp.Owner.Type == "ClusterComputeResource" {
			s.cluster = object.NewClusterComputeResource(s.Client.Client, rp.Owner)
		}
	}
	if s.network, err = s.finder.Network(ctx, p.Network); err != nil {
		return &FieldError{Field: "network", Err: err}
	}
	if s.folder, err = s.ensureFolder(ctx, p.Folder); err != nil {
		return &FieldError{Field: "folder", Err: err}
	}
	for i, name := range append(append([]string{}, p.Datastores.OS...), p.Datastores.Data...) {
		if _, err := s.finder.Datastore(ctx, name); err != nil {
			field := fmt.Sprintf("datastores.os[%d]", i)
			if i >= len(p.Datastores.OS) {
				field = fmt.Sprintf("datastores.data[%d]", i-len(p.Datastores.OS))
			}
			return &FieldError{Field: field, Err: err}
		}
	}
	return nil
}

// FieldError is an inventory lookup that failed for a provider field.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// ensureFolder finds a VM folder by path relative to the datacenter's VM
// folder (or absolute), creating what is missing.
func (s *Session) ensureFolder(ctx context.Context, p string) (*object.Folder, error) {
	folders, err := s.datacenter.Folders(ctx)
	if err != nil {
		return nil, fmt.Errorf("datacenter folders: %w", err)
	}
	rel := strings.TrimPrefix(p, folders.VmFolder.InventoryPath)
	current := folders.VmFolder
	for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
		if part == "" {
			continue
		}
		next, err := s.finder.Folder(ctx, path.Join(current.InventoryPath, part))
		var nf *find.NotFoundError
		if errors.As(err, &nf) {
			next, err = current.CreateFolder(ctx, part)
			if isFault[*types.DuplicateName](err) {
				next, err = s.finder.Folder(ctx, path.Join(current.InventoryPath, part))
			}
			if err == nil {
				next.InventoryPath = path.Join(current.InventoryPath, part)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("folder %s: %w", path.Join(current.InventoryPath, part), err)
		}
		current = next
	}
	return current, nil
}

// ClusterFolder is the folder of one cluster's VMs, made if missing.
func (s *Session) ClusterFolder(ctx context.Context, cluster string) (*object.Folder, error) {
	return s.ensureFolder(ctx, path.Join(s.folder.InventoryPath, cluster))
}

// FolderPath is the inventory path of the provider's folder.
func (s *Session) FolderPath() string { return s.folder.InventoryPath }

// isFault reports whether err carries a vSphere fault of type T.
func isFault[T types.BaseMethodFault](err error) bool {
	if err == nil {
		return false
	}
	_, ok := asFault(err).(T)
	return ok
}

// asFault digs the vSphere fault out of a SOAP or task error.
func asFault(err error) types.BaseMethodFault {
	if err == nil {
		return nil
	}
	if soap.IsSoapFault(err) {
		if f, ok := soap.ToSoapFault(err).VimFault().(types.BaseMethodFault); ok {
			return f
		}
	}
	if soap.IsVimFault(err) {
		return soap.ToVimFault(err)
	}
	var te task2Error
	if errors.As(err, &te) {
		return te.Fault()
	}
	return nil
}

// task2Error is how govmomi's task errors expose their fault.
type task2Error interface {
	error
	Fault() types.BaseMethodFault
}

// Permanent reports whether retrying err cannot help: the request itself
// is wrong or forbidden, as opposed to a busy or flaky vCenter.
func Permanent(err error) bool {
	switch asFault(err).(type) {
	case *types.InvalidArgument, *types.NoPermission, *types.NotSupported, *types.InvalidName,
		*types.InvalidDatastorePath, *types.FileNotFound, *types.NotFound:
		return true
	}
	return false
}
