package access

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// Session tokens are JWTs (RFC 7519) signed with ES256 by a key the
// controller makes and rotates itself; the keys live with the other
// secrets in the store, so a restore brings them back.
const (
	tokenIssuer   = "harmony-controller"
	tokenAudience = "harmony-api"
	useAccess     = "access"
	useRefresh    = "refresh"
	// keyRotation is how long one key signs; a retired key still verifies
	// until the last refresh token it signed has expired.
	keyRotation   = 24 * time.Hour
	secretKeyRing = "session-keys"
)

// claims are a session token's: the user (sub), the session (sid), and
// what the token is for (use).
type claims struct {
	jwt.RegisteredClaims
	Session string `json:"sid"`
	Use     string `json:"use"`
}

// storedKey is one signing key as the store keeps it.
type storedKey struct {
	ID        string    `json:"id"`
	PKCS8     []byte    `json:"pkcs8"`
	CreatedAt time.Time `json:"createdAt"`
	RetiredAt time.Time `json:"retiredAt,omitzero"`
}

type signingKey struct {
	id      string
	key     *ecdsa.PrivateKey
	created time.Time
}

// keyRing signs with the newest key and verifies with any key not yet
// dropped.
type keyRing struct {
	store *store.Store

	mu   sync.Mutex
	keys map[string]*signingKey
	// current signs new tokens.
	current *signingKey
	// loaded: keys holds the store's ring. It is read once; after that
	// this controller's own rotations keep it, so a token with a made-up
	// key ID costs no store read.
	loaded bool
}

func newKeyRing(st *store.Store) *keyRing {
	return &keyRing{store: st, keys: map[string]*signingKey{}}
}

// signer returns the key to sign with at now, rotating the ring in the
// store first when the current key is due.
func (r *keyRing) signer(now time.Time) (*signingKey, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.current != nil && now.Sub(r.current.created) < keyRotation {
		return r.current, nil
	}
	var ring []storedKey
	err := r.store.Update(func(tx *store.Tx) error {
		if err := tx.Get(store.Secrets, secretKeyRing, &ring); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if len(ring) > 0 && now.Sub(ring[0].CreatedAt) < keyRotation {
			return nil // another replica, or an earlier start, rotated it
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("session signing key: %w", err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		kept := []storedKey{{ID: rand.Text()[:12], PKCS8: der, CreatedAt: now.UTC()}}
		for i, k := range ring {
			if i == 0 {
				k.RetiredAt = now.UTC()
			}
			if now.Sub(k.RetiredAt) < v1.RefreshTokenLifetime+time.Minute {
				kept = append(kept, k)
			}
		}
		ring = kept
		return tx.Put(store.Secrets, secretKeyRing, ring)
	})
	if err != nil {
		return nil, fmt.Errorf("rotate session signing keys: %w", err)
	}
	if err := r.load(ring); err != nil {
		return nil, err
	}
	return r.current, nil
}

// load replaces the ring in memory; r.mu is held.
func (r *keyRing) load(ring []storedKey) error {
	keys := map[string]*signingKey{}
	for i, k := range ring {
		parsed, err := x509.ParsePKCS8PrivateKey(k.PKCS8)
		if err != nil {
			return fmt.Errorf("session signing key %s: %w", k.ID, err)
		}
		ec, ok := parsed.(*ecdsa.PrivateKey)
		if !ok || ec.Curve != elliptic.P256() {
			return fmt.Errorf("session signing key %s: not a P-256 key", k.ID)
		}
		keys[k.ID] = &signingKey{id: k.ID, key: ec, created: k.CreatedAt}
		if i == 0 {
			r.current = keys[k.ID]
		}
	}
	r.keys = keys
	r.loaded = true
	return nil
}

// verifier returns the public key of id.
func (r *keyRing) verifier(id string) (*ecdsa.PublicKey, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.loaded {
		// The first token after a start may be from before it.
		var ring []storedKey
		err := r.store.View(func(tx *store.Tx) error { return tx.Get(store.Secrets, secretKeyRing, &ring) })
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if err := r.load(ring); err != nil {
			return nil, err
		}
	}
	if k, ok := r.keys[id]; ok {
		return &k.key.PublicKey, nil
	}
	return nil, fmt.Errorf("signed by an unknown key %q", id)
}

// sign makes a token for user's session.
func (r *keyRing) sign(user, session, use string, now time.Time, lifetime time.Duration) (string, time.Time, error) {
	k, err := r.signer(now)
	if err != nil {
		return "", time.Time{}, err
	}
	exp := now.Add(lifetime)
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: tokenIssuer, Subject: user, Audience: jwt.ClaimStrings{tokenAudience},
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)),
			ExpiresAt: jwt.NewNumericDate(exp), ID: rand.Text(),
		},
		Session: session, Use: use,
	})
	tok.Header["kid"] = k.id
	s, err := tok.SignedString(k.key)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("sign session token: %w", err)
	}
	return s, exp, nil
}

// parse verifies a token for use at now: ES256 only, a known key, this
// issuer and audience, within its lifetime. The error says why not, for
// the log; the client is told only that the session is not valid.
func (r *keyRing) parse(token, use string, now time.Time) (*claims, error) {
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		id, _ := t.Header["kid"].(string)
		return r.verifier(id)
	},
		jwt.WithValidMethods([]string{jwt.SigningMethodES256.Alg()}),
		jwt.WithIssuer(tokenIssuer), jwt.WithAudience(tokenAudience),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil {
		return nil, err
	}
	if c.Use != use {
		return nil, fmt.Errorf("a %s token where a %s token belongs", c.Use, use)
	}
	if c.Subject == "" || c.Session == "" {
		return nil, errors.New("no subject or session")
	}
	return &c, nil
}
