// Package bootstrap finds the node's one-time bootstrap document: a file,
// VMware guestinfo, or the OVF environment, in that order.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// ErrAbsent means a source holds no bootstrap document. Any other error
// means the source holds one that cannot be used.
var ErrAbsent = errors.New("no bootstrap document")

// Source is one place a bootstrap document may come from.
type Source interface {
	// Name is shown in logs, e.g. "file /etc/harmony/bootstrap.json".
	Name() string
	// Read returns the raw document, or ErrAbsent.
	Read(ctx context.Context) ([]byte, error)
	// ClearToken removes the used token from the source, where it can.
	ClearToken(ctx context.Context, b *v1.Bootstrap) error
}

// Found is a decoded document and where it came from.
type Found struct {
	Doc    *v1.Bootstrap
	Source Source
}

// Load returns the document of the first source that has one. A source
// that has a broken document stops the search: silently falling through
// to an older document elsewhere would hide the mistake.
func Load(ctx context.Context, log *slog.Logger, sources []Source) (*Found, error) {
	var tried []string
	for _, s := range sources {
		data, err := s.Read(ctx)
		if errors.Is(err, ErrAbsent) {
			log.Debug("no bootstrap document", "source", s.Name())
			tried = append(tried, s.Name())
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read bootstrap from %s: %w", s.Name(), err)
		}
		doc, err := v1.DecodeBootstrap(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name(), err)
		}
		return &Found{Doc: doc, Source: s}, nil
	}
	return nil, fmt.Errorf("%w in any source (tried %s)", ErrAbsent, strings.Join(tried, ", "))
}
