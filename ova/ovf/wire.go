package ovf

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strconv"
)

// Namespaces of the OVF 1.x envelope and VMware's extensions.
const (
	nsOVF  = "http://schemas.dmtf.org/ovf/envelope/1"
	nsRASD = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData"
	nsVSSD = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData"
	nsVMW  = "http://www.vmware.com/schema/ovf"
	nsCIM  = "http://schemas.dmtf.org/wbem/wscim/1/common"
	nsXSI  = "http://www.w3.org/2001/XMLSchema-instance"

	diskFormat      = "http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"
	guestInfo       = TransportGuestInfo
	hostResourceDir = "ovf:/disk/"
)

// CIM resource types used in the hardware section.
const (
	rtCPU    = 3
	rtMemory = 4
	rtSCSI   = 6
	rtNIC    = 10
	rtDisk   = 17
)

// The wire types carry literal prefixes ("ovf:id") in their tags. The
// encoder writes them as is; the parser rewrites resolved namespaces back to
// these prefixes (see canonicalNames), so one set of types serves both ways
// whatever prefixes a foreign descriptor uses.
type envelope struct {
	XMLName    xml.Name `xml:"Envelope"`
	XMLNS      string   `xml:"xmlns,attr,omitempty"`
	XMLNSCIM   string   `xml:"xmlns:cim,attr,omitempty"`
	XMLNSOVF   string   `xml:"xmlns:ovf,attr,omitempty"`
	XMLNSRASD  string   `xml:"xmlns:rasd,attr,omitempty"`
	XMLNSVMW   string   `xml:"xmlns:vmw,attr,omitempty"`
	XMLNSVSSD  string   `xml:"xmlns:vssd,attr,omitempty"`
	XMLNSXSI   string   `xml:"xmlns:xsi,attr,omitempty"`
	Version    string   `xml:"ovf:version,attr,omitempty"`
	References struct {
		Files []fileRef `xml:"File"`
	} `xml:"References"`
	DiskSection struct {
		Info  string     `xml:"Info"`
		Disks []diskElem `xml:"Disk"`
	} `xml:"DiskSection"`
	NetworkSection struct {
		Info     string `xml:"Info"`
		Networks []struct {
			Name        string `xml:"ovf:name,attr"`
			Description string `xml:"Description"`
		} `xml:"Network"`
	} `xml:"NetworkSection"`
	VirtualSystem virtualSystem `xml:"VirtualSystem"`
}

type fileRef struct {
	ID   string `xml:"ovf:id,attr"`
	Href string `xml:"ovf:href,attr"`
	Size string `xml:"ovf:size,attr"`
}

type diskElem struct {
	Capacity      string `xml:"ovf:capacity,attr"`
	CapacityUnits string `xml:"ovf:capacityAllocationUnits,attr,omitempty"`
	DiskID        string `xml:"ovf:diskId,attr"`
	FileRef       string `xml:"ovf:fileRef,attr"`
	Format        string `xml:"ovf:format,attr"`
	PopulatedSize string `xml:"ovf:populatedSize,attr,omitempty"`
}

type virtualSystem struct {
	ID         string `xml:"ovf:id,attr"`
	Info       string `xml:"Info"`
	Name       string `xml:"Name"`
	Annotation *struct {
		Info       string `xml:"Info"`
		Annotation string `xml:"Annotation"`
	} `xml:"AnnotationSection"`
	OperatingSystem struct {
		ID     string `xml:"ovf:id,attr"`
		OSType string `xml:"vmw:osType,attr"`
		Info   string `xml:"Info"`
	} `xml:"OperatingSystemSection"`
	Hardware hardware  `xml:"VirtualHardwareSection"`
	Products []product `xml:"ProductSection"`
}

