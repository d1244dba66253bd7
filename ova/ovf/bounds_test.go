package ovf

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func rendered(t *testing.T) string {
	t.Helper()
	d := sample()
	d.Network = "nic0"
	out, err := Render(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// edit replaces old, which must be in s, once.
func edit(t *testing.T, s, old, new string) []byte {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("test setup: %s not in the descriptor", old)
	}
	return []byte(strings.Replace(s, old, new, 1))
}

func TestParseCapacityLimit(t *testing.T) {
	good := rendered(t)
	old := `ovf:capacity="21474836480" ovf:capacityAllocationUnits="byte"`
	for _, c := range []struct {
		capacity, units string
		ok              bool
	}{
		{strconv.FormatInt(MaxDiskCapacity+1, 10), "byte", false},
		{strconv.FormatInt(MaxDiskCapacity+512, 10), "byte", false},
		{"65", "byte * 2^40", false},
		{strconv.FormatInt(MaxDiskCapacity, 10), "byte", true},
		{"64", "byte * 2^40", true},
	} {
		t.Run(c.capacity+" "+c.units, func(t *testing.T) {
			d, err := Parse(edit(t, good, old, `ovf:capacity="`+c.capacity+`" ovf:capacityAllocationUnits="`+c.units+`"`))
			if c.ok {
				if err != nil || d.Disks[0].Capacity != MaxDiskCapacity {
					t.Fatalf("64 TiB: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "DiskSection/Disk[1] (disk vmdisk1) ovf:capacity ") ||
				!strings.Contains(err.Error(), "more than the 70368744177664 bytes (64 TiB) limit") {
				t.Fatalf("got %v", err)
			}
		})
	}
	d := sample()
	d.Network = "nic0"
	d.Disks[0].Capacity = MaxDiskCapacity + 512
	if _, err := Render(d); err == nil || !strings.Contains(err.Error(), "disks[0] (vmdisk1): capacity 70368744178176: more than") {
		t.Fatalf("Render of 64 TiB + 512: %v", err)
	}
}

// A descriptor of many small elements or attributes used to cost the
// decoder and the error hundreds of times its size.
func TestParseMarkupLimits(t *testing.T) {
	envelope := func(body string) []byte {
		return []byte(`<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1">` + body + `</Envelope>`)
	}
	for _, c := range []struct {
		what string
		data []byte
		want string
	}{
		{"elements", envelope(`<References>` + strings.Repeat(`<File/>`, 150000) + `</References>`), "'<' (tags), limit 16384"},
		{"attributes", envelope(`<References><File ` + strings.Repeat(`a=""`, 250000) + `/></References>`), "'=' (attributes), limit 16384"},
	} {
		t.Run(c.what, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Parse(c.data)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %.500v", err)
			}
			if grown := after.TotalAlloc - before.TotalAlloc; grown > 4*uint64(len(c.data)) {
				t.Errorf("Parse allocated %d bytes for a %d-byte descriptor", grown, len(c.data))
			}
		})
	}
}

func TestParseErrorLimit(t *testing.T) {
	// Under the tag limit, but each File has five problems.
	data := []byte(`<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1"><References>` + strings.Repeat(`<File/>`, 1000) + `</References></Envelope>`)
	_, err := Parse(data)
	if err == nil {
		t.Fatal("parsed")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 {
		t.Fatalf("%d lines, want %d problems and a count:\n%.3000s", len(lines), maxErrors, err)
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "… and ") || !strings.HasSuffix(last, " more") {
		t.Errorf("last line %q", last)
	}
}

// Messages quote the first 64 bytes of a value: neither the parser's nor
// Descriptor.Validate's copy a long one whole.
func TestParseQuotesInPart(t *testing.T) {
	good := rendered(t)
	long := strings.Repeat("h", 100000)
	for _, c := range []struct{ what, old, new, want string }{
		{"href", `ovf:href="harmony-data.vmdk"`, `ovf:href="` + long + `"`, `References/File[2] ovf:href: name "hhhh`},
		{"property key", `ovf:key="hostname"`, `ovf:key="` + long + `"`, `properties[0] ("hhhh`},
		{"int default", `ovf:value="24"`, `ovf:value="` + long + `"`, `default "hhhh`},
	} {
		t.Run(c.what, func(t *testing.T) {
			_, err := Parse(edit(t, good, c.old, c.new))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "… (100000 bytes)") {
				t.Fatalf("got %.500v", err)
			}
			if n := len(err.Error()); n > 1024 {
				t.Errorf("error of %d bytes:\n%.500s", n, err)
			}
		})
	}
}
