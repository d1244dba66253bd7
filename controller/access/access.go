// Package access is who may use the controller: local users with
// argon2id password hashes, login throttling, sessions as signed tokens
// with a short access and a longer refresh lifetime, and the one-time
// setup of the first admin. It has no HTTP in it; the controller's HTTP
// layer calls one method per request.
package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/netaddr"
)

// SetupTokenFile is where a controller with no admin user writes the
// one-time setup token (0600, in its data directory).
const SetupTokenFile = "setup-token"

// secretSetupToken keeps the setup token's hash.
const secretSetupToken = "setup-token"

// Throttle settings: a user gets five free failures and an address twenty
// (several users behind one NAT); then each failure doubles the lock, from
// one second to fifteen minutes.
const (
	userFreeFailures    = 5
	addressFreeFailures = 20
	firstLock           = time.Second
	maxLock             = 15 * time.Minute
)

// Errors the HTTP layer maps to answers.
var (
	// ErrBadCredentials: wrong name, wrong password, or a disabled user.
	ErrBadCredentials = errors.New("wrong user name or password")
	// ErrSetupDone: the setup token is gone, or an admin user exists.
	ErrSetupDone = errors.New("the first admin is set up already")
)

// ThrottledError refuses a login for a while.
type ThrottledError struct {
	RetryAfter time.Duration
	// Of is "user" or "address".
	Of string
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("too many failed logins for this %s; try again in %s", e.Of, e.RetryAfter.Round(time.Second))
}

// SessionError refuses a session token; Reason is for the log only.
type SessionError struct{ Reason string }

func (e *SessionError) Error() string { return "session not valid: " + e.Reason }

// Config sets up the service.
type Config struct {
	Store   *store.Store
	DataDir string
	Now     func() time.Time
	Log     *slog.Logger
	// ParallelHashes bounds the password hashes computed at once (64 MiB
	// each); default 2.
	ParallelHashes int
}

// Service is the access service.
type Service struct {
	cfg       Config
	now       func() time.Time
	log       *slog.Logger
	hasher    *hasher
	keys      *keyRing
	users     *throttle
	addresses *throttle
	// decoy is a hash of a random password, verified for unknown users.
	decoy func() (string, error)
}

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ParallelHashes <= 0 {
		cfg.ParallelHashes = 2
	}
	h := newHasher(cfg.ParallelHashes)
	return &Service{
		cfg: cfg, now: cfg.Now, log: cfg.Log, hasher: h,
		decoy:     sync.OnceValues(func() (string, error) { return h.hash(context.Background(), rand.Text()) }),
		keys:      newKeyRing(cfg.Store),
		users:     newThrottle(userFreeFailures, firstLock, maxLock),
		addresses: newThrottle(addressFreeFailures, firstLock, maxLock),
	}
}

// userRecord is a user as the store keeps it.
type userRecord struct {
	v1.User
	PasswordHash string `json:"passwordHash"`
}

