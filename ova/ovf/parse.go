package ovf

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// maxDescriptor bounds the input: real descriptors are a few kilobytes.
const maxDescriptor = 4 << 20

// prefixes maps the namespaces we read to the prefixes in the wire tags.
var prefixes = map[string]string{nsOVF: "ovf", nsRASD: "rasd", nsVSSD: "vssd", nsVMW: "vmw"}

// canonicalNames hands encoding/xml tokens whose resolved namespaces are
// rewritten to our fixed prefixes, so "ovf:id" in a wire tag matches the
// attribute whatever prefix the author declared for the OVF namespace.
type canonicalNames struct{ d *xml.Decoder }

func (c canonicalNames) Token() (xml.Token, error) {
	tok, err := c.d.Token()
	if err != nil {
		return tok, err
	}
	switch t := tok.(type) {
	case xml.StartElement:
		t.Name = canonical(t.Name, true)
		attrs := make([]xml.Attr, 0, len(t.Attr))
		for _, a := range t.Attr {
			if a.Name.Space == "xmlns" || a.Name.Space == "" && a.Name.Local == "xmlns" {
				continue // already resolved; the outer decoder must not re-resolve
			}
			a.Name = canonical(a.Name, false)
			attrs = append(attrs, a)
		}
		t.Attr = attrs
		return t, nil
	case xml.EndElement:
		t.Name = canonical(t.Name, true)
		return t, nil
	}
	return tok, nil
}

func canonical(n xml.Name, element bool) xml.Name {
	p, ok := prefixes[n.Space]
	if !ok {
		return n
	}
	// The OVF namespace is the default one for elements: leave them bare.
	if element && n.Space == nsOVF {
		return xml.Name{Local: n.Local}
	}
	return xml.Name{Local: p + ":" + n.Local}
}

// Parse reads an OVF descriptor and checks that it is one Parse can stand
// behind: references match disks, sizes are positive and consistent, ids
// and keys are unique, and the hardware is what Harmony images need. Every
// problem found is reported, each naming its element and attribute.
func Parse(data []byte) (*Descriptor, error) {
	if len(data) > maxDescriptor {
		return nil, fmt.Errorf("ovf: descriptor is %d bytes, limit %d", len(data), maxDescriptor)
	}
	var env envelope
	dec := xml.NewTokenDecoder(canonicalNames{xml.NewDecoder(bytes.NewReader(data))})
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("ovf: decode: %w", err)
	}
	if err := trailing(dec); err != nil {
		return nil, err
	}
	p := &parser{}
	d := p.descriptor(&env)
	if len(p.errs) == 0 {
		if err := d.Validate(); err != nil {
			p.errs = append(p.errs, err)
		}
	}
	if len(p.errs) > 0 {
		return nil, fmt.Errorf("ovf: invalid descriptor: %w", errors.Join(p.errs...))
	}
	return d, nil
}

type parser struct{ errs []error }

func (p *parser) bad(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf(format, args...))
}

// number parses a non-negative decimal attribute.
func (p *parser) number(where, s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		p.bad("%s %q: want a non-negative integer", where, s)
		return 0
	}
	return n
}

// unitBytes turns an allocation unit ("byte", "byte * 2^20") into bytes.
func unitBytes(u string) (int64, bool) {
	u = strings.Join(strings.Fields(u), "")
	if u == "" || u == "byte" {
		return 1, true
	}
	exp, ok := strings.CutPrefix(u, "byte*2^")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(exp)
	if err != nil || n < 0 || n > 40 {
		return 0, false
	}
	return 1 << n, true
}