type hardware struct {
	Transport string `xml:"ovf:transport,attr,omitempty"`
	Info      string `xml:"Info"`
	System    struct {
		ElementName string `xml:"vssd:ElementName"`
		InstanceID  string `xml:"vssd:InstanceID"`
		Identifier  string `xml:"vssd:VirtualSystemIdentifier"`
		Type        string `xml:"vssd:VirtualSystemType"`
	} `xml:"System"`
	Items   []item      `xml:"Item"`
	Configs []vmwConfig `xml:"vmw:Config"`
}

type item struct {
	Required        string      `xml:"ovf:required,attr,omitempty"`
	Address         string      `xml:"rasd:Address,omitempty"`
	AddressOnParent string      `xml:"rasd:AddressOnParent,omitempty"`
	AllocationUnits string      `xml:"rasd:AllocationUnits,omitempty"`
	AutoAllocation  string      `xml:"rasd:AutomaticAllocation,omitempty"`
	Connection      string      `xml:"rasd:Connection,omitempty"`
	Description     string      `xml:"rasd:Description,omitempty"`
	ElementName     string      `xml:"rasd:ElementName"`
	HostResource    string      `xml:"rasd:HostResource,omitempty"`
	InstanceID      string      `xml:"rasd:InstanceID"`
	Parent          string      `xml:"rasd:Parent,omitempty"`
	ResourceSubType string      `xml:"rasd:ResourceSubType,omitempty"`
	ResourceType    string      `xml:"rasd:ResourceType"`
	VirtualQuantity string      `xml:"rasd:VirtualQuantity,omitempty"`
	Configs         []vmwConfig `xml:"vmw:Config"`
}

type vmwConfig struct {
	Required string `xml:"ovf:required,attr"`
	Key      string `xml:"vmw:key,attr"`
	Value    string `xml:"vmw:value,attr"`
}

type product struct {
	Info        string     `xml:"Info"`
	Product     string     `xml:"Product,omitempty"`
	Vendor      string     `xml:"Vendor,omitempty"`
	Version     string     `xml:"Version,omitempty"`
	FullVersion string     `xml:"FullVersion,omitempty"`
	Properties  []property `xml:"Property"`
}

type property struct {
	Key              string `xml:"ovf:key,attr"`
	Type             string `xml:"ovf:type,attr"`
	Qualifiers       string `xml:"vmw:qualifiers,attr,omitempty"`
	UserConfigurable string `xml:"ovf:userConfigurable,attr,omitempty"`
	Value            string `xml:"ovf:value,attr"`
	Label            string `xml:"Label,omitempty"`
	Description      string `xml:"Description,omitempty"`
}

