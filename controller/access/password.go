package access

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Argon2id parameters: RFC 9106's second recommended option (64 MiB,
// three passes), with two lanes for a two-core appliance. They are
// written into every hash, so raising them later keeps old hashes valid.
const (
	argonTime    = 3
	argonMemory  = 64 << 10 // KiB
	argonThreads = 2
	argonKeyLen  = 32
	argonSaltLen = 16
)

// hasher bounds how many hashes run at once: each takes 64 MiB, so a
// burst of logins must queue rather than exhaust the controller's memory.
type hasher struct {
	slots chan struct{}
}

func newHasher(parallel int) *hasher {
	return &hasher{slots: make(chan struct{}, parallel)}
}

func (h *hasher) acquire(ctx context.Context) error {
	select {
	case h.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *hasher) release() { <-h.slots }

// hash returns password's argon2id hash in the PHC string format.
func (h *hasher) hash(ctx context.Context, password string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("salt: %w", err)
	}
	if err := h.acquire(ctx); err != nil {
		return "", err
	}
	defer h.release()
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// verify reports whether password matches encoded, in constant time.
func (h *hasher) verify(ctx context.Context, password, encoded string) (bool, error) {
	p, err := parsePHC(encoded)
	if err != nil {
		return false, err
	}
	if err := h.acquire(ctx); err != nil {
		return false, err
	}
	defer h.release()
	key := argon2.IDKey([]byte(password), p.salt, p.time, p.memory, p.threads, uint32(len(p.key)))
	return subtle.ConstantTimeCompare(key, p.key) == 1, nil
}

type phc struct {
	time, memory uint32
	threads      uint8
	salt, key    []byte
}

// parsePHC reads a stored hash, refusing parameters no hash of ours has,
// so a damaged record cannot ask for gigabytes.
func parsePHC(s string) (phc, error) {
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return phc{}, errors.New("password hash: not an argon2id PHC string")
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return phc{}, fmt.Errorf("password hash: version %q", parts[2])
	}
	var p phc
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.memory, &p.time, &p.threads); err != nil {
		return phc{}, fmt.Errorf("password hash: parameters %q", parts[3])
	}
	if p.memory < 8<<10 || p.memory > 1<<20 || p.time < 1 || p.time > 10 || p.threads < 1 || p.threads > 16 {
		return phc{}, fmt.Errorf("password hash: parameters %q out of range", parts[3])
	}
	enc := base64.RawStdEncoding
	var err error
	if p.salt, err = enc.DecodeString(parts[4]); err != nil || len(p.salt) < 8 {
		return phc{}, errors.New("password hash: bad salt")
	}
	if p.key, err = enc.DecodeString(parts[5]); err != nil || len(p.key) < 16 || len(p.key) > 64 {
		return phc{}, errors.New("password hash: bad key")
	}
	return p, nil
}

// HashPassword hashes a password as a local user's is hashed: what one
// local login costs the controller, for the benchmark's reference.
func HashPassword(ctx context.Context, password string) (string, error) {
	return newHasher(1).hash(ctx, password)
}