func (p *parser) descriptor(env *envelope) *Descriptor {
	d := &Descriptor{}
	vs := &env.VirtualSystem
	d.Name = vs.ID
	if vs.Name != "" && vs.Name != vs.ID {
		p.bad("VirtualSystem/Name %q: differs from ovf:id %q", vs.Name, vs.ID)
	}
	if vs.Annotation != nil {
		d.Annotation = vs.Annotation.Annotation
	}
	d.OSType = vs.OperatingSystem.OSType

	// References and disks.
	files := map[string]fileRef{}
	hrefs := map[string]bool{}
	for i, f := range env.References.Files {
		where := fmt.Sprintf("References/File[%d]", i+1)
		if f.ID == "" {
			p.bad("%s: ovf:id missing", where)
		} else if _, dup := files[f.ID]; dup {
			p.bad("%s ovf:id %q: duplicate", where, f.ID)
		}
		if hrefs[f.Href] {
			p.bad("%s ovf:href %q: duplicate", where, f.Href)
		}
		if err := CheckFileName(f.Href); err != nil {
			p.bad("%s ovf:href: %w", where, err)
		}
		if p.number(where+" ovf:size", f.Size) == 0 {
			p.bad("%s ovf:size: want > 0", where)
		}
		files[f.ID], hrefs[f.Href] = f, true
	}
	used := map[string]bool{}
	disks := map[string]bool{}
	for i, k := range env.DiskSection.Disks {
		where := fmt.Sprintf("DiskSection/Disk[%d]", i+1)
		if disks[k.DiskID] {
			p.bad("%s ovf:diskId %q: duplicate", where, k.DiskID)
		}
		disks[k.DiskID] = true
		f, ok := files[k.FileRef]
		switch {
		case !ok:
			p.bad("%s ovf:fileRef %q: no such File in References", where, k.FileRef)
		case used[k.FileRef]:
			p.bad("%s ovf:fileRef %q: File already used by another disk", where, k.FileRef)
		}
		used[k.FileRef] = true
		if k.Format != diskFormat {
			p.bad("%s ovf:format %q: want %s", where, k.Format, diskFormat)
		}
		unit, ok := unitBytes(k.CapacityUnits)
		if !ok {
			p.bad("%s ovf:capacityAllocationUnits %q: want \"byte\" or \"byte * 2^N\"", where, k.CapacityUnits)
			unit = 1
		}
		c := p.number(where+" ovf:capacity", k.Capacity)
		if c == 0 {
			p.bad("%s ovf:capacity: want > 0", where)
		} else if c > (1<<62)/unit {
			p.bad("%s ovf:capacity %q: too large", where, k.Capacity)
		}
		var populated int64
		if k.PopulatedSize != "" {
			populated = p.number(where+" ovf:populatedSize", k.PopulatedSize)
		}
		var size int64
		if ok {
			size, _ = strconv.ParseInt(f.Size, 10, 64)
		}
		d.Disks = append(d.Disks, Disk{ID: k.DiskID, File: f.Href, FileSize: size, Capacity: c * unit, PopulatedSize: populated})
	}
	for _, f := range env.References.Files {
		if !used[f.ID] {
			p.bad("References/File ovf:id %q: not used by any Disk", f.ID)
		}
	}

	networks := map[string]bool{}
	for i, n := range env.NetworkSection.Networks {
		if networks[n.Name] {
			p.bad("NetworkSection/Network[%d] ovf:name %q: duplicate", i+1, n.Name)
		}
		networks[n.Name] = true
	}

	p.hardware(d, &vs.Hardware, disks, networks)

	if len(vs.Products) > 1 {
		p.bad("VirtualSystem: %d ProductSections, want at most 1", len(vs.Products))
	}
	for _, pr := range vs.Products {
		d.Product = Product{Product: pr.Product, Vendor: pr.Vendor, Version: pr.Version, FullVersion: pr.FullVersion}
		for i, w := range pr.Properties {
			where := fmt.Sprintf("ProductSection/Property[%d] (%s)", i+1, w.Key)
			q := Property{Key: w.Key, Type: w.Type, Default: w.Value, Label: w.Label, Description: w.Description}
			if w.Type == TypeString && w.Qualifiers == "Ip" {
				q.Type = TypeIP
			}
			switch w.UserConfigurable {
			case "", "false":
			case "true":
				q.UserConfigurable = true
			default:
				p.bad("%s ovf:userConfigurable %q: want true or false", where, w.UserConfigurable)
			}
			d.Properties = append(d.Properties, q)
		}
	}
	return d
}

