package vmdk

import (
	"errors"
	"io"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

// dataExtents is where a sparse source file holds data, from SEEK_DATA and
// SEEK_HOLE: a grain inside a hole is zeros without being read. A built
// image's raw disk is mostly holes (6 GiB with 1.1 GiB populated), and
// reading them costed more than compressing the data.
type dataExtents []extent

type extent struct{ start, end int64 }

// findDataExtents asks the file system where src's data is. ok is false
// when it cannot tell (src is no file, or lseek refuses): then every grain
// is read.
func findDataExtents(src io.ReaderAt, size int64) (extents dataExtents, ok bool) {
	f, isFile := src.(*os.File)
	if !isFile {
		return nil, false
	}
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // nothing but a hole from off to the end
		}
		if err != nil {
			return nil, false
		}
		if start >= size {
			break
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, false
		}
		end = min(end, size)
		extents = append(extents, extent{start, end})
		off = end
	}
	return extents, true
}

// mayHoldData reports whether [off, off+n) overlaps data.
func (d dataExtents) mayHoldData(off, n int64) bool {
	i := sort.Search(len(d), func(i int) bool { return d[i].end > off })
	return i < len(d) && d[i].start < off+n
}
