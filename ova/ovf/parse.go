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

// Bounds on what one Parse takes in and reports. Real descriptors are a
// few kilobytes with a few hundred tags and attributes. The decoder spends
// a few hundred bytes on every element and attribute, and every faulty
// element adds messages, so without these a crafted 4 MiB descriptor
// costs a gigabyte and answers with a 180 MB error.
const (
	maxDescriptor = 4 << 20
	// maxTags bounds the '<' in the input: elements, end tags, comments.
	maxTags = 16384
	// maxAttrs bounds the '=' in the input, which every attribute needs.
	maxAttrs = 16384
	// maxErrors is how many problems an error lists; the rest are counted.
	maxErrors = 50
)

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
	// Counted before decoding: the decoder builds a whole element, all its
	// attributes included, before the first check could see it.
	if n := bytes.Count(data, []byte("<")); n > maxTags {
		return nil, fmt.Errorf("ovf: descriptor has %d '<' (tags), limit %d", n, maxTags)
	}
	if n := bytes.Count(data, []byte("=")); n > maxAttrs {
		return nil, fmt.Errorf("ovf: descriptor has %d '=' (attributes), limit %d", n, maxAttrs)
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
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					p.add(e)
				}
			} else {
				p.add(err)
			}
		}
	}
	if len(p.errs) > 0 {
		errs := p.errs
		if p.more > 0 {
			errs = append(errs, fmt.Errorf("… and %d more", p.more))
		}
		return nil, fmt.Errorf("ovf: invalid descriptor: %w", errors.Join(errs...))
	}
	return d, nil
}

// parser collects problems, the first maxErrors of them.
type parser struct {
	errs []error
	more int
}

func (p *parser) bad(format string, args ...any) {
	if len(p.errs) >= maxErrors {
		p.more++ // not formatted: that is the cost being bounded
		return
	}
	p.errs = append(p.errs, fmt.Errorf(format, args...))
}

func (p *parser) add(err error) {
	if len(p.errs) >= maxErrors {
		p.more++
		return
	}
	p.errs = append(p.errs, err)
}

// number parses a non-negative decimal attribute.
func (p *parser) number(where, s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		p.bad("%s %s: want a non-negative integer", where, quote(s))
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
		p.bad("VirtualSystem/Name %s: differs from ovf:id %s", quote(vs.Name), quote(vs.ID))
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
			p.bad("%s ovf:id %s: duplicate", where, quote(f.ID))
		}
		if hrefs[f.Href] {
			p.bad("%s ovf:href %s: duplicate", where, quote(f.Href))
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
			p.bad("%s ovf:diskId %s: duplicate", where, quote(k.DiskID))
		}
		disks[k.DiskID] = true
		f, ok := files[k.FileRef]
		switch {
		case !ok:
			p.bad("%s ovf:fileRef %s: no such File in References", where, quote(k.FileRef))
		case used[k.FileRef]:
			p.bad("%s ovf:fileRef %s: File already used by another disk", where, quote(k.FileRef))
		}
		used[k.FileRef] = true
		if k.Format != diskFormat {
			p.bad("%s ovf:format %s: want %s", where, quote(k.Format), diskFormat)
		}
		unit, ok := unitBytes(k.CapacityUnits)
		if !ok {
			p.bad("%s ovf:capacityAllocationUnits %s: want \"byte\" or \"byte * 2^N\"", where, quote(k.CapacityUnits))
			unit = 1
		}
		c := p.number(where+" ovf:capacity", k.Capacity)
		if c == 0 {
			p.bad("%s ovf:capacity: want > 0", where)
		} else if c > MaxDiskCapacity/unit {
			// Checked before c*unit, which could overflow.
			what := quote(k.Capacity)
			if unit != 1 {
				what += fmt.Sprintf(" × %d bytes", unit)
			}
			p.bad("%s (disk %s) ovf:capacity %s: more than the %d bytes (64 TiB) limit", where, label(k.DiskID), what, MaxDiskCapacity)
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
			p.bad("References/File ovf:id %s: not used by any Disk", quote(f.ID))
		}
	}

	networks := map[string]bool{}
	for i, n := range env.NetworkSection.Networks {
		if networks[n.Name] {
			p.bad("NetworkSection/Network[%d] ovf:name %s: duplicate", i+1, quote(n.Name))
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
			where := fmt.Sprintf("ProductSection/Property[%d] (%s)", i+1, label(w.Key))
			q := Property{Key: w.Key, Type: w.Type, Default: w.Value, Label: w.Label, Description: w.Description}
			if w.Type == TypeString && w.Qualifiers == "Ip" {
				q.Type = TypeIP
			}
			switch w.UserConfigurable {
			case "", "false":
			case "true":
				q.UserConfigurable = true
			default:
				p.bad("%s ovf:userConfigurable %s: want true or false", where, quote(w.UserConfigurable))
			}
			d.Properties = append(d.Properties, q)
		}
	}
	return d
}

