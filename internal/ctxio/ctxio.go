// Package ctxio bounds long reads by a context.
package ctxio

import (
	"context"
	"io"
)

// Reader returns a reader of r that fails with ctx's error once ctx ends,
// so that a long copy stops between two reads.
func Reader(ctx context.Context, r io.Reader) io.Reader { return reader{ctx, r} }

type reader struct {
	ctx context.Context
	r   io.Reader
}

func (c reader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
