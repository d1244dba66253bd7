package v1_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func TestDecodeRestoreRequest(t *testing.T) {
	for body, field := range map[string]string{
		`{"source":"M1"}`:                              "source",
		`{"source":"../m1"}`:                           "source",
		`{"snapshotTakenAt":"2026-11-29T03:00:00.5Z"}`: "snapshotTakenAt",
		`{"snapshotTakenAt":"0001-01-01T00:00:00Z"}`:   "snapshotTakenAt",
		`{"snapshotTakenAt":"1999-12-31T23:59:59Z"}`:   "snapshotTakenAt",
		`{"source":"m1","snapshot":"snapshot-x.db"}`:   "snapshot",
	} {
		_, err := v1.DecodeRestoreRequest(strings.NewReader(body))
		var fe *v1.FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: %v, want a refusal of %s", body, err, field)
		}
	}
	if _, err := v1.DecodeRestoreRequest(strings.NewReader(`{"snapshotTakenAt":"yesterday"}`)); err == nil {
		t.Error("a time that is not RFC 3339 was taken")
	}
	r, err := v1.DecodeRestoreRequest(strings.NewReader(`{}`))
	if err != nil || r.Source != "" || r.SnapshotTakenAt != nil {
		t.Errorf("the default restore: %+v, %v", r, err)
	}
	r, err = v1.DecodeRestoreRequest(strings.NewReader(`{"source":"c-m2","snapshotTakenAt":"2026-11-29T03:00:00+01:00"}`))
	if err != nil || r.Source != "c-m2" || !r.SnapshotTakenAt.Equal(time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)) {
		t.Errorf("a restore of a named snapshot: %+v, %v", r, err)
	}
}

func TestParseSnapshotTime(t *testing.T) {
	for _, s := range []string{"", "yesterday", "2026-11-29T03:00:00.5Z", "1999-12-31T23:59:59Z", "2026-11-29 03:00:00", "../../etc/passwd"} {
		_, err := v1.ParseSnapshotTime(s)
		var fe *v1.FieldError
		if !errors.As(err, &fe) || fe.Field != "takenAt" {
			t.Errorf("%q: %v, want a refusal of takenAt", s, err)
		}
	}
	taken := time.Date(2026, 11, 29, 4, 0, 0, 0, time.FixedZone("", 3600))
	if p := v1.EtcdSnapshotCopyPath(taken); p != v1.PathNodeEtcdSnapshots+"/2026-11-29T03:00:00Z" {
		t.Errorf("the copy's path: %s, want its time in UTC", p)
	}
	got, err := v1.ParseSnapshotTime("2026-11-29T04:00:00+01:00")
	if err != nil || got != time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC) {
		t.Errorf("a snapshot's time: %v, %v; want 03:00 UTC", got, err)
	}
}
