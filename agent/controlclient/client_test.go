package controlclient

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func TestReasonIsBounded(t *testing.T) {
	cases := map[string]error{
		v1.CodeTokenUsed: &RefusedError{Code: v1.CodeTokenUsed},
		"refused":        &RefusedError{Code: "made_up_by_a_proxy"},
		"server_error":   &serverError{status: 502},
		"bad_response":   &badResponseError{err: errors.New("x")},
		"tls":            fmt.Errorf("wrapped: %w", x509.UnknownAuthorityError{}),
		"timeout":        context.DeadlineExceeded,
		"connect":        &net.OpError{Op: "dial", Err: errors.New("connection refused")},
		"other":          errors.New("something else"),
	}
	for want, err := range cases {
		if got := Reason(err); got != want {
			t.Errorf("Reason(%v) = %q, want %q", err, got, want)
		}
	}
}

func TestBackoffGrowsToItsCeilingWithJitter(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	var maxSeen time.Duration
	for i := range 200 {
		d := b.Next()
		ceiling := min(100*time.Millisecond<<min(i, 30), time.Second)
		if d < 0 || d > ceiling {
			t.Fatalf("attempt %d: %s outside [0, %s]", i, d, ceiling)
		}
		maxSeen = max(maxSeen, d)
	}
	if maxSeen < 500*time.Millisecond {
		t.Fatalf("200 draws never came near the 1s ceiling (max %s): no growth", maxSeen)
	}
	b.Reset()
	if d := b.Next(); d > 100*time.Millisecond {
		t.Fatalf("after Reset the first delay is %s, above the base", d)
	}
}

func TestPermanentRefusals(t *testing.T) {
	for _, code := range []string{v1.CodeTokenUsed, v1.CodeTokenExpired, v1.CodeNodeGone, v1.CodeCNMismatch} {
		if !(&RefusedError{Code: code}).Permanent() {
			t.Errorf("%s should be permanent", code)
		}
	}
	for _, code := range []string{v1.CodeBadRequest, v1.CodeBodyTooLarge, "refused"} {
		if (&RefusedError{Code: code}).Permanent() {
			t.Errorf("%s should be retried", code)
		}
	}
}

// A client with no controller URL fails its requests: it once answered
// status 0 and no error, so the role watch, which backs off on errors,
// spun a CPU.
func TestDoWithoutControllersFails(t *testing.T) {
	c := New(nil, x509.NewCertPool(), nil)
	defer c.Close()
	if status, err := c.Do(context.Background(), "GET", v1.PathNodeRole, nil, nil, nil); err == nil {
		t.Errorf("a request with no controller URL: status %d, no error", status)
	}
}
