package v1

import (
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// Paths of users and sessions.
const (
	PathUsers   = "/api/v1/users"
	PathLogin   = "/api/v1/login"
	PathRefresh = "/api/v1/refresh"
	PathLogout  = "/api/v1/logout"
	PathSetup   = "/api/v1/setup"
	PathWhoAmI  = "/api/v1/whoami"
	PathAudit   = "/api/v1/audit"
)

// UserRole is what a Harmony user may do across the controller: an admin
// manages providers, images, users and every cluster; a user sees the
// clusters granted to them.
type UserRole string

// User roles.
const (
	UserRoleAdmin UserRole = "admin"
	UserRoleUser  UserRole = "user"
)

// User sources.
const (
	UserSourceLocal = "local"
)

// Session and password limits.
const (
	// AccessTokenLifetime is how long one access token is good for; a
	// refresh re-reads the user, so a disabled user loses access within it.
	AccessTokenLifetime = 15 * time.Minute
	// RefreshTokenLifetime is how long a login lasts without a password.
	RefreshTokenLifetime = 12 * time.Hour
	MinPasswordLength    = 12
	// MaxPasswordBytes bounds what the memory-hard hash is asked to read.
	MaxPasswordBytes = 256
	// MaxAuthBytes bounds a login, refresh, setup or user body.
	MaxAuthBytes = 16 << 10
)

// Error codes of users and sessions.
const (
	// CodeBadCredentials: the user name or the password is wrong, or the
	// user is disabled; which one is not said.
	CodeBadCredentials = "bad_credentials"
	// CodeThrottled: too many failed logins for this user or from this
	// address; Retry-After says when to try again.
	CodeThrottled = "throttled"
	// CodeSessionInvalid: a session token that is malformed, expired,
	// signed by another key, or of a session that was ended.
	CodeSessionInvalid = "session_invalid"
	// CodeSetupDone: the setup token was used, or an admin user exists.
	CodeSetupDone = "setup_done"
	// CodeCSRF: a browser's request without the CSRF token its session
	// needs (HeaderCSRF), or from another site (Origin).
	CodeCSRF = "csrf_failed"
)

// User is a user record as the API shows it. Its password hash never
// leaves the controller.
type User struct {
	Name   string   `json:"name"`
	Role   UserRole `json:"role"`
	Source string   `json:"source"`
	// DN and Groups are a directory user's, as of their last sign-in or
	// refresh.
	DN                string    `json:"dn,omitempty"`
	Groups            []string  `json:"groups,omitempty"`
	Disabled          bool      `json:"disabled,omitempty"`
	CreatedAt         time.Time `json:"createdAt"`
	PasswordChangedAt time.Time `json:"passwordChangedAt,omitzero"`
}

// UserList answers GET PathUsers.
type UserList struct {
	Users []User `json:"users"`
}

// UserCreate is the body of POST PathUsers.
type UserCreate struct {
	Name     string   `json:"name"`
	Role     UserRole `json:"role"`
	Password string   `json:"password"`
}

// UserUpdate is the body of PATCH PathUsers/{name}: each field set is
// changed. A new password or disabling ends the user's sessions.
type UserUpdate struct {
	Password *string   `json:"password,omitempty"`
	Role     *UserRole `json:"role,omitempty"`
	Disabled *bool     `json:"disabled,omitempty"`
}

// LoginRequest is the body of POST PathLogin.
type LoginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
	// Browser puts the session into cookies (CookieAccess, CookieRefresh,
	// CookieCSRF) instead of the answer, for the web console: the tokens
	// never reach JavaScript. The request must carry HeaderCSRF (any
	// value), which no other site's page can send.
	Browser bool `json:"browser,omitempty"`
}

// RefreshRequest is the body of POST PathRefresh and PathLogout.
type RefreshRequest struct {
	RefreshToken string `json:"refreshToken,omitempty"`
	// Browser refreshes or ends the session in the console's cookies;
	// RefreshToken is then empty and HeaderCSRF must match CookieCSRF.
	Browser bool `json:"browser,omitempty"`
}

// A browser's session (LoginRequest.Browser): the access and refresh
// tokens in HttpOnly cookies, and a CSRF token in a cookie the console's
// script reads and sends back in HeaderCSRF with every change. All three
// are Secure, SameSite=Strict and __Host- (Path=/, no Domain: no other
// host can set them). A request that a cookie authenticates and that
// changes something needs HeaderCSRF equal to CookieCSRF.
const (
	CookieAccess  = "__Host-harmony-access"
	CookieRefresh = "__Host-harmony-refresh"
	CookieCSRF    = "__Host-harmony-csrf"
	HeaderCSRF    = "X-Harmony-CSRF"
)

// SetupRequest is the body of POST PathSetup: the one-time setup token a
// new controller wrote into its data directory, and the first admin.
type SetupRequest struct {
	Token    string `json:"token"`
	Name     string `json:"name"`
	Password string `json:"password"`
}

// Session answers a login or a refresh. The access token goes in
// "Authorization: Bearer"; the refresh token only to PathRefresh.
type Session struct {
	User             User      `json:"user"`
	AccessToken      string    `json:"accessToken"`
	AccessExpiresAt  time.Time `json:"accessExpiresAt"`
	RefreshToken     string    `json:"refreshToken"`
	RefreshExpiresAt time.Time `json:"refreshExpiresAt"`
}

// SessionsEnded answers POST PathUsers/{name}/end-sessions.
type SessionsEnded struct {
	Ended int `json:"ended"`
}

// WhoAmI answers GET PathWhoAmI: who the controller takes the caller for.
type WhoAmI struct {
	// Kind is "user", or the certificate's organization (an admin or a
	// node certificate).
	Kind string   `json:"kind"`
	Name string   `json:"name"`
	Role UserRole `json:"role,omitempty"`
}