// sessionRecord is one login. A token is good only while its session is.
type sessionRecord struct {
	ID        string    `json:"id"`
	User      string    `json:"user"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	Remote    string    `json:"remote,omitempty"`
}

// Users lists the users.
func (s *Service) Users() ([]v1.User, error) {
	var out []v1.User
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		return tx.List(store.Users, "", func(_ string, data []byte) error {
			var u userRecord
			if err := json.Unmarshal(data, &u); err != nil {
				return err
			}
			out = append(out, u.User)
			return nil
		})
	})
	return out, err
}

// User returns one user.
func (s *Service) User(name string) (v1.User, error) {
	var u userRecord
	err := s.cfg.Store.View(func(tx *store.Tx) error { return tx.Get(store.Users, name, &u) })
	return u.User, err
}

// CreateUser adds a local user; store.ErrExists if the name is taken.
func (s *Service) CreateUser(ctx context.Context, req v1.UserCreate) (v1.User, error) {
	hash, err := s.hasher.hash(ctx, req.Password)
	if err != nil {
		return v1.User{}, err
	}
	u := userRecord{User: v1.User{Name: req.Name, Role: req.Role, Source: v1.UserSourceLocal, CreatedAt: s.now().UTC()}, PasswordHash: hash}
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		if tx.Has(store.Users, u.Name) {
			return fmt.Errorf("user %q: %w", u.Name, store.ErrExists)
		}
		return tx.Put(store.Users, u.Name, u)
	})
	if err != nil {
		return v1.User{}, err
	}
	return u.User, nil
}

// UpdateUser changes a user. A new password, a disable or a new role ends
// the user's sessions, so the change holds at once.
func (s *Service) UpdateUser(ctx context.Context, name string, req v1.UserUpdate) (v1.User, error) {
	var hash string
	if req.Password != nil {
		var err error
		if hash, err = s.hasher.hash(ctx, *req.Password); err != nil {
			return v1.User{}, err
		}
	}
	var u userRecord
	ended := 0
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := tx.Get(store.Users, name, &u); err != nil {
			return err
		}
		if u.Source == v1.UserSourceLDAP {
			// The directory owns these; Harmony only enables and disables.
			if req.Password != nil {
				return &v1.FieldError{Field: "password", Problem: fmt.Sprintf("%q is a directory user: change the password in the directory", name)}
			}
			if req.Role != nil {
				return &v1.FieldError{Field: "role", Problem: fmt.Sprintf("%q is a directory user: the role comes from the LDAP groupRoles", name)}
			}
		}
		if hash != "" {
			u.PasswordHash = hash
			u.PasswordChangedAt = s.now().UTC()
		}
		if req.Role != nil {
			u.Role = *req.Role
		}
		if req.Disabled != nil {
			u.Disabled = *req.Disabled
		}
		var err error
		if ended, err = endSessions(tx, name); err != nil {
			return err
		}
		return tx.Put(store.Users, name, u)
	})
	if err != nil {
		return v1.User{}, err
	}
	s.log.Info("user changed", "user", name, "password", hash != "", "role", u.Role, "disabled", u.Disabled, "sessions_ended", ended)
	return u.User, nil
}

// DeleteUser removes a user and ends their sessions.
func (s *Service) DeleteUser(name string) error {
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if !tx.Has(store.Users, name) {
			return fmt.Errorf("user %q: %w", name, store.ErrNotFound)
		}
		if _, err := endSessions(tx, name); err != nil {
			return err
		}
		// A new user of the same name must not inherit these.
		if err := deleteUserGrants(tx, name); err != nil {
			return err
		}
		return tx.Delete(store.Users, name)
	})
	if err == nil {
		s.log.Info("user deleted", "user", name)
	}
	return err
}

// EndSessions ends every session of a user at once; it returns how many.
func (s *Service) EndSessions(name string) (int, error) {
	n := 0
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if !tx.Has(store.Users, name) {
			return fmt.Errorf("user %q: %w", name, store.ErrNotFound)
		}
		var err error
		n, err = endSessions(tx, name)
		return err
	})
	return n, err
}

func endSessions(tx *store.Tx, user string) (int, error) {
	return deleteRecords(tx, store.Sessions, func(r sessionRecord) bool { return r.User == user })
}

// deleteRecords removes the records of b whose value matches; it returns
// how many.
func deleteRecords[T any](tx *store.Tx, b store.Bucket, match func(T) bool) (int, error) {
	return tx.DeleteIf(b, "", func(_ string, data []byte) (bool, error) {
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return false, err
		}
		return match(v), nil
	})
}

// checkSetup refuses a setup whose token is not the setup token's, or
// that comes after the first admin.
func checkSetup(tx *store.Tx, req v1.SetupRequest) error {
	var rec setupRecord
	if err := tx.Get(store.Secrets, secretSetupToken, &rec); errors.Is(err, store.ErrNotFound) {
		return ErrSetupDone
	} else if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(hashToken(req.Token)), []byte(rec.SHA256)) != 1 {
		return ErrBadCredentials
	}
	if tx.Has(store.Users, req.Name) {
		return fmt.Errorf("user %q: %w", req.Name, store.ErrExists)
	}
	admin, err := hasAdmin(tx)
	if err != nil {
		return err
	}
	if admin {
		return ErrSetupDone
	}
	return nil
}

// normalName is a sign-in name as users are keyed: "Alice" is "alice".
func normalName(name string) string { return strings.ToLower(name) }

// Login checks a user's password and starts a session. Throttled keys are
// refused before the password is looked at. A local user is checked here;
// any other name, when a directory is set, in the directory, which also
// gives the user's groups and role.
func (s *Service) Login(ctx context.Context, name, password string, remote netip.Addr) (v1.Session, error) {
	now := s.now()
	name = normalName(name)
	remoteText, addrKey := remote.Unmap().String(), netaddr.SourceKey(remote)
	if wait := s.addresses.begin(addrKey, now); wait > 0 {
		return v1.Session{}, &ThrottledError{RetryAfter: wait, Of: "address"}
	}
	if wait := s.users.begin(name, now); wait > 0 {
		s.addresses.end(addrKey, false, now)
		return v1.Session{}, &ThrottledError{RetryAfter: wait, Of: "user"}
	}
	failed := false
	defer func() {
		s.users.end(name, failed, now)
		s.addresses.end(addrKey, failed, now)
	}()
	var u userRecord
	err := s.cfg.Store.View(func(tx *store.Tx) error { return tx.Get(store.Users, name, &u) })
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return v1.Session{}, err
	}
	var ok bool
	if u.Source == v1.UserSourceLocal {
		ok, err = s.checkPassword(ctx, u, password)
	} else {
		u, ok, err = s.checkDirectory(ctx, name, password)
	}
	if err != nil {
		return v1.Session{}, err
	}
	if !ok || u.Disabled {
		failed = true
		s.log.Warn("login refused", "user", name, "remote", remoteText, "known", u.Name != "", "source", u.Source, "disabled", u.Disabled)
		return v1.Session{}, ErrBadCredentials
	}
	// The address's failures stay until they are forgotten: one good
	// account must not reset the count of guesses at the others.
	s.users.succeed(name)
	rec := sessionRecord{ID: rand.Text(), User: name, CreatedAt: now.UTC(), ExpiresAt: now.Add(v1.RefreshTokenLifetime).UTC(), Remote: remoteText}
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := pruneSessions(tx, now); err != nil {
			return err
		}
		return tx.Put(store.Sessions, rec.ID, rec)
	})
	if err != nil {
		return v1.Session{}, err
	}
	s.log.Info("login", "user", name, "source", u.Source, "remote", remoteText)
	return s.tokens(u.User, rec, now)
}

// checkPassword verifies a local user's password; a user with no hash (an
// unknown one) is checked against a decoy, so that timing does not tell
// which names exist.
func (s *Service) checkPassword(ctx context.Context, u userRecord, password string) (bool, error) {
	hash := u.PasswordHash
	if hash == "" {
		var err error
		if hash, err = s.decoy(); err != nil {
			return false, err
		}
	}
	ok, err := s.hasher.verify(ctx, password, hash)
	switch {
	case ctx.Err() != nil:
		return false, ctx.Err()
	case err != nil:
		s.log.Error("stored password hash unreadable", "user", u.Name, "err", err)
		return false, nil
	}
	return ok && u.Name != "", nil
}

// checkDirectory signs a user in through the directory, when one is set,
// and records what it says of them: the user record of a directory user
// is a cache of the directory's answer, kept for grants, listing and
// disabling.
func (s *Service) checkDirectory(ctx context.Context, name, password string) (userRecord, bool, error) {
	d, err := s.directory()
	if err != nil {
		return userRecord{}, false, err
	}
	if d == nil {
		ok, err := s.checkPassword(ctx, userRecord{}, password)
		return userRecord{}, ok, err
	}
	if v1.ValidateUserName("username", name) != nil {
		// Not a name Harmony can key a user by.
		return userRecord{}, false, nil
	}
	du, err := d.authenticate(ctx, name, password)
	if errors.Is(err, ErrBadCredentials) {
		return userRecord{}, false, nil
	}
	if err != nil {
		return userRecord{}, false, err
	}
	if du.Role == "" {
		s.log.Warn("directory user is in no group that groupRoles lets sign in", "user", name)
		return userRecord{}, false, nil
	}
	u, err := s.recordDirectoryUser(du)
	if errors.Is(err, ErrBadCredentials) {
		return userRecord{}, false, nil
	}
	return u, err == nil, err
}

// recordDirectoryUser stores what the directory says of a user, keeping
// what Harmony adds (created, disabled).
func (s *Service) recordDirectoryUser(du directoryUser) (userRecord, error) {
	var u userRecord
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		err := tx.Get(store.Users, du.Name, &u)
		switch {
		case errors.Is(err, store.ErrNotFound):
			u = userRecord{User: v1.User{Name: du.Name, Source: v1.UserSourceLDAP, CreatedAt: s.now().UTC()}}
		case err != nil:
			return err
		case u.Source != v1.UserSourceLDAP:
			// A local user of this name was added meanwhile: theirs.
			return ErrBadCredentials
		}
		u.Role, u.DN, u.Groups = du.Role, du.DN, du.Groups
		return tx.Put(store.Users, u.Name, u)
	})
	return u, err
}

func pruneSessions(tx *store.Tx, now time.Time) error {
	_, err := tx.DeleteIf(store.Sessions, "", func(_ string, data []byte) (bool, error) {
		var r sessionRecord
		// An unreadable session is of no use: it goes too.
		return json.Unmarshal(data, &r) != nil || now.After(r.ExpiresAt), nil
	})
	return err
}

// tokens issues an access token, and a refresh token that ends with the
// session.
func (s *Service) tokens(u v1.User, rec sessionRecord, now time.Time) (v1.Session, error) {
	access, accessExp, err := s.keys.sign(u.Name, rec.ID, useAccess, now, min(v1.AccessTokenLifetime, rec.ExpiresAt.Sub(now)))
	if err != nil {
		return v1.Session{}, err
	}
	refresh, refreshExp, err := s.keys.sign(u.Name, rec.ID, useRefresh, now, rec.ExpiresAt.Sub(now))
	if err != nil {
		return v1.Session{}, err
	}
	return v1.Session{User: u, AccessToken: access, AccessExpiresAt: accessExp.UTC(), RefreshToken: refresh, RefreshExpiresAt: refreshExp.UTC()}, nil
}

// session checks a token of use and returns its live session and user.
func (s *Service) session(token, use string) (sessionRecord, userRecord, error) {
	now := s.now()
	c, err := s.keys.parse(token, use, now)
	if err != nil {
		return sessionRecord{}, userRecord{}, &SessionError{Reason: err.Error()}
	}
	var rec sessionRecord
	var u userRecord
	err = s.cfg.Store.View(func(tx *store.Tx) error {
		if err := tx.Get(store.Sessions, c.Session, &rec); err != nil {
			return err
		}
		return tx.Get(store.Users, c.Subject, &u)
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return sessionRecord{}, userRecord{}, &SessionError{Reason: "the session was ended or its user deleted"}
	case err != nil:
		return sessionRecord{}, userRecord{}, err
	case rec.User != c.Subject:
		return sessionRecord{}, userRecord{}, &SessionError{Reason: "the token's user is not its session's"}
	case u.Disabled:
		return sessionRecord{}, userRecord{}, &SessionError{Reason: "the user is disabled"}
	case now.After(rec.ExpiresAt):
		return sessionRecord{}, userRecord{}, &SessionError{Reason: "the session expired"}
	}
	return rec, u, nil
}

// Authenticate returns the user an access token belongs to, as the store
// has them now (their role included).
func (s *Service) Authenticate(accessToken string) (v1.User, error) {
	_, u, err := s.session(accessToken, useAccess)
	return u.User, err
}

// Refresh issues new tokens for a live session, reading the user again:
// a directory user's entry, groups and role from the directory. A user
// the directory no longer finds, or no longer lets sign in, has the
// session ended; a directory that does not answer leaves it as it is.
func (s *Service) Refresh(ctx context.Context, refreshToken string) (v1.Session, error) {
	rec, u, err := s.session(refreshToken, useRefresh)
	if err != nil {
		return v1.Session{}, err
	}
	if u.Source == v1.UserSourceLDAP {
		if u, err = s.refreshDirectoryUser(ctx, rec); err != nil {
			return v1.Session{}, err
		}
	}
	return s.tokens(u.User, rec, s.now())
}

func (s *Service) refreshDirectoryUser(ctx context.Context, rec sessionRecord) (userRecord, error) {
	d, err := s.directory()
	if err != nil {
		return userRecord{}, err
	}
	reason := "the directory is no longer set"
	if d != nil {
		du, err := d.lookup(ctx, rec.User)
		switch {
		case errors.Is(err, errNotInDirectory):
			reason = "the directory no longer finds the user"
		case err != nil:
			return userRecord{}, err
		case du.Role == "":
			reason = "the user is in no group that groupRoles lets sign in"
		default:
			u, err := s.recordDirectoryUser(du)
			if errors.Is(err, ErrBadCredentials) {
				return userRecord{}, &SessionError{Reason: "a local user of the name replaced the directory user"}
			}
			return u, err
		}
	}
	err = s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Delete(store.Sessions, rec.ID) })
	if err != nil {
		return userRecord{}, err
	}
	s.log.Info("directory user's session ended at refresh", "user", rec.User, "reason", reason)
	return userRecord{}, &SessionError{Reason: reason}
}

// Logout ends the session of a refresh token.
func (s *Service) Logout(refreshToken string) error {
	rec, _, err := s.session(refreshToken, useRefresh)
	if err != nil {
		return err
	}
	return s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Delete(store.Sessions, rec.ID) })
}

// setupRecord is the setup token's hash.
type setupRecord struct {
	SHA256    string    `json:"sha256"`
	CreatedAt time.Time `json:"createdAt"`
}

// PrepareSetup writes a one-time setup token into the data directory when
// no admin user exists and none has been set up; it returns the file, or
// "" when there is nothing to set up. A token already written stays.
func (s *Service) PrepareSetup() (string, error) {
	path := filepath.Join(s.cfg.DataDir, SetupTokenFile)
	var admin bool
	err := s.cfg.Store.View(func(tx *store.Tx) (err error) {
		admin, err = hasAdmin(tx)
		return err
	})
	if err != nil {
		return "", err
	}
	if admin {
		// An admin made another way (harmonyctl user add): the token is
		// no longer needed, so it must not stay usable.
		return "", s.dropSetupToken()
	}
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	token := rand.Text() + rand.Text()
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		return tx.Put(store.Secrets, secretSetupToken, setupRecord{SHA256: hashToken(token), CreatedAt: s.now().UTC()})
	})
	if err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write setup token: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write setup token: %w", err)
	}
	return path, nil
}

// dropSetupToken forgets the setup token and removes its file.
func (s *Service) dropSetupToken() error {
	if err := s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Delete(store.Secrets, secretSetupToken) }); err != nil {
		return err
	}
	return s.removeSetupFile()
}

// removeSetupFile removes the setup token's file, once the token is gone
// from the store.
func (s *Service) removeSetupFile() error {
	if err := os.Remove(filepath.Join(s.cfg.DataDir, SetupTokenFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// hasAdmin reports whether an enabled admin user exists.
func hasAdmin(tx *store.Tx) (bool, error) {
	admin := false
	err := tx.List(store.Users, "", func(_ string, data []byte) error {
		var u userRecord
		if err := json.Unmarshal(data, &u); err != nil {
			return err
		}
		admin = admin || u.Role == v1.UserRoleAdmin && !u.Disabled
		return nil
	})
	return admin, err
}

func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Setup creates the first admin with the setup token, which it uses up.
func (s *Service) Setup(ctx context.Context, req v1.SetupRequest) (v1.User, error) {
	// The token first: the endpoint is open to anyone, and a password
	// hash is the costliest thing a request can ask of the controller.
	if err := s.cfg.Store.View(func(tx *store.Tx) error { return checkSetup(tx, req) }); err != nil {
		return v1.User{}, err
	}
	hash, err := s.hasher.hash(ctx, req.Password)
	if err != nil {
		return v1.User{}, err
	}
	u := userRecord{User: v1.User{Name: req.Name, Role: v1.UserRoleAdmin, Source: v1.UserSourceLocal, CreatedAt: s.now().UTC()}, PasswordHash: hash}
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		// Again: another setup may have won while this one hashed.
		if err := checkSetup(tx, req); err != nil {
			return err
		}
		if err := tx.Delete(store.Secrets, secretSetupToken); err != nil {
			return err
		}
		return tx.Put(store.Users, u.Name, u)
	})
	if err != nil {
		return v1.User{}, err
	}
	if err := s.removeSetupFile(); err != nil {
		s.log.Warn("the used setup token file stays; remove it", "err", err)
	}
	s.log.Info("first admin set up", "user", u.Name)
	return u.User, nil
}
