package ovf

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func sample() *Descriptor {
	return &Descriptor{
		Name:            "harmony-control-plane",
		Annotation:      "Harmony control-plane appliance",
		HardwareVersion: 15,
		CPUs:            4,
		MemoryMiB:       8192,
		OSType:          "debian12_64Guest",
		Network:         "VM Network",
		Disks: []Disk{
			{ID: "vmdisk1", File: "harmony-disk1.vmdk", FileSize: 123456, Capacity: 20 << 30, PopulatedSize: 3 << 30},
			{ID: "vmdisk2", File: "harmony-data.vmdk", FileSize: 4096, Capacity: 50 << 30, PopulatedSize: 0},
		},
		Product: Product{Product: "Harmony", Vendor: "Harmony", Version: "0.1.0", FullVersion: "0.1.0+abc"},
		Properties: []Property{
			{Key: "hostname", Type: TypeString, UserConfigurable: true, Label: "Hostname", Description: "The host name"},
			{Key: "ip0", Type: TypeIP, UserConfigurable: true, Label: "IP address", Description: "Static address", Default: "198.18.0.10"},
			{Key: "prefix", Type: TypeInt, UserConfigurable: true, Label: "Prefix", Default: "24"},
			{Key: "ssh", Type: TypeBoolean, UserConfigurable: true, Label: "SSH", Default: "false"},
			{Key: "version.etcd", Type: TypeString, Label: "etcd", Default: "3.4.23"},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	d := sample()
	d.Network = "VM-Network" // spaces are not in keyPattern; see TestValidateNames
	out, err := Render(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(out)
	if err != nil {
		t.Fatalf("parse own output: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(got, d) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got, d)
	}
	again, err := Render(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, again) {
		t.Fatal("render(parse(render(d))) differs from render(d)")
	}
}

func TestValidateNames(t *testing.T) {
	if _, err := Render(sample()); err == nil || !strings.Contains(err.Error(), "network") {
		t.Fatalf("network with a space: got %v, want an error naming network", err)
	}
}

func TestStructure(t *testing.T) {
	d := sample()
	d.Network = "nic0"
	d.HardwareVersion = 0
	out, err := Render(d)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		`<vssd:VirtualSystemType>vmx-15</vssd:VirtualSystemType>`,
		`<vmw:Config ovf:required="false" vmw:key="firmware" vmw:value="efi"></vmw:Config>`,
		`<rasd:ResourceSubType>VirtualSCSI</rasd:ResourceSubType>`,
		`<rasd:ResourceSubType>VmxNet3</rasd:ResourceSubType>`,
		`<rasd:Connection>nic0</rasd:Connection>`,
		`<VirtualHardwareSection ovf:transport="com.vmware.guestInfo">`,
		`<File ovf:id="file1" ovf:href="harmony-disk1.vmdk" ovf:size="123456"></File>`,
		`ovf:capacity="21474836480" ovf:capacityAllocationUnits="byte" ovf:diskId="vmdisk1" ovf:fileRef="file1"`,
		`ovf:populatedSize="3221225472"`,
		`<rasd:HostResource>ovf:/disk/vmdisk2</rasd:HostResource>`,
		`<Property ovf:key="ip0" ovf:type="string" vmw:qualifiers="Ip" ovf:userConfigurable="true" ovf:value="198.18.0.10">`,
		`<Property ovf:key="version.etcd" ovf:type="string" ovf:userConfigurable="false" ovf:value="3.4.23">`,
		`<Label>Hostname</Label>`,
		`xmlns:vmw="http://www.vmware.com/schema/ovf"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("descriptor lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(s)
	}
	d.HardwareVersion = 19
	out, _ = Render(d)
	if !strings.Contains(string(out), "vmx-19<") {
		t.Error("HardwareVersion 19 not rendered as vmx-19")
	}
}

func TestDeterministic(t *testing.T) {
	d := sample()
	d.Network = "nic0"
	a, err := Render(d)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		b, _ := Render(sample2(d))
		if !bytes.Equal(a, b) {
			t.Fatal("two renders of the same descriptor differ")
		}
	}
}

func sample2(d *Descriptor) *Descriptor { c := *d; return &c }

// A descriptor written by another tool, with other prefixes and a capacity
// in MiB, parses to the same model.
func TestParseForeignPrefixes(t *testing.T) {
	src := `<?xml version="1.0"?>
<o:Envelope xmlns:o="http://schemas.dmtf.org/ovf/envelope/1" xmlns:r="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData" xmlns:s="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData" xmlns:v="http://www.vmware.com/schema/ovf">
 <o:References><o:File o:id="f" o:href="a.vmdk" o:size="100"/></o:References>
 <o:DiskSection><o:Disk o:capacity="2" o:capacityAllocationUnits="byte * 2^20" o:diskId="d1" o:fileRef="f" o:format="http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"/></o:DiskSection>
 <o:NetworkSection><o:Network o:name="net"/></o:NetworkSection>
 <o:VirtualSystem o:id="vm">
  <o:OperatingSystemSection o:id="1" v:osType="otherGuest64"/>
  <o:VirtualHardwareSection o:transport="iso com.vmware.guestInfo">
   <o:System><s:VirtualSystemType>vmx-17</s:VirtualSystemType></o:System>
   <o:Item><r:InstanceID>1</r:InstanceID><r:ResourceType>3</r:ResourceType><r:VirtualQuantity>2</r:VirtualQuantity></o:Item>
   <o:Item><r:AllocationUnits>byte * 2^20</r:AllocationUnits><r:InstanceID>2</r:InstanceID><r:ResourceType>4</r:ResourceType><r:VirtualQuantity>1024</r:VirtualQuantity></o:Item>
   <o:Item><r:InstanceID>3</r:InstanceID><r:ResourceSubType>VirtualSCSI</r:ResourceSubType><r:ResourceType>6</r:ResourceType></o:Item>
   <o:Item><r:HostResource>ovf:/disk/d1</r:HostResource><r:InstanceID>4</r:InstanceID><r:Parent>3</r:Parent><r:ResourceType>17</r:ResourceType></o:Item>
   <o:Item><r:Connection>net</r:Connection><r:InstanceID>5</r:InstanceID><r:ResourceSubType>VmxNet3</r:ResourceSubType><r:ResourceType>10</r:ResourceType></o:Item>
   <v:Config v:key="firmware" v:value="efi"/>
  </o:VirtualHardwareSection>
 </o:VirtualSystem>
</o:Envelope>`
	d, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := Disk{ID: "d1", File: "a.vmdk", FileSize: 100, Capacity: 2 << 20}
	if len(d.Disks) != 1 || d.Disks[0] != want || d.HardwareVersion != 17 || d.MemoryMiB != 1024 || d.Network != "net" || d.OSType != "otherGuest64" {
		t.Fatalf("parsed %+v", d)
	}
}

func TestParseRejects(t *testing.T) {
	d := sample()
	d.Network = "nic0"
	good, err := Render(d)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, old, new, want string }{
		{"unknown fileRef", `ovf:fileRef="file2"`, `ovf:fileRef="file9"`, `Disk[2] ovf:fileRef "file9": no such File`},
		{"zero capacity", `ovf:capacity="21474836480"`, `ovf:capacity="0"`, `Disk[1] ovf:capacity: want > 0`},
		{"negative size", `ovf:size="4096"`, `ovf:size="-1"`, `File[2] ovf:size "-1"`},
		{"populated above capacity", `ovf:populatedSize="3221225472"`, `ovf:populatedSize="99999999999999"`, `populatedSize 99999999999999`},
		{"duplicate disk id", `ovf:diskId="vmdisk2"`, `ovf:diskId="vmdisk1"`, `ovf:diskId "vmdisk1": duplicate`},
		{"duplicate file id", `ovf:id="file2"`, `ovf:id="file1"`, `ovf:id "file1": duplicate`},
		{"duplicate property", `ovf:key="prefix"`, `ovf:key="ip0"`, `duplicate key`},
		{"bios firmware", `vmw:value="efi"`, `vmw:value="bios"`, `firmware`},
		{"lsilogic", `VirtualSCSI`, `lsilogic`, `want VirtualSCSI`},
		{"e1000", `VmxNet3<`, `E1000<`, `want VmxNet3`},
		{"no transport", ` ovf:transport="com.vmware.guestInfo"`, ``, `ovf:transport`},
		{"bad vmx", `vmx-15`, `vmx-x`, `VirtualSystemType "vmx-x"`},
		{"duplicate instance id", `<rasd:InstanceID>2</rasd:InstanceID>`, `<rasd:InstanceID>1</rasd:InstanceID>`, `rasd:InstanceID "1": missing or duplicate`},
		{"unknown unit", `ovf:capacityAllocationUnits="byte"`, `ovf:capacityAllocationUnits="furlong"`, `capacityAllocationUnits "furlong"`},
		{"bad int default", `ovf:value="24"`, `ovf:value="twenty"`, `not an int`},
		{"bad ip default", `ovf:value="198.18.0.10"`, `ovf:value="198.18.0.300"`, `not an IP`},
		{"path in href", `ovf:href="harmony-data.vmdk"`, `ovf:href="../etc/passwd"`, `File[2] ovf:href`},
		{"dangling host resource", `ovf:/disk/vmdisk2`, `ovf:/disk/vmdisk7`, `rasd:HostResource "ovf:/disk/vmdisk7"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := strings.Replace(string(good), c.old, c.new, 1)
			if in == string(good) {
				t.Fatalf("test setup: %q not in descriptor", c.old)
			}
			_, err := Parse([]byte(in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want error containing %q", err, c.want)
			}
		})
	}
}

func TestRenderRejectsControlCharacters(t *testing.T) {
	d := sample()
	d.Network = "nic0"
	d.Properties[0].Label = "Host\x01name"
	if _, err := Render(d); err == nil || !strings.Contains(err.Error(), "properties[0].label: control character U+0001") {
		t.Fatalf("got %v", err)
	}
}
