package vmdk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// Info is what a streamOptimized VMDK's header, descriptor and footer say.
type Info struct {
	Version    uint32
	Capacity   int64 // bytes
	Descriptor string
	// Extent is the file name in the descriptor's extent line.
	Extent string
}

// StreamChecker checks a streamOptimized VMDK as it streams past, for
// example while an OVA's digest is computed, without holding the disk:
// it keeps the header and descriptor sectors and the last three sectors
// (footer marker, footer, end-of-stream marker). Write never fails; Finish
// reports what is wrong.
type StreamChecker struct {
	head []byte
	tail []byte
	n    int64
}

const headBytes = (descriptorOffset + descriptorSectors) * sectorSize

// NewStreamChecker starts checking one stream.
func NewStreamChecker() *StreamChecker { return &StreamChecker{} }

func (c *StreamChecker) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if need := headBytes - len(c.head); need > 0 {
		c.head = append(c.head, p[:min(need, len(p))]...)
	}
	const keep = 3 * sectorSize
	if len(p) >= keep {
		c.tail = append(c.tail[:0], p[len(p)-keep:]...)
	} else {
		c.tail = append(c.tail, p...)
		if len(c.tail) > keep {
			c.tail = c.tail[len(c.tail)-keep:]
		}
	}
	return len(p), nil
}

var (
	createTypeLine = regexp.MustCompile(`(?m)^createType\s*=\s*"([^"]*)"\s*$`)
	extentLine     = regexp.MustCompile(`(?m)^(RW|RDONLY)\s+([0-9]+)\s+SPARSE\s+"([^"]+)"\s*$`)
)

// Finish checks what was written: a version 3 header with compressed
// grains and markers, the grain directory at the end, a streamOptimized
// descriptor whose extent matches the capacity, and a footer followed by
// the end-of-stream marker. The error lists every problem.
func (c *StreamChecker) Finish() (*Info, error) {
	if len(c.head) < sectorSize {
		return nil, fmt.Errorf("%d bytes: too short for a VMDK header", c.n)
	}
	h, err := parseHeader(c.head)
	if err != nil {
		return nil, err
	}
	info := &Info{Version: h.Version, Capacity: int64(h.Capacity) * sectorSize}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.n%sectorSize != 0 {
		bad("size %d: not a whole number of sectors", c.n)
	}
	if h.Version != 3 {
		bad("header version %d: want 3 (ESXi refuses older streamOptimized disks)", h.Version)
	}
	if h.Flags&flagCompressed == 0 || h.Flags&flagMarkers == 0 {
		bad("header flags %#x: want compressed grains with markers (streamOptimized)", h.Flags)
	}
	if h.CompressAlgorithm != compressDeflate {
		bad("header compressAlgorithm %d: want 1 (deflate)", h.CompressAlgorithm)
	}
	// Our writer (and VMware's) put the grain directory at the end and
	// point at it from a footer; qemu-img writes its offset in the header
	// and no footer. Both import.
	footerRequired := h.GDOffset == gdAtEnd
	if !footerRequired && (h.GDOffset == 0 || int64(h.GDOffset)*sectorSize >= c.n) {
		bad("header gdOffset %d: not a sector inside the stream", h.GDOffset)
	}
	if h.Capacity == 0 || h.Capacity > maxCapacity/sectorSize {
		bad("header capacity %d sectors: want 1 to %d", h.Capacity, maxCapacity/sectorSize)
	}
	if h.GrainSize < 8 || h.GrainSize > maxGrainSectors || h.GrainSize&(h.GrainSize-1) != 0 {
		bad("header grainSize %d sectors: want a power of two from 8 to %d", h.GrainSize, maxGrainSectors)
	}
	if h.DescriptorOffset == 0 || h.DescriptorSize == 0 || h.DescriptorOffset+h.DescriptorSize > descriptorOffset+descriptorSectors {
		bad("header descriptor at sectors %d+%d: want an embedded descriptor within the first %d sectors",
			h.DescriptorOffset, h.DescriptorSize, descriptorOffset+descriptorSectors)
	} else if int(h.DescriptorOffset+h.DescriptorSize)*sectorSize <= len(c.head) {
		d := c.head[h.DescriptorOffset*sectorSize : (h.DescriptorOffset+h.DescriptorSize)*sectorSize]
		if i := bytes.IndexByte(d, 0); i >= 0 {
			d = d[:i]
		}
		info.Descriptor = string(d)
		if m := createTypeLine.FindStringSubmatch(info.Descriptor); m == nil || m[1] != "streamOptimized" {
			bad("descriptor createType: %q, want streamOptimized", m)
		}
		if m := extentLine.FindStringSubmatch(info.Descriptor); m == nil {
			bad("descriptor: no SPARSE extent line")
		} else {
			info.Extent = m[3]
			if n, _ := strconv.ParseUint(m[2], 10, 64); n != h.Capacity {
				bad("descriptor extent: %s sectors, the header's capacity is %d", m[2], h.Capacity)
			}
		}
	}

	// The stream ends: footer marker, footer (a header copy with the real
	// grain directory offset), end-of-stream marker.
	switch {
	case len(c.tail) < sectorSize || !bytes.Equal(c.tail[len(c.tail)-sectorSize:], make([]byte, sectorSize)):
		bad("the last sector is not the end-of-stream marker (all zeros)")
	case !footerRequired:
	case len(c.tail) < 3*sectorSize || c.n < headBytes+3*sectorSize:
		bad("stream too short for a footer and end-of-stream marker")
	default:
		marker, footer := c.tail[:sectorSize], c.tail[sectorSize:2*sectorSize]
		if binary.LittleEndian.Uint32(marker[12:]) != markerFooter || binary.LittleEndian.Uint32(marker[8:]) != 0 {
			bad("no footer marker before the last two sectors")
		}
		if f, err := parseHeader(footer); err != nil {
			bad("footer: %v", err)
		} else {
			if f.Capacity != h.Capacity || f.GrainSize != h.GrainSize || f.Version != h.Version {
				bad("footer: capacity %d, grain %d, version %d disagree with the header's %d, %d, %d",
					f.Capacity, f.GrainSize, f.Version, h.Capacity, h.GrainSize, h.Version)
			}
			if f.GDOffset == gdAtEnd || f.GDOffset == 0 || int64(f.GDOffset)*sectorSize >= c.n {
				bad("footer gdOffset %d: not a sector inside the stream", f.GDOffset)
			}
		}
	}
	return info, errors.Join(errs...)
}