func (p *parser) hardware(d *Descriptor, hw *hardware, disks, networks map[string]bool) {
	if !strings.Contains(" "+hw.Transport+" ", " "+guestInfo+" ") {
		p.bad("VirtualHardwareSection ovf:transport %s: want %s", quote(hw.Transport), guestInfo)
	}
	v, ok := strings.CutPrefix(hw.System.Type, "vmx-")
	n, err := strconv.Atoi(v)
	if !ok || err != nil {
		p.bad("VirtualHardwareSection/System/vssd:VirtualSystemType %s: want vmx-NN", quote(hw.System.Type))
	}
	d.HardwareVersion = n

	firmware := ""
	for _, c := range hw.Configs {
		if c.Key == "firmware" {
			firmware = c.Value
		}
	}
	if firmware != "efi" {
		p.bad("VirtualHardwareSection/vmw:Config vmw:key=\"firmware\": value %s, want efi", quote(firmware))
	}

	ids := map[string]bool{}
	pvscsi := map[string]bool{}
	attached := map[string]bool{}
	var cpus, mem, nics int
	var diskItems []item
	for i, it := range hw.Items {
		where := fmt.Sprintf("VirtualHardwareSection/Item[%d]", i+1)
		if ids[it.InstanceID] || it.InstanceID == "" {
			p.bad("%s rasd:InstanceID %s: missing or duplicate", where, quote(it.InstanceID))
		}
		ids[it.InstanceID] = true
		switch strings.TrimSpace(it.ResourceType) {
		case strconv.Itoa(rtCPU):
			cpus++
			d.CPUs = int(p.number(where+" rasd:VirtualQuantity", it.VirtualQuantity))
		case strconv.Itoa(rtMemory):
			mem++
			if u := strings.Join(strings.Fields(it.AllocationUnits), ""); u != "byte*2^20" {
				p.bad("%s rasd:AllocationUnits %s: want byte * 2^20", where, quote(it.AllocationUnits))
			}
			d.MemoryMiB = int(p.number(where+" rasd:VirtualQuantity", it.VirtualQuantity))
		case strconv.Itoa(rtSCSI):
			if it.ResourceSubType != "VirtualSCSI" {
				p.bad("%s rasd:ResourceSubType %s: want VirtualSCSI (pvscsi)", where, quote(it.ResourceSubType))
			}
			pvscsi[it.InstanceID] = true
		case strconv.Itoa(rtDisk):
			diskItems = append(diskItems, it)
		case strconv.Itoa(rtNIC):
			nics++
			if it.ResourceSubType != "VmxNet3" {
				p.bad("%s rasd:ResourceSubType %s: want VmxNet3", where, quote(it.ResourceSubType))
			}
			if !networks[it.Connection] {
				p.bad("%s rasd:Connection %s: no such Network in NetworkSection", where, quote(it.Connection))
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
		where := fmt.Sprintf("VirtualHardwareSection/Item (rasd:InstanceID %s)", label(it.InstanceID))
		id, ok := strings.CutPrefix(it.HostResource, hostResourceDir)
		switch {
		case !ok || !disks[id]:
			p.bad("%s rasd:HostResource %s: no such Disk in DiskSection", where, quote(it.HostResource))
		case attached[id]:
			p.bad("%s rasd:HostResource %s: disk attached twice", where, quote(it.HostResource))
		}
		attached[id] = true
		if !pvscsi[it.Parent] {
			p.bad("%s rasd:Parent %s: not a pvscsi controller", where, quote(it.Parent))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(disks)) {
		if !attached[id] {
			p.bad("DiskSection/Disk ovf:diskId %s: not attached by any hardware Item", quote(id))
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
