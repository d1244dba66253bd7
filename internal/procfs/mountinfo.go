package procfs

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of /proc/self/mountinfo, the fields we use.
type Mount struct {
	ID    int
	Major int
	Minor int
	// Root is the mounted directory within its file system.
	Root  string
	Point string
	// Options are the mount's own options ("ro,nosuid").
	Options string
	FSType  string
	Source  string
	// SuperOptions are the file system's options ("rw,memory").
	SuperOptions string
}

// Mounts reads this process's mount table.
func Mounts() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ms []Mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m, err := ParseMountinfo(sc.Text())
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	return ms, nil
}

// ParseMountinfo parses "ID PARENT MAJ:MIN ROOT POINT OPTS [TAGS...] - FSTYPE SOURCE SUPEROPTS".
func ParseMountinfo(line string) (Mount, error) {
	f := strings.Fields(line)
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if len(f) < 7 || sep < 0 || sep+2 >= len(f) {
		return Mount{}, fmt.Errorf("mountinfo line %q: too few fields", line)
	}
	var m Mount
	var err error
	if m.ID, err = strconv.Atoi(f[0]); err != nil {
		return Mount{}, fmt.Errorf("mountinfo line %q: id: %w", line, err)
	}
	maj, min, ok := strings.Cut(f[2], ":")
	if !ok {
		return Mount{}, fmt.Errorf("mountinfo line %q: device %q", line, f[2])
	}
	if m.Major, err = strconv.Atoi(maj); err != nil {
		return Mount{}, fmt.Errorf("mountinfo line %q: major: %w", line, err)
	}
	if m.Minor, err = strconv.Atoi(min); err != nil {
		return Mount{}, fmt.Errorf("mountinfo line %q: minor: %w", line, err)
	}
	m.Root = unescapeMount(f[3])
	m.Point = unescapeMount(f[4])
	m.Options = f[5]
	m.FSType = f[sep+1]
	m.Source = unescapeMount(f[sep+2])
	if sep+3 < len(f) {
		m.SuperOptions = f[sep+3]
	}
	return m, nil
}

// unescapeMount undoes the kernel's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountAt returns the topmost mount whose mount point is exactly dir.
func MountAt(dir string) (Mount, bool, error) {
	ms, err := Mounts()
	if err != nil {
		return Mount{}, false, err
	}
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Point == dir {
			return ms[i], true, nil
		}
	}
	return Mount{}, false, nil
}
