package ctxio

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReaderStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := Reader(ctx, strings.NewReader("abcdef"))
	buf := make([]byte, 3)
	if n, err := r.Read(buf); n != 3 || err != nil || string(buf) != "abc" {
		t.Fatalf("read before cancel: %d %q %v", n, buf, err)
	}
	cancel()
	if n, err := io.ReadAll(r); len(n) != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %q %v", n, err)
	}
}
