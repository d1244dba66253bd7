package etcdsnapshot

import (
	"strings"
	"testing"
)

func TestRoomLeavesEtcdSpaceToGrow(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name             string
		free, total, db  uint64
		wantRoom         int64
		wantErrSubstring string
	}{
		{"plenty", 5 * gib, 20 * gib, 1 << 20, 3 * gib, ""},
		{"a tenth of the disk is kept", 11 * gib, 100 * gib, 1 << 20, 1 * gib, ""},
		{"the database's size is kept when larger", 10 * gib, 20 * gib, 4 * gib, 6 * gib, ""},
		{"too little for the database twice", 7 * gib, 20 * gib, 4 * gib, 0, "would leave less than"},
		{"too little for the tenth", 10*gib + 1<<20, 100 * gib, 1 << 20, 0, "would leave less than"},
		{"never more than etcd's largest database", 500 * gib, 1000 * gib, 1 << 20, MaxBytes, ""},
	} {
		got, err := room(tc.free, tc.total, tc.db)
		switch {
		case tc.wantErrSubstring != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErrSubstring)):
			t.Errorf("%s: %d, %v; want an error saying %q", tc.name, got, err, tc.wantErrSubstring)
		case tc.wantErrSubstring == "" && (err != nil || got != tc.wantRoom):
			t.Errorf("%s: %d, %v; want %d", tc.name, got, err, tc.wantRoom)
		}
	}
}