func (p *parser) hardware(d *Descriptor, hw *hardware, disks, networks map[string]bool) {
	if !strings.Contains(" "+hw.Transport+" ", " "+guestInfo+" ") {
		p.bad("VirtualHardwareSection ovf:transport %q: want %s", hw.Transport, guestInfo)
	}
	v, ok := strings.CutPrefix(hw.System.Type, "vmx-")
	n, err := strconv.Atoi(v)
	if !ok || err != nil {
		p.bad("VirtualHardwareSection/System/vssd:VirtualSystemType %q: want vmx-NN", hw.System.Type)
	}
	d.HardwareVersion = n

	firmware := ""
	for _, c := range hw.Configs {
		if c.Key == "firmware" {
			firmware = c.Value
		}
	}
	if firmware != "efi" {
		p.bad("VirtualHardwareSection/vmw:Config vmw:key=\"firmware\": value %q, want efi", firmware)
	}

	ids := map[string]bool{}
	pvscsi := map[string]bool{}
	attached := map[string]bool{}
	var cpus, mem, nics int
	var diskItems []item
	for i, it := range hw.Items {
		where := fmt.Sprintf("VirtualHardwareSection/Item[%d]", i+1)
		if ids[it.InstanceID] || it.InstanceID == "" {
			p.bad("%s rasd:InstanceID %q: missing or duplicate", where, it.InstanceID)
		}
		ids[it.InstanceID] = true
		switch strings.TrimSpace(it.ResourceType) {
		case strconv.Itoa(rtCPU):
			cpus++
			d.CPUs = int(p.number(where+" rasd:VirtualQuantity", it.VirtualQuantity))
		case strconv.Itoa(rtMemory):
			mem++
			if u := strings.Join(strings.Fields(it.AllocationUnits), ""); u != "byte*2^20" {
				p.bad("%s rasd:AllocationUnits %q: want byte * 2^20", where, it.AllocationUnits)
			}
			d.MemoryMiB = int(p.number(where+" rasd:VirtualQuantity", it.VirtualQuantity))
		case strconv.Itoa(rtSCSI):
			if it.ResourceSubType != "VirtualSCSI" {
				p.bad("%s rasd:ResourceSubType %q: want VirtualSCSI (pvscsi)", where, it.ResourceSubType)
			}
			pvscsi[it.InstanceID] = true
		case strconv.Itoa(rtDisk):
			diskItems = append(diskItems, it)
		case strconv.Itoa(rtNIC):
			nics++
			if it.ResourceSubType != "VmxNet3" {
				p.bad("%s rasd:ResourceSubType %q: want VmxNet3", where, it.ResourceSubType)
			}
			if !networks[it.Connection] {
				p.bad("%s rasd:Connection %q: no such Network in NetworkSection", where, it.Connection)
			}
			d.Network = it.Connection
		}
	}
	if cpus != 1 || mem != 1 || nics != 1 {
		p.bad("VirtualHardwareSection: %d CPU, %d memory, %d NIC items; want one of each", cpus, mem, nics)
	}
	if len(pvscsi) == 0 {
		p.bad("VirtualHardwareSection: no pvscsi controller (rasd:ResourceType 6, VirtualSCSI)")
	}
	for _, it := range diskItems {
		where := fmt.Sprintf("VirtualHardwareSection/Item (rasd:InstanceID %s)", it.InstanceID)
		id, ok := strings.CutPrefix(it.HostResource, hostResourceDir)
		switch {
		case !ok || !disks[id]:
			p.bad("%s rasd:HostResource %q: no such Disk in DiskSection", where, it.HostResource)
		case attached[id]:
			p.bad("%s rasd:HostResource %q: disk attached twice", where, it.HostResource)
		}
		attached[id] = true
		if !pvscsi[it.Parent] {
			p.bad("%s rasd:Parent %q: not a pvscsi controller", where, it.Parent)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(disks)) {
		if !attached[id] {
			p.bad("DiskSection/Disk ovf:diskId %q: not attached by any hardware Item", id)
		}
	}
}

// trailing allows only whitespace, comments and processing instructions
// after the root element.
func trailing(dec *xml.Decoder) error {
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ovf: decode: after </Envelope>: %w", err)
		}
		switch t := tok.(type) {
		case xml.Comment, xml.ProcInst:
		case xml.CharData:
			if len(bytes.TrimSpace(t)) != 0 {
				return errors.New("ovf: decode: text after </Envelope>")
			}
		default:
			return errors.New("ovf: decode: content after </Envelope>")
		}
	}
}
