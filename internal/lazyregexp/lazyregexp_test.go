package lazyregexp

import (
	"regexp"
	"testing"
)

func TestMatchesAsRegexpDoes(t *testing.T) {
	const expr = `^([a-z0-9]{1,8})-([0-9]{1,3})$`
	lazy, eager := New(expr), regexp.MustCompile(expr)
	for _, s := range []string{"abc-1", "abcdefghi-1", "abc-1234", "", "x-12", "X-1"} {
		if got, want := lazy.MatchString(s), eager.MatchString(s); got != want {
			t.Errorf("MatchString(%q) = %v, want %v", s, got, want)
		}
		if got, want := lazy.FindStringSubmatch(s), eager.FindStringSubmatch(s); len(got) != len(want) || (len(got) > 0 && got[1] != want[1]) {
			t.Errorf("FindStringSubmatch(%q) = %q, want %q", s, got, want)
		}
	}
}

// TestNewDoesNotCompile counts allocations, not time: compiling a counted
// repetition allocates hundreds of times, parsing it a few dozen.
func TestNewDoesNotCompile(t *testing.T) {
	const expr = `^[a-z0-9.-]{1,253}=https://[0-9a-fA-F.:\[\]]+:[0-9]{1,5}$`
	lazy := testing.AllocsPerRun(20, func() { New(expr) })
	eager := testing.AllocsPerRun(20, func() { regexp.MustCompile(expr) })
	t.Logf("allocations: New %.0f, regexp.MustCompile %.0f", lazy, eager)
	if lazy*5 > eager {
		t.Errorf("New allocates %.0f times, regexp.MustCompile %.0f: New seems to compile", lazy, eager)
	}
}

func TestInvalidExpressionPanicsAtNew(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New accepted an invalid expression; it would panic only at its first use")
		}
	}()
	New(`([a-z]`)
}
