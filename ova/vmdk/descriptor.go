package vmdk

import (
	"fmt"
	"strings"
)

// Adapter types an OVA's disk controller can be; the descriptor names it.
const (
	AdapterLSILogic = "lsilogic"
	AdapterPVSCSI   = "pvscsi"
)

// descriptor renders the embedded text descriptor. SCSI adapters use the
// 255-head, 63-sector geometry VMware gives SCSI disks.
func descriptor(capacitySectors uint64, o *Options) string {
	const heads, sectors = 255, 63
	cylinders := capacitySectors / (heads * sectors)
	if cylinders > 65535 {
		cylinders = 65535
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Disk DescriptorFile\n")
	fmt.Fprintf(&b, "version=1\n")
	fmt.Fprintf(&b, "CID=%08x\n", o.CID)
	fmt.Fprintf(&b, "parentCID=ffffffff\n")
	fmt.Fprintf(&b, "createType=\"streamOptimized\"\n\n")
	fmt.Fprintf(&b, "# Extent description\n")
	fmt.Fprintf(&b, "RW %d SPARSE %q\n\n", capacitySectors, o.ExtentName)
	fmt.Fprintf(&b, "# The Disk Data Base\n#DDB\n\n")
	fmt.Fprintf(&b, "ddb.adapterType = %q\n", o.Adapter)
	fmt.Fprintf(&b, "ddb.geometry.cylinders = \"%d\"\n", cylinders)
	fmt.Fprintf(&b, "ddb.geometry.heads = \"%d\"\n", heads)
	fmt.Fprintf(&b, "ddb.geometry.sectors = \"%d\"\n", sectors)
	fmt.Fprintf(&b, "ddb.virtualHWVersion = \"%d\"\n", o.VirtualHWVersion)
	return b.String()
}
