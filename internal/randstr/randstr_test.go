package randstr

import (
	"regexp"
	"testing"
)

func TestShapes(t *testing.T) {
	h, err := Hex(8)
	if err != nil || !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(h) {
		t.Fatalf("Hex(8) = %q, %v", h, err)
	}
	seen := map[string]bool{}
	for range 100 {
		l, err := Lower(16)
		if err != nil || !regexp.MustCompile(`^[a-z0-9]{16}$`).MatchString(l) {
			t.Fatalf("Lower(16) = %q, %v", l, err)
		}
		if seen[l] {
			t.Fatalf("Lower(16) repeated %q", l)
		}
		seen[l] = true
	}
}
