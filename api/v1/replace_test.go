package v1_test

import (
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func TestDecodeReplaceNodeRequest(t *testing.T) {
	for body, want := range map[string]bool{"": false, " \n": false, `{}`: false, `{"freshDisk":true}`: true, `{"freshDisk":false}`: false} {
		r, err := v1.DecodeReplaceNodeRequest(strings.NewReader(body))
		if err != nil || r.FreshDisk != want {
			t.Errorf("%q: %+v, %v; want freshDisk %v", body, r, err, want)
		}
	}
	// A misspelt field is refused by name, not taken as the default: an
	// admin who asked for a fresh disk must not get the old one.
	for body, field := range map[string]string{`{"fresh_disk":true}`: "fresh_disk", `{"freshDisk":"yes"}`: "freshDisk", `{"freshDisk":true} {}`: ""} {
		_, err := v1.DecodeReplaceNodeRequest(strings.NewReader(body))
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: %v, want an error naming %q", body, err, field)
		}
	}
	if _, err := v1.DecodeReplaceNodeRequest(strings.NewReader(`{"freshDisk":true,` + strings.Repeat(" ", int(v1.MaxAdminBytes)) + `}`)); err == nil {
		t.Error("a body over the limit was taken")
	}
}
