package etcd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// The member a data directory belongs to is written in etcd's write-ahead
// log, at the head of every WAL file: a CRC record, then a metadata record
// (etcdserverpb.Metadata: NodeID, ClusterID). The agent reads it to tell
// whether the cluster still has that member, without starting etcd and
// without etcd's server packages. The format is etcd's since v2: frames of
// a little-endian 64-bit length (its top byte flags padding to 8 bytes)
// followed by a walpb.Record (type, crc, data).
const (
	walMetadataRecord = 1
	walCRCRecord      = 4
	// walHeadRecords bounds the records read before the metadata: etcd
	// writes it second.
	walHeadRecords = 4
	// walMaxRecord bounds one head record; a metadata record is about 20
	// bytes, so a larger frame is not a WAL head.
	walMaxRecord = 4096
)

// walIdentity is the member and cluster a data directory's state is of.
type walIdentity struct {
	MemberID, ClusterID uint64
}

// readWALIdentity reads the member's identity from the newest WAL file
// under dataDir/member/wal.
func readWALIdentity(dataDir string) (walIdentity, error) {
	dir := filepath.Join(dataDir, "member", "wal")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return walIdentity{}, fmt.Errorf("read etcd's WAL: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".wal") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return walIdentity{}, fmt.Errorf("read etcd's WAL: no .wal file in %s", dir)
	}
	// WAL names are <sequence>-<index>.wal in fixed-width hex, so the
	// newest sorts last.
	slices.Sort(names)
	path := filepath.Join(dir, names[len(names)-1])
	f, err := os.Open(path)
	if err != nil {
		return walIdentity{}, fmt.Errorf("read etcd's WAL: %w", err)
	}
	defer f.Close()
	id, err := decodeWALHead(f)
	if err != nil {
		return walIdentity{}, fmt.Errorf("read etcd's WAL %s: %w", path, err)
	}
	return id, nil
}

// decodeWALHead reads a WAL file's first records up to its metadata and
// checks the metadata's CRC against the CRC record before it.
func decodeWALHead(r io.Reader) (walIdentity, error) {
	var prevCRC uint32
	seenCRC := false
	for n := range walHeadRecords {
		var frame [8]byte
		if _, err := io.ReadFull(r, frame[:]); err != nil {
			return walIdentity{}, fmt.Errorf("record %d: frame: %w", n, err)
		}
		lenField := binary.LittleEndian.Uint64(frame[:])
		size := lenField &^ (uint64(0xff) << 56)
		var pad uint64
		if lenField&(1<<63) != 0 {
			pad = (lenField >> 56) & 0x7
		}
		if size == 0 {
			return walIdentity{}, fmt.Errorf("record %d: empty frame (no metadata before it)", n)
		}
		if size > walMaxRecord {
			return walIdentity{}, fmt.Errorf("record %d: %d bytes, more than a WAL head record has", n, size)
		}
		buf := make([]byte, size+pad)
		if _, err := io.ReadFull(r, buf); err != nil {
			return walIdentity{}, fmt.Errorf("record %d: %w", n, err)
		}
		typ, crc, data, err := decodeWALRecord(buf[:size])
		if err != nil {
			return walIdentity{}, fmt.Errorf("record %d: %w", n, err)
		}
		switch typ {
		case walCRCRecord:
			prevCRC, seenCRC = crc, true
		case walMetadataRecord:
			if !seenCRC {
				return walIdentity{}, fmt.Errorf("record %d: metadata before the CRC record", n)
			}
			if want := crc32.Update(prevCRC, crc32.MakeTable(crc32.Castagnoli), data); crc != want {
				return walIdentity{}, fmt.Errorf("record %d: metadata CRC %08x, want %08x", n, crc, want)
			}
			return decodeWALMetadata(data)
		}
	}
	return walIdentity{}, fmt.Errorf("no metadata in the first %d records", walHeadRecords)
}

// decodeWALRecord decodes a walpb.Record: type (1), crc (2), data (3).
func decodeWALRecord(b []byte) (typ int64, crc uint32, data []byte, err error) {
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, nil, fmt.Errorf("bad field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == 1 && wt == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, nil, fmt.Errorf("type: %w", protowire.ParseError(n))
			}
			typ, b = int64(v), b[n:]
		case num == 2 && wt == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || v > 0xffffffff {
				return 0, 0, nil, errors.New("crc: not a 32-bit value")
			}
			crc, b = uint32(v), b[n:]
		case num == 3 && wt == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, 0, nil, fmt.Errorf("data: %w", protowire.ParseError(n))
			}
			data, b = v, b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, wt, b)
			if n < 0 {
				return 0, 0, nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return typ, crc, data, nil
}

// decodeWALMetadata decodes etcdserverpb.Metadata: NodeID (1), ClusterID (2).
func decodeWALMetadata(b []byte) (walIdentity, error) {
	var id walIdentity
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return walIdentity{}, fmt.Errorf("metadata: bad field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if (num == 1 || num == 2) && wt == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return walIdentity{}, fmt.Errorf("metadata field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			if num == 1 {
				id.MemberID = v
			} else {
				id.ClusterID = v
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, wt, b)
		if n < 0 {
			return walIdentity{}, fmt.Errorf("metadata field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	if id.MemberID == 0 {
		return walIdentity{}, errors.New("metadata has no member ID")
	}
	return id, nil
}
