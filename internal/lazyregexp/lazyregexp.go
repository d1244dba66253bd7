// Package lazyregexp holds regular expressions compiled when first used.
//
// Compiled at start-up, the validation patterns of the wire types, the
// etcd component and the pin file were half of the agent binary's package
// initialisation (median 6.8 ms, 3.5 ms without them, on a 2-vCPU EPYC),
// and most processes that import them validate nothing: keepalived's track
// script starts the agent every 2 s, and a booting VM starts it three
// times, where under emulation each millisecond is about a tenth of a
// second. Counted repetition ({0,253}) is what makes them costly to
// compile.
package lazyregexp

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"sync"
)

// Regexp is a regular expression compiled on its first use.
type Regexp struct {
	re func() *regexp.Regexp
}

// New returns expr, to be compiled on first use. It only parses expr now,
// which is cheap, so an invalid one still panics at start-up, as with
// regexp.MustCompile.
func New(expr string) *Regexp {
	if _, err := syntax.Parse(expr, syntax.Perl); err != nil {
		panic(fmt.Sprintf("lazyregexp: %q: %v", expr, err))
	}
	return &Regexp{re: sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })}
}

// MatchString is regexp.Regexp's.
func (r *Regexp) MatchString(s string) bool { return r.re().MatchString(s) }

// FindStringSubmatch is regexp.Regexp's.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.re().FindStringSubmatch(s) }
