// Package ovf renders and parses the OVF 1.x descriptor of a Harmony
// appliance: EFI firmware, a pvscsi controller, a vmxnet3 NIC, one or more
// streamOptimized disks and a ProductSection of vApp properties delivered
// through the com.vmware.guestInfo transport.
//
// The public type is Descriptor, a small model of what we build; the XML
// shape lives in wire.go. Render(d) then Parse gives d back.
package ovf

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"unicode/utf8"
)

// DefaultHardwareVersion is vmx-15 (ESXi 6.7 U2), the oldest release that
// runs our images with EFI and pvscsi boot.
const DefaultHardwareVersion = 15

// TransportGuestInfo is the OVF environment transport every descriptor
// names: vSphere hands the properties to the guest through guestinfo.
const TransportGuestInfo = "com.vmware.guestInfo"

// Property types a vApp property may have.
const (
	TypeString  = "string"
	TypeInt     = "int"
	TypeBoolean = "boolean"
	// TypeIP is rendered as ovf:type="string" with vmw:qualifiers="Ip",
	// which is how vCenter marks an IP address field.
	TypeIP = "ip"
)

// maxDisks is the number of SCSI units on one controller minus the
// controller's own unit 7.
const maxDisks = 15

// MaxDiskCapacity is the largest virtual disk a descriptor may declare:
// 64 TiB, just above vSphere's own 62 TB limit for a VMDK, so a crafted
// ovf:capacity cannot ask an importer for exabytes.
const MaxDiskCapacity int64 = 64 << 40

// maxQuoted is how much of a value a message quotes: values come from
// uploaded descriptors, which can hold megabyte-long ones.
const maxQuoted = 64

// quote renders a value for a message: quoted, and cut to its first
// maxQuoted bytes with its length when longer.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:maxQuoted]), len(s))
}

// label renders an id or key for a location such as "disks[0] (vmdisk1)":
// as is when short, through quote when not.
func label(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	return quote(s)
}

// Descriptor is one virtual system with its disks and properties.
type Descriptor struct {
	// Name is the VirtualSystem id and name.
	Name       string
	Annotation string
	// HardwareVersion is NN in vmx-NN; zero means DefaultHardwareVersion.
	HardwareVersion int
	CPUs            int
	MemoryMiB       int
	// OSType is VMware's guest id, for example "debian12_64Guest".
	OSType string
	// Network is the name of the logical network the vmxnet3 NIC joins.
	Network string
	Disks   []Disk
	Product Product
	// Properties are the vApp properties, in the order shown in the form.
	Properties []Property
}

// Disk is one VMDK in the package.
type Disk struct {
	// ID is the ovf:diskId, for example "vmdisk1".
	ID string
	// File is the file name inside the OVA (References ovf:href).
	File string
	// FileSize is the VMDK file's size in bytes (References ovf:size).
	FileSize int64
	// Capacity is the virtual disk size in bytes.
	Capacity int64
	// PopulatedSize is the number of bytes of data in the disk.
	PopulatedSize int64
}

// Product describes the software in the appliance.
type Product struct {
	Product     string
	Vendor      string
	Version     string
	FullVersion string
}

// Property is one vApp property.
type Property struct {
	Key  string
	Type string
	// UserConfigurable properties appear in the deploy wizard; the others
	// are fixed values that record facts such as component versions.
	UserConfigurable bool
	Label            string
	Description      string
	Default          string
}