// Local user names: lower case, so that "Alice" and "alice" are one user.
var userNamePattern = lazyregexp.New(`^[a-z][a-z0-9._-]{0,63}$`)

// ValidateUserName checks a user name for field.
func ValidateUserName(field, name string) error {
	if !userNamePattern.MatchString(name) {
		return fieldErr(field, "%q is not a user name: a lower-case letter, then up to 63 of a-z, 0-9, '.', '_', '-'", name)
	}
	return nil
}

// ValidatePassword checks a new password for field. Length is what
// matters (NIST SP 800-63B): no composition rules.
func ValidatePassword(field, password string) error {
	switch {
	case len(password) > MaxPasswordBytes:
		return fieldErr(field, "longer than %d bytes", MaxPasswordBytes)
	case !utf8.ValidString(password) || strings.ContainsRune(password, 0):
		return fieldErr(field, "not valid UTF-8 text")
	case utf8.RuneCountInString(password) < MinPasswordLength:
		return fieldErr(field, "shorter than %d characters", MinPasswordLength)
	}
	return nil
}

// validate checks a role for field.
func (r UserRole) validate(field string) error {
	if r != UserRoleAdmin && r != UserRoleUser {
		return fieldErr(field, "%q is not a role: admin or user", r)
	}
	return nil
}

// DecodeUserCreate reads and validates a new user.
func DecodeUserCreate(r io.Reader) (*UserCreate, error) {
	var u UserCreate
	if err := decodeStrict(r, MaxAuthBytes, &u); err != nil {
		return nil, err
	}
	if u.Role == "" {
		u.Role = UserRoleUser
	}
	if err := ValidateUserName("name", u.Name); err != nil {
		return nil, err
	}
	if err := u.Role.validate("role"); err != nil {
		return nil, err
	}
	if err := ValidatePassword("password", u.Password); err != nil {
		return nil, err
	}
	return &u, nil
}

// DecodeUserUpdate reads and validates a change to a user.
func DecodeUserUpdate(r io.Reader) (*UserUpdate, error) {
	var u UserUpdate
	if err := decodeStrict(r, MaxAuthBytes, &u); err != nil {
		return nil, err
	}
	if u.Password == nil && u.Role == nil && u.Disabled == nil {
		return nil, fieldErr("", "nothing to change: set password, role or disabled")
	}
	if u.Password != nil {
		if err := ValidatePassword("password", *u.Password); err != nil {
			return nil, err
		}
	}
	if u.Role != nil {
		if err := u.Role.validate("role"); err != nil {
			return nil, err
		}
	}
	return &u, nil
}

// DecodeLoginRequest reads a login. Only the shape is checked: a wrong
// name and a wrong password get the same answer.
func DecodeLoginRequest(r io.Reader) (*LoginRequest, error) {
	var l LoginRequest
	if err := decodeStrict(r, MaxAuthBytes, &l); err != nil {
		return nil, err
	}
	if l.Username == "" {
		return nil, fieldErr("username", "empty")
	}
	if len(l.Username) > 256 {
		return nil, fieldErr("username", "longer than 256 bytes")
	}
	if l.Password == "" {
		return nil, fieldErr("password", "empty")
	}
	if len(l.Password) > MaxPasswordBytes {
		return nil, fieldErr("password", "longer than %d bytes", MaxPasswordBytes)
	}
	return &l, nil
}

// DecodeRefreshRequest reads a refresh or a logout.
func DecodeRefreshRequest(r io.Reader) (*RefreshRequest, error) {
	var q RefreshRequest
	if err := decodeStrict(r, MaxAuthBytes, &q); err != nil {
		return nil, err
	}
	switch {
	case q.Browser && q.RefreshToken != "":
		return nil, fieldErr("refreshToken", "must be empty with browser: the token is in the session's cookie")
	case !q.Browser && q.RefreshToken == "":
		return nil, fieldErr("refreshToken", "empty")
	}
	return &q, nil
}

// DecodeSetupRequest reads and validates the first admin's setup.
func DecodeSetupRequest(r io.Reader) (*SetupRequest, error) {
	var s SetupRequest
	if err := decodeStrict(r, MaxAuthBytes, &s); err != nil {
		return nil, err
	}
	if s.Token == "" {
		return nil, fieldErr("token", "empty")
	}
	if err := ValidateUserName("name", s.Name); err != nil {
		return nil, err
	}
	if err := ValidatePassword("password", s.Password); err != nil {
		return nil, err
	}
	return &s, nil
}

// AuditEntry is one audited request: who, from where, what, when, and the
// answer. It never holds a body, so no secret.
type AuditEntry struct {
	Time time.Time `json:"time"`
	// Actor is who the controller took the caller for: "user NAME", a
	// certificate's "ORGANIZATION NAME", or "anonymous".
	Actor string `json:"actor"`
	// User is the user the request was by or, for a login or a setup,
	// for; "" when none.
	User    string `json:"user,omitempty"`
	Remote  string `json:"remote"`
	Method  string `json:"method"`
	Route   string `json:"route"`
	Path    string `json:"path"`
	Cluster string `json:"cluster,omitempty"`
	Status  int    `json:"status"`
	Code    string `json:"code,omitempty"`
	// Suppressed counts the refusals of unauthenticated callers from the
	// same source (an IPv4 address, an IPv6 /64) left out of the trail
	// since the source's previous entry: each source has a budget.
	Suppressed int `json:"suppressed,omitempty"`
}

// AuditList answers GET PathAudit.
type AuditList struct {
	Items []AuditEntry `json:"items"`
}