// Render validates d and returns its OVF descriptor. The same Descriptor
// always gives the same bytes: no timestamps, no map iteration.
func Render(d *Descriptor) ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("ovf: invalid descriptor: %w", err)
	}
	env := toWire(d)
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	enc.Indent("", "  ")
	if err := enc.Encode(env); err != nil {
		return nil, fmt.Errorf("ovf: encode: %w", err)
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func toWire(d *Descriptor) *envelope {
	e := &envelope{
		XMLNS: nsOVF, XMLNSCIM: nsCIM, XMLNSOVF: nsOVF, XMLNSRASD: nsRASD,
		XMLNSVMW: nsVMW, XMLNSVSSD: nsVSSD, XMLNSXSI: nsXSI, Version: "1.0",
	}
	e.DiskSection.Info = "Virtual disk information"
	for i, k := range d.Disks {
		fid := fmt.Sprintf("file%d", i+1)
		e.References.Files = append(e.References.Files, fileRef{ID: fid, Href: k.File, Size: itoa(k.FileSize)})
		e.DiskSection.Disks = append(e.DiskSection.Disks, diskElem{
			Capacity: itoa(k.Capacity), CapacityUnits: "byte", DiskID: k.ID, FileRef: fid,
			Format: diskFormat, PopulatedSize: itoa(k.PopulatedSize),
		})
	}
	e.NetworkSection.Info = "The list of logical networks"
	e.NetworkSection.Networks = append(e.NetworkSection.Networks, struct {
		Name        string `xml:"ovf:name,attr"`
		Description string `xml:"Description"`
	}{Name: d.Network, Description: "The " + d.Network + " network"})

	vs := &e.VirtualSystem
	vs.ID, vs.Info, vs.Name = d.Name, "A virtual machine", d.Name
	if d.Annotation != "" {
		vs.Annotation = &struct {
			Info       string `xml:"Info"`
			Annotation string `xml:"Annotation"`
		}{Info: "A human-readable annotation", Annotation: d.Annotation}
	}
	vs.OperatingSystem.ID = "1" // CIM "Other"; vmw:osType carries the real guest id
	vs.OperatingSystem.OSType = d.OSType
	vs.OperatingSystem.Info = "The operating system installed"

	hw := &vs.Hardware
	hw.Transport = guestInfo
	hw.Info = "Virtual hardware requirements"
	hw.System.ElementName = "Virtual Hardware Family"
	hw.System.InstanceID = "0"
	hw.System.Identifier = d.Name
	hw.System.Type = fmt.Sprintf("vmx-%d", d.hardwareVersion())
	hw.Items = append(hw.Items,
		item{AllocationUnits: "hertz * 10^6", Description: "Number of Virtual CPUs",
			ElementName: fmt.Sprintf("%d virtual CPU(s)", d.CPUs), InstanceID: "1",
			ResourceType: strconv.Itoa(rtCPU), VirtualQuantity: strconv.Itoa(d.CPUs)},
		item{AllocationUnits: "byte * 2^20", Description: "Memory Size",
			ElementName: fmt.Sprintf("%dMB of memory", d.MemoryMiB), InstanceID: "2",
			ResourceType: strconv.Itoa(rtMemory), VirtualQuantity: strconv.Itoa(d.MemoryMiB)},
		item{Address: "0", Description: "SCSI Controller", ElementName: "SCSI controller 0",
			InstanceID: "3", ResourceSubType: "VirtualSCSI", ResourceType: strconv.Itoa(rtSCSI)},
	)
	next := 4
	for i, k := range d.Disks {
		unit := i
		if unit >= 7 { // unit 7 is the controller's own
			unit++
		}
		hw.Items = append(hw.Items, item{AddressOnParent: strconv.Itoa(unit),
			ElementName: fmt.Sprintf("Hard disk %d", i+1), HostResource: hostResourceDir + k.ID,
			InstanceID: strconv.Itoa(next), Parent: "3", ResourceType: strconv.Itoa(rtDisk)})
		next++
	}
	hw.Items = append(hw.Items, item{AddressOnParent: "7", AutoAllocation: "true", Connection: d.Network,
		Description: "VmxNet3 ethernet adapter", ElementName: "Network adapter 1",
		InstanceID: strconv.Itoa(next), ResourceSubType: "VmxNet3", ResourceType: strconv.Itoa(rtNIC)})
	hw.Configs = []vmwConfig{
		{Required: "false", Key: "firmware", Value: "efi"},
		{Required: "false", Key: "bootOptions.efiSecureBootEnabled", Value: "false"},
		{Required: "false", Key: "tools.syncTimeWithHost", Value: "false"},
	}

	p := product{Info: "Information about the installed software", Product: d.Product.Product,
		Vendor: d.Product.Vendor, Version: d.Product.Version, FullVersion: d.Product.FullVersion}
	for _, q := range d.Properties {
		w := property{Key: q.Key, Type: q.Type, UserConfigurable: strconv.FormatBool(q.UserConfigurable),
			Value: q.Default, Label: q.Label, Description: q.Description}
		if q.Type == TypeIP {
			w.Type, w.Qualifiers = TypeString, "Ip"
		}
		p.Properties = append(p.Properties, w)
	}
	vs.Products = []product{p}
	return e
}
