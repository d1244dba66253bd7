package etcd

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// walFrame frames a walpb.Record as etcd's encoder does: the length,
// padded to 8 bytes with the padding flagged in the length's top byte.
func walFrame(typ int64, crc uint32, data []byte) []byte {
	var rec []byte
	rec = protowire.AppendTag(rec, 1, protowire.VarintType)
	rec = protowire.AppendVarint(rec, uint64(typ))
	rec = protowire.AppendTag(rec, 2, protowire.VarintType)
	rec = protowire.AppendVarint(rec, uint64(crc))
	if data != nil {
		rec = protowire.AppendTag(rec, 3, protowire.BytesType)
		rec = protowire.AppendBytes(rec, data)
	}
	lenField := uint64(len(rec))
	pad := (8 - len(rec)%8) % 8
	if pad != 0 {
		lenField |= uint64(0x80|pad) << 56
	}
	out := binary.LittleEndian.AppendUint64(nil, lenField)
	out = append(out, rec...)
	return append(out, make([]byte, pad)...)
}

func walMetadata(member, cluster uint64) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, member)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	return protowire.AppendVarint(b, cluster)
}

// walHead is the head of a WAL file whose previous file ended at prevCRC.
func walHead(prevCRC uint32, member, cluster uint64) []byte {
	md := walMetadata(member, cluster)
	crc := crc32.Update(prevCRC, crc32.MakeTable(crc32.Castagnoli), md)
	return append(walFrame(walCRCRecord, prevCRC, nil), walFrame(walMetadataRecord, crc, md)...)
}

func TestDecodeWALHead(t *testing.T) {
	for _, prev := range []uint32{0, 0xdeadbeef} {
		id, err := decodeWALHead(bytes.NewReader(walHead(prev, 0x8e9e05c52164694d, 0xcdf818194e3a8c32)))
		if err != nil || id != (walIdentity{MemberID: 0x8e9e05c52164694d, ClusterID: 0xcdf818194e3a8c32}) {
			t.Errorf("previous CRC %x: %+v, %v", prev, id, err)
		}
	}
	md := walMetadata(7, 9)
	good := walHead(0, 7, 9)
	for _, tc := range []struct {
		name string
		head []byte
		want string
	}{
		{"empty file", nil, "record 0: frame: EOF"},
		{"preallocated zeros", make([]byte, 4096), "empty frame"},
		{"truncated", good[:len(good)-3], "record 1: unexpected EOF"},
		{"metadata first", walFrame(walMetadataRecord, crc32.Checksum(md, crc32.MakeTable(crc32.Castagnoli)), md), "metadata before the CRC record"},
		{"bad CRC", append(walFrame(walCRCRecord, 0, nil), walFrame(walMetadataRecord, 1, md)...), "metadata CRC 00000001"},
		{"huge frame", binary.LittleEndian.AppendUint64(nil, 1<<40), "more than a WAL head record has"},
		{"no member", walHead(0, 0, 9), "no member ID"},
		{"garbage record", append(binary.LittleEndian.AppendUint64(nil, 3), 0xff, 0xff, 0xff), "bad field tag"},
		{"no metadata", bytes.Repeat(walFrame(walCRCRecord, 0, nil), 5), "no metadata in the first 4 records"},
	} {
		if _, err := decodeWALHead(bytes.NewReader(tc.head)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestReadWALIdentityTakesTheNewestFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := readWALIdentity(dir); err == nil {
		t.Error("no WAL directory: no error")
	}
	wal := filepath.Join(dir, "member", "wal")
	if err := os.MkdirAll(wal, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := readWALIdentity(dir); err == nil || !strings.Contains(err.Error(), "no .wal file") {
		t.Errorf("empty WAL directory: %v", err)
	}
	for name, head := range map[string][]byte{
		"0000000000000000-0000000000000000.wal": walHead(0, 1, 9),
		"0000000000000001-00000000000003e8.wal": walHead(0xabc, 2, 9),
		"0.tmp":                                 walHead(0, 3, 9),
	} {
		if err := os.WriteFile(filepath.Join(wal, name), head, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if id, err := readWALIdentity(dir); err != nil || id.MemberID != 2 {
		t.Errorf("identity %+v, %v; want member 2, of the newest file", id, err)
	}
}
