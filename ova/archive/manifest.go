// Package archive writes and validates OVA files: a plain USTAR tar holding
// the OVF descriptor, its manifest and the disks, in that order, with
// deterministic headers so the same inputs give byte-identical archives.
package archive

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"regexp"

	"github.com/harmonykaas/harmony/ova/ovf"
)

// Hash is the manifest's digest algorithm.
type Hash int

const (
	// SHA256 is the default.
	SHA256 Hash = iota
	// SHA1 is for ESXi and vCenter releases older than 6.5.
	SHA1
)

func (h Hash) String() string {
	switch h {
	case SHA256:
		return "SHA256"
	case SHA1:
		return "SHA1"
	}
	return fmt.Sprintf("Hash(%d)", int(h))
}

func (h Hash) valid() bool { return h == SHA256 || h == SHA1 }

func (h Hash) new() hash.Hash {
	if h == SHA1 {
		return sha1.New()
	}
	return sha256.New()
}

// ManifestEntry is one line of a manifest.
type ManifestEntry struct {
	Name   string
	Digest []byte
}

// FormatManifest renders one `SHA256(name)= hex` line per entry, in the
// order given.
func FormatManifest(h Hash, entries []ManifestEntry) ([]byte, error) {
	if !h.valid() {
		return nil, fmt.Errorf("manifest: unknown hash %v", h)
	}
	var b bytes.Buffer
	for _, e := range entries {
		if err := ovf.CheckFileName(e.Name); err != nil {
			return nil, fmt.Errorf("manifest: entry: %w", err)
		}
		if len(e.Digest) != h.new().Size() {
			return nil, fmt.Errorf("manifest: entry %q: digest is %d bytes, %v needs %d", e.Name, len(e.Digest), h, h.new().Size())
		}
		fmt.Fprintf(&b, "%s(%s)= %s\n", h, e.Name, hex.EncodeToString(e.Digest))
	}
	return b.Bytes(), nil
}

var manifestLine = regexp.MustCompile(`^(SHA1|SHA256)\(([^()]+)\)= ([0-9a-f]+)$`)

// ParseManifest reads a manifest. All lines must use one algorithm and name
// distinct files, at most MaxEntries of them. A trailing newline and CRLF
// line ends are accepted.
func ParseManifest(data []byte) (Hash, []ManifestEntry, error) {
	var (
		h       Hash
		entries []ManifestEntry
		seen    = map[string]bool{}
	)
	data = bytes.TrimRight(data, "\r\n")
	// Counted before splitting, which costs 24 bytes a line: a 1 MiB
	// manifest of newlines would cost 24 MiB.
	if n := bytes.Count(data, []byte("\n")) + 1; n > MaxEntries {
		return 0, nil, fmt.Errorf("manifest: %d lines, more than the %d entries an OVA may have", n, MaxEntries)
	}
	lines := bytes.Split(data, []byte("\n"))
	for i, raw := range lines {
		line := string(bytes.TrimSuffix(raw, []byte("\r")))
		m := manifestLine.FindStringSubmatch(line)
		if m == nil {
			return 0, nil, fmt.Errorf("manifest line %d %s: want ALGO(name)= hex", i+1, quote(line))
		}
		lh := SHA256
		if m[1] == "SHA1" {
			lh = SHA1
		}
		if i == 0 {
			h = lh
		} else if lh != h {
			return 0, nil, fmt.Errorf("manifest line %d: %s after %s: one algorithm per manifest", i+1, lh, h)
		}
		if err := ovf.CheckFileName(m[2]); err != nil {
			return 0, nil, fmt.Errorf("manifest line %d: %w", i+1, err)
		}
		if seen[m[2]] {
			return 0, nil, fmt.Errorf("manifest line %d: %q listed twice", i+1, m[2])
		}
		seen[m[2]] = true
		d, _ := hex.DecodeString(m[3])
		if len(d) != h.new().Size() || len(m[3])%2 != 0 {
			return 0, nil, fmt.Errorf("manifest line %d: %s digest of %q has %d hex digits, want %d", i+1, h, m[2], len(m[3]), 2*h.new().Size())
		}
		entries = append(entries, ManifestEntry{Name: m[2], Digest: d})
	}
	return h, entries, nil
}
