package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

// File reads the document from a path, as JSON or base64 JSON.
type File struct{ Path string }

func (f File) Name() string { return "file " + f.Path }

func (f File) Read(context.Context) ([]byte, error) {
	fh, err := os.Open(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrAbsent
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, v1.MaxBootstrapBytes+1))
	if err != nil {
		return nil, err
	}
	return data, nil
}

// ClearToken rewrites the file without its token, keeping the controller
// URLs and CA so that an operator can still read where the node enrolled.
func (f File) ClearToken(_ context.Context, b *v1.Bootstrap) error {
	clean := *b
	clean.Token = ""
	data, err := json.MarshalIndent(&clean, "", "  ")
	if err != nil {
		return fmt.Errorf("encode bootstrap: %w", err)
	}
	mode := os.FileMode(0o600)
	if info, err := os.Stat(f.Path); err == nil {
		mode = info.Mode().Perm()
	}
	return atomicfile.Write(f.Path, append(data, '\n'), mode)
}
