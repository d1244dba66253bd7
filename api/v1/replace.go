package v1

import "io"

// ReplaceNodeRequest is the body of POST
// PathClusters/{name}/nodes/{node}/replace: replace one master whose VM
// is broken (a guest that no longer boots, a VM that misbehaves) by a new
// VM of the same name, address, BIOS UUID, role and image, one recorded
// step at a time, as an upgrade replaces a master. The old VM hands over
// if its agent still answers; one powered off, gone silent or past its
// hand-over deadline is powered off without. The new VM takes the old
// VM's data disk and comes back as the same etcd member, unless
// FreshDisk. A new VM that is not Ready in time is rolled back: the old VM
// gets its name and disk back.
type ReplaceNodeRequest struct {
	// FreshDisk gives the new VM a new, empty data disk instead of the old
	// VM's (one that is lost or damaged): it joins etcd as a new member in
	// place of the old, which it removes. The old disk's file is kept.
	FreshDisk bool `json:"freshDisk,omitempty"`
}

// DecodeReplaceNodeRequest reads and checks a replace-node request; an
// empty body asks for the defaults.
func DecodeReplaceNodeRequest(r io.Reader) (*ReplaceNodeRequest, error) {
	var req ReplaceNodeRequest
	if err := decodeOptional(r, MaxAdminBytes, &req); err != nil {
		return nil, err
	}
	return &req, nil
}