var (
	idPattern  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)
	keyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,127}$`)
)

// hardwareVersion returns the effective vmx version.
func (d *Descriptor) hardwareVersion() int {
	if d.HardwareVersion == 0 {
		return DefaultHardwareVersion
	}
	return d.HardwareVersion
}

// Validate checks every field; the error lists every problem found.
func (d *Descriptor) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if !idPattern.MatchString(d.Name) {
		bad("name %s: want 1-64 letters, digits, '_', '.', '-', not starting with a digit or punctuation", quote(d.Name))
	}
	if v := d.hardwareVersion(); v < 10 || v > 99 {
		bad("hardwareVersion %d: want vmx-10 to vmx-99", v)
	}
	if d.CPUs < 1 || d.CPUs > 768 {
		bad("cpus %d: want 1-768", d.CPUs)
	}
	if d.MemoryMiB < 4 || d.MemoryMiB > 24*1024*1024 {
		bad("memoryMiB %d: want 4 MiB to 24 TiB", d.MemoryMiB)
	}
	if d.OSType == "" || !keyPattern.MatchString(d.OSType) {
		bad("osType %s: want a VMware guest id such as debian12_64Guest", quote(d.OSType))
	}
	if !keyPattern.MatchString(d.Network) {
		bad("network %s: want a name of letters, digits, '_', '.', '-'", quote(d.Network))
	}
	if len(d.Disks) == 0 || len(d.Disks) > maxDisks {
		bad("disks: %d given, want 1-%d", len(d.Disks), maxDisks)
	}
	ids, files := map[string]bool{}, map[string]bool{}
	for i, k := range d.Disks {
		where := fmt.Sprintf("disks[%d] (%s)", i, label(k.ID))
		if !idPattern.MatchString(k.ID) {
			bad("%s: id %s is not a valid id", where, quote(k.ID))
		}
		if ids[k.ID] {
			bad("%s: duplicate disk id", where)
		}
		ids[k.ID] = true
		if err := CheckFileName(k.File); err != nil {
			bad("%s: file: %w", where, err)
		}
		if files[k.File] {
			bad("%s: file %s used by two disks", where, quote(k.File))
		}
		files[k.File] = true
		if k.FileSize <= 0 {
			bad("%s: fileSize %d: want > 0", where, k.FileSize)
		}
		if k.Capacity <= 0 {
			bad("%s: capacity %d: want > 0", where, k.Capacity)
		} else if k.Capacity%512 != 0 {
			bad("%s: capacity %d: want a multiple of 512 bytes", where, k.Capacity)
		} else if k.Capacity > MaxDiskCapacity {
			bad("%s: capacity %d: more than the %d bytes (64 TiB) limit", where, k.Capacity, MaxDiskCapacity)
		}
		if k.PopulatedSize < 0 || k.PopulatedSize > k.Capacity {
			bad("%s: populatedSize %d: want 0 to capacity %d", where, k.PopulatedSize, k.Capacity)
		}
	}
	texts := map[string]string{"annotation": d.Annotation, "product.product": d.Product.Product,
		"product.vendor": d.Product.Vendor, "product.version": d.Product.Version, "product.fullVersion": d.Product.FullVersion}
	for i, p := range d.Properties {
		texts[fmt.Sprintf("properties[%d].label", i)] = p.Label
		texts[fmt.Sprintf("properties[%d].description", i)] = p.Description
		texts[fmt.Sprintf("properties[%d].default", i)] = p.Default
	}
	for _, field := range slices.Sorted(maps.Keys(texts)) {
		if err := checkText(texts[field]); err != nil {
			bad("%s: %w", field, err)
		}
	}
	keys := map[string]bool{}
	for i, p := range d.Properties {
		where := fmt.Sprintf("properties[%d] (%s)", i, label(p.Key))
		if !keyPattern.MatchString(p.Key) {
			bad("%s: key %s: want letters, digits, '_', '.', '-'", where, quote(p.Key))
		}
		if keys[p.Key] {
			bad("%s: duplicate key", where)
		}
		keys[p.Key] = true
		if err := checkValue(p.Type, p.Default); err != nil {
			bad("%s: %w", where, err)
		}
	}
	return errors.Join(errs...)
}

// checkValue checks a property's type and that its default fits the type.
// An empty default is allowed for user-configurable fields.
func checkValue(typ, value string) error {
	switch typ {
	case TypeString:
		return nil
	case TypeInt:
		if value == "" {
			return nil
		}
		if _, err := strconv.ParseInt(value, 10, 64); err != nil {
			return fmt.Errorf("default %s: not an int", quote(value))
		}
	case TypeBoolean:
		if value != "" && value != "true" && value != "false" {
			return fmt.Errorf("default %s: want true or false", quote(value))
		}
	case TypeIP:
		if value == "" {
			return nil
		}
		if _, err := netip.ParseAddr(value); err != nil {
			return fmt.Errorf("default %s: not an IP address", quote(value))
		}
	default:
		return fmt.Errorf("type %s: want string, int, boolean or ip", quote(typ))
	}
	return nil
}

// CheckFileName accepts names that fit a USTAR header's name field on their
// own: plain ASCII letters, digits, '.', '_', '-', no directory, no leading
// dot, at most 100 bytes.
func CheckFileName(name string) error {
	if name == "" || len(name) > 100 {
		return fmt.Errorf("name %s: want 1-100 bytes", quote(name))
	}
	if name[0] == '.' {
		return fmt.Errorf("name %s: must not start with '.'", quote(name))
	}
	for _, c := range []byte(name) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("name %s: only ASCII letters, digits, '.', '_', '-' allowed", quote(name))
		}
	}
	return nil
}

// checkText refuses what XML cannot carry (the encoder would silently
// replace it) so a rendered descriptor always parses back to its input.
func checkText(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' || r == '\r' || r == 0xFFFE || r == 0xFFFF {
			return fmt.Errorf("control character %U not allowed", r)
		}
	}
	return nil
}
