package cluster

import (
	"context"
	"errors"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

// precheckTimeout bounds the vCenter reads a request makes before it
// creates anything.
const precheckTimeout = time.Minute

// precheck places the new machines' disks on the provider's datastores
// and checks the compute resource, before anything is created.
func precheck(ctx context.Context, s *vsphere.Session, rec *record, add []machine) error {
	capacity, err := s.Capacity(ctx)
	if err != nil {
		return refuse(Unreachable, "", "read capacity: %v", err)
	}
	p := s.Provider
	var reqs []vsphere.DiskRequest
	var cpus, mem []int
	for _, m := range add {
		reqs = append(reqs, vsphere.DiskRequest{ID: m.Name + "/os", Bytes: rec.TemplateBytes, Datastores: p.Datastores.OS})
		size := rec.Spec.WorkerSize
		if m.Role == v1.RoleMaster {
			size = rec.Spec.MasterSize
			reqs = append(reqs, vsphere.DiskRequest{ID: m.Name + "/data", Bytes: int64(rec.Spec.MasterDataDiskGiB) << 30, Datastores: p.DataDatastores()})
		}
		cpus, mem = append(cpus, size.CPUs), append(mem, size.MemoryMiB)
	}
	placed, err := capacity.Place(reqs, func(r vsphere.DiskRequest) string {
		if strings.HasSuffix(r.ID, "/data") {
			return "datastores.data"
		}
		return "datastores.os"
	})
	if err != nil {
		return shortfall(err, "")
	}
	if err := capacity.CheckCompute(cpus, mem); err != nil {
		return shortfall(err, "masterSize.cpus")
	}
	for i := range add {
		add[i].OSDatastore = placed[add[i].Name+"/os"]
		add[i].DataDatastore = placed[add[i].Name+"/data"]
	}
	return nil
}

// shortfall turns vCenter's "not enough" into a refusal naming the field;
// sizeField stands in for the generic "size".
func shortfall(err error, sizeField string) error {
	var sf *vsphere.ShortfallError
	if !errors.As(err, &sf) {
		return err
	}
	field := sf.Field
	if field == "size" && sizeField != "" {
		field = sizeField
	}
	return refuse(PrecheckFailed, field, "%s", sf.Message)
}
