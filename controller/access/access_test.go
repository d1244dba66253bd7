package access

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/testutil"
)

func newTestService(t *testing.T) (*Service, *testutil.Clock) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "store.db"), store.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := &testutil.Clock{Base: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	return New(Config{Store: st, DataDir: dir, Now: clk.Now, Log: slog.New(slog.DiscardHandler)}), clk
}

const goodPassword = "correct horse battery"

var client = netip.MustParseAddr("198.18.0.50")

func addUser(t *testing.T, s *Service, name string, role v1.UserRole) {
	t.Helper()
	if _, err := s.CreateUser(context.Background(), v1.UserCreate{Name: name, Role: role, Password: goodPassword}); err != nil {
		t.Fatal(err)
	}
}

func login(t *testing.T, s *Service, name string) v1.Session {
	t.Helper()
	sess, err := s.Login(context.Background(), name, goodPassword, client)
	if err != nil {
		t.Fatalf("login %s: %v", name, err)
	}
	return sess
}

func TestPasswordHashes(t *testing.T) {
	h := newHasher(1)
	ctx := context.Background()
	a, err := h.hash(ctx, goodPassword)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := h.hash(ctx, goodPassword)
	if a == b || !strings.HasPrefix(a, "$argon2id$v=19$m=65536,t=3,p=2$") {
		t.Errorf("hashes %q and %q: want salted argon2id PHC strings", a, b)
	}
	if ok, err := h.verify(ctx, goodPassword, a); !ok || err != nil {
		t.Errorf("right password: %v, %v", ok, err)
	}
	if ok, err := h.verify(ctx, goodPassword+"!", a); ok || err != nil {
		t.Errorf("wrong password: %v, %v", ok, err)
	}
	// A damaged record must not make the controller hash with gigabytes.
	parts := strings.Split(a, "$")
	for _, bad := range []string{
		strings.Replace(a, "m=65536", "m=67108864", 1),
		strings.Replace(a, "t=3", "t=1000", 1),
		strings.Replace(a, "argon2id", "argon2i", 1),
		strings.Join(parts[:5], "$"),
		"plain text",
	} {
		if ok, err := h.verify(ctx, goodPassword, bad); ok || err == nil {
			t.Errorf("hash %q accepted", bad)
		}
	}
}

// 100 wrong passwords lock the user; the right one is then refused too,
// until the lock has passed; a success forgets the failures.
func TestBruteForceIsThrottled(t *testing.T) {
	s, clk := newTestService(t)
	addUser(t, s, "alice", v1.UserRoleUser)
	ctx := context.Background()
	var throttled, wrong int
	for i := range 100 {
		// Each try from its own address: the per-user lock alone holds.
		from := netip.AddrFrom4([4]byte{198, 18, 1, byte(i)})
		_, err := s.Login(ctx, "alice", "wrong password number "+string(rune('a'+i%26)), from)
		var te *ThrottledError
		switch {
		case errors.As(err, &te):
			throttled++
		case errors.Is(err, ErrBadCredentials):
			wrong++
		default:
			t.Fatalf("try %d: %v", i, err)
		}
		clk.Advance(100 * time.Millisecond)
	}
	if wrong > 12 || throttled < 88 {
		t.Errorf("100 wrong passwords: %d checked, %d throttled", wrong, throttled)
	}
	_, err := s.Login(ctx, "Alice", goodPassword, client)
	var te *ThrottledError
	if !errors.As(err, &te) || te.Of != "user" || te.RetryAfter <= 0 {
		t.Fatalf("right password during the lock: %v", err)
	}
	clk.Advance(te.RetryAfter)
	if _, err := s.Login(ctx, "alice", goodPassword, client); err != nil {
		t.Fatalf("right password after the lock: %v", err)
	}
	if _, err := s.Login(ctx, "alice", "wrong again", client); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("a wrong password after a success is checked again, not throttled: %v", err)
	}
}

// Many users guessed from one address lock the address.
func TestAddressIsThrottled(t *testing.T) {
	s, clk := newTestService(t)
	addUser(t, s, "bob", v1.UserRoleUser)
	ctx := context.Background()
	for i := range addressFreeFailures {
		if _, err := s.Login(ctx, "nobody"+string(rune('a'+i)), "whatever password", client); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("try %d: %v", i, err)
		}
		clk.Advance(time.Second)
	}
	s.Login(ctx, "nobody", "whatever password", client)
	_, err := s.Login(ctx, "bob", goodPassword, client)
	var te *ThrottledError
	if !errors.As(err, &te) || te.Of != "address" {
		t.Errorf("a known user from a throttled address: %v", err)
	}
	other := netip.MustParseAddr("198.18.0.51")
	if _, err := s.Login(ctx, "bob", goodPassword, other); err != nil {
		t.Errorf("the same user from another address: %v", err)
	}
	// A good login does not reset the address's failures: one valid
	// account must not buy more guesses at the others.
	for i := range addressFreeFailures - 1 {
		s.Login(ctx, "guess"+string(rune('a'+i)), "whatever password", other)
	}
	if _, err := s.Login(ctx, "bob", goodPassword, other); err != nil {
		t.Fatalf("bob's good login: %v", err)
	}
	s.Login(ctx, "guessx", "whatever password", other)
	s.Login(ctx, "guessy", "whatever password", other)
	if _, err := s.Login(ctx, "bob", goodPassword, other); !errors.As(err, &te) || te.Of != "address" {
		t.Errorf("after 21 failures and one good login from an address: %v", err)
	}
}

// IPv6 sources are counted by their /64, which one host routinely has
// whole: guesses spread over its addresses lock them all. (2001:2::/48 is
// the IPv6 benchmarking range; no packet is sent.)
func TestAddressThrottleCountsAnIPv6Slash64AsOne(t *testing.T) {
	s, clk := newTestService(t)
	addUser(t, s, "bob", v1.UserRoleUser)
	ctx := context.Background()
	for i := range addressFreeFailures {
		from := netip.MustParseAddr(fmt.Sprintf("2001:2:0:1::%x", i+1))
		if _, err := s.Login(ctx, "nobody"+string(rune('a'+i)), "whatever password", from); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("try %d from %s: %v", i, from, err)
		}
		clk.Advance(time.Second)
	}
	s.Login(ctx, "nobody", "whatever password", netip.MustParseAddr("2001:2:0:1::ff"))
	var te *ThrottledError
	if _, err := s.Login(ctx, "bob", goodPassword, netip.MustParseAddr("2001:2:0:1:ffff::99")); !errors.As(err, &te) || te.Of != "address" {
		t.Errorf("another address of the same /64: %v", err)
	}
	if _, err := s.Login(ctx, "bob", goodPassword, netip.MustParseAddr("2001:2:0:2::1")); err != nil {
		t.Errorf("an address of the next /64: %v", err)
	}
}

// Guesses sent at once get no more password checks than guesses sent one
// after another: an attempt being checked counts until it is judged.
func TestConcurrentGuessesAreThrottledLikeSequentialOnes(t *testing.T) {
	s, _ := newTestService(t)
	addUser(t, s, "alice", v1.UserRoleAdmin)
	const burst = 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	checked, throttled := 0, 0
	for i := range burst {
		wg.Go(func() {
			_, err := s.Login(context.Background(), "alice", fmt.Sprintf("wrong password %d", i), client)
			var te *ThrottledError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrBadCredentials):
				checked++
			case errors.As(err, &te) && te.RetryAfter > 0:
				throttled++
			default:
				t.Errorf("login: %v", err)
			}
		})
	}
	wg.Wait()
	if checked > userFreeFailures+1 || checked+throttled != burst {
		t.Errorf("%d guesses at once: %d checked, %d throttled; at most %d may be checked", burst, checked, throttled, userFreeFailures+1)
	}
	// The checked ones failed: the user is locked now, whatever comes.
	var te *ThrottledError
	if _, err := s.Login(context.Background(), "alice", goodPassword, client); !errors.As(err, &te) || te.Of != "user" {
		t.Errorf("the right password after the burst: %v", err)
	}
}

func TestThrottleForgetsAndIsBounded(t *testing.T) {
	th := newThrottle(1, time.Second, time.Minute)
	th.capacity = 3
	now := time.Unix(1000, 0)
	fail := func(k string, at time.Time) {
		if wait := th.begin(k, at); wait > 0 {
			t.Fatalf("%s throttled for %s", k, wait)
		}
		th.end(k, true, at)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		fail(k, now)
		fail(k, now)
		now = now.Add(time.Millisecond)
	}
	if len(th.strikes) != 3 || th.strikes["a"] != nil {
		t.Errorf("at capacity the key idle longest goes: %d keys, a kept: %v", len(th.strikes), th.strikes["a"] != nil)
	}
	if th.begin("d", now) == 0 {
		t.Errorf("d failed twice with one free failure and is not locked")
	}
	fail("d", now.Add(3*time.Minute))
	if s := th.strikes["d"]; s.failures != 1 {
		t.Errorf("failures long after the lock ended count afresh: %d", s.failures)
	}
}

func TestSessionTokens(t *testing.T) {
	s, clk := newTestService(t)
	addUser(t, s, "carol", v1.UserRoleAdmin)
	sess := login(t, s, "carol")
	if sess.User.Name != "carol" || sess.User.Role != v1.UserRoleAdmin ||
		!sess.AccessExpiresAt.Equal(clk.Now().Add(v1.AccessTokenLifetime)) || !sess.RefreshExpiresAt.Equal(clk.Now().Add(v1.RefreshTokenLifetime)) {
		t.Errorf("session %+v", sess)
	}
	if u, err := s.Authenticate(sess.AccessToken); err != nil || u.Name != "carol" {
		t.Fatalf("access token: %v, %v", u, err)
	}
	if _, err := s.Authenticate(sess.RefreshToken); !isSessionError(err) {
		t.Errorf("a refresh token used as an access token: %v", err)
	}
	if _, err := s.Refresh(context.Background(), sess.AccessToken); !isSessionError(err) {
		t.Errorf("an access token used to refresh: %v", err)
	}

	clk.Advance(v1.AccessTokenLifetime + time.Second)
	if _, err := s.Authenticate(sess.AccessToken); !isSessionError(err) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired access token: %v", err)
	}
	fresh, err := s.Refresh(context.Background(), sess.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(fresh.AccessToken); err != nil {
		t.Errorf("refreshed access token: %v", err)
	}
	if !fresh.RefreshExpiresAt.Equal(sess.RefreshExpiresAt) {
		t.Errorf("a refresh moved the session's end from %s to %s", sess.RefreshExpiresAt, fresh.RefreshExpiresAt)
	}
	clk.Advance(v1.RefreshTokenLifetime)
	if _, err := s.Refresh(context.Background(), fresh.RefreshToken); !isSessionError(err) {
		t.Errorf("refresh after the session's end: %v", err)
	}
}

func isSessionError(err error) bool {
	var se *SessionError
	return errors.As(err, &se)
}

// Each forgery is refused: a changed payload, another key's signature,
// "alg": "none", and an HMAC signed with the public key.
func TestForgedTokensAreRefused(t *testing.T) {
	s, clk := newTestService(t)
	addUser(t, s, "dave", v1.UserRoleUser)
	addUser(t, s, "root", v1.UserRoleAdmin)
	sess := login(t, s, "dave")
	parts := strings.Split(sess.AccessToken, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"sub":"dave"`, `"sub":"root"`, 1))) + "." + parts[2]
	if _, err := s.Authenticate(tampered); !isSessionError(err) {
		t.Errorf("tampered payload: %v", err)
	}

	foreignKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := clk.Now()
	forge := func(method jwt.SigningMethod, key any, kid string) string {
		tok := jwt.NewWithClaims(method, claims{
			RegisteredClaims: jwt.RegisteredClaims{Issuer: tokenIssuer, Subject: "dave", Audience: jwt.ClaimStrings{tokenAudience},
				IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute))},
			Session: sessionOf(t, s, sess.AccessToken), Use: useAccess,
		})
		tok.Header["kid"] = kid
		signed, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	kid := s.keys.current.id
	if _, err := s.Authenticate(forge(jwt.SigningMethodES256, foreignKey, kid)); !isSessionError(err) {
		t.Errorf("signed by a foreign key with the right key ID: %v", err)
	}
	if _, err := s.Authenticate(forge(jwt.SigningMethodES256, foreignKey, "other")); !isSessionError(err) {
		t.Errorf("signed by a foreign key: %v", err)
	}
	if _, err := s.Authenticate(forge(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, kid)); !isSessionError(err) {
		t.Errorf("alg none: %v", err)
	}
	pub, _ := s.keys.verifier(kid)
	pubBytes := elliptic.MarshalCompressed(elliptic.P256(), pub.X, pub.Y)
	if _, err := s.Authenticate(forge(jwt.SigningMethodHS256, pubBytes, kid)); !isSessionError(err) {
		t.Errorf("HMAC keyed with the public key: %v", err)
	}
	if _, err := s.Authenticate("not.a.token"); !isSessionError(err) {
		t.Errorf("garbage: %v", err)
	}
	if _, err := s.Authenticate(sess.AccessToken); err != nil {
		t.Errorf("the real token after the forgeries: %v", err)
	}
}

func sessionOf(t *testing.T, s *Service, token string) string {
	t.Helper()
	c, err := s.keys.parse(token, useAccess, s.now())
	if err != nil {
		t.Fatal(err)
	}
	return c.Session
}

// Disabling, a new password, deleting the user, ending their sessions and
// logging out each end the session at once, for both of its tokens.
func TestSessionsEnd(t *testing.T) {
	s, _ := newTestService(t)
	ctx := context.Background()
	disabled, password := true, "a new long password"
	for _, tc := range []struct {
		name string
		end  func(v1.Session) error
	}{
		{"disabled", func(v1.Session) error {
			_, err := s.UpdateUser(ctx, "erin", v1.UserUpdate{Disabled: &disabled})
			return err
		}},
		{"new password", func(v1.Session) error {
			_, err := s.UpdateUser(ctx, "erin", v1.UserUpdate{Password: &password})
			return err
		}},
		{"sessions ended", func(v1.Session) error { _, err := s.EndSessions("erin"); return err }},
		{"logout", func(sess v1.Session) error { return s.Logout(sess.RefreshToken) }},
		{"deleted", func(v1.Session) error { return s.DeleteUser("erin") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.DeleteUser("erin")
			addUser(t, s, "erin", v1.UserRoleUser)
			sess := login(t, s, "erin")
			other := login(t, s, "erin")
			if err := tc.end(sess); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Authenticate(sess.AccessToken); !isSessionError(err) {
				t.Errorf("access token: %v", err)
			}
			if _, err := s.Refresh(context.Background(), sess.RefreshToken); !isSessionError(err) {
				t.Errorf("refresh token: %v", err)
			}
			_, err := s.Authenticate(other.AccessToken)
			if tc.name == "logout" && err != nil {
				t.Errorf("a logout ended the user's other session: %v", err)
			}
			if tc.name != "logout" && !isSessionError(err) {
				t.Errorf("the user's other session: %v", err)
			}
		})
	}
	s.DeleteUser("erin")
	addUser(t, s, "erin", v1.UserRoleUser)
	s.UpdateUser(ctx, "erin", v1.UserUpdate{Disabled: &disabled})
	if _, err := s.Login(ctx, "erin", goodPassword, client); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("a disabled user's login: %v", err)
	}
}

// Keys rotate daily; a token from the old key holds until it expires, and
// the key is dropped once no token it signed can be valid.
func TestSigningKeysRotate(t *testing.T) {
	s, clk := newTestService(t)
	addUser(t, s, "fay", v1.UserRoleUser)
	login(t, s, "fay")
	clk.Advance(keyRotation - v1.RefreshTokenLifetime/2)
	old := login(t, s, "fay")
	oldKey := s.keys.current.id
	clk.Advance(v1.RefreshTokenLifetime / 2)
	fresh := login(t, s, "fay")
	if s.keys.current.id == oldKey {
		t.Fatal("no new key after a day")
	}
	if _, err := s.Refresh(context.Background(), old.RefreshToken); err != nil {
		t.Errorf("a refresh token of the retired key: %v", err)
	}
	if _, err := s.Refresh(context.Background(), fresh.RefreshToken); err != nil {
		t.Errorf("a refresh token of the new key: %v", err)
	}
	clk.Advance(keyRotation)
	login(t, s, "fay")
	if _, err := s.keys.verifier(oldKey); err == nil {
		t.Errorf("the key retired a day ago is still kept")
	}
}

func TestSetupToken(t *testing.T) {
	s, _ := newTestService(t)
	ctx := context.Background()
	path, err := s.PrepareSetup()
	if err != nil || path == "" {
		t.Fatalf("setup on an empty store: %q, %v", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("setup token file: %v, %v", fi, err)
	}
	data, _ := os.ReadFile(path)
	token := strings.TrimSpace(string(data))
	if again, _ := s.PrepareSetup(); again != path {
		t.Errorf("a second start made another token file: %q", again)
	}
	if _, err := s.Setup(ctx, v1.SetupRequest{Token: token + "x", Name: "admin", Password: goodPassword}); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("wrong setup token: %v", err)
	}
	u, err := s.Setup(ctx, v1.SetupRequest{Token: token, Name: "admin", Password: goodPassword})
	if err != nil || u.Role != v1.UserRoleAdmin {
		t.Fatalf("setup: %+v, %v", u, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the used token's file stays: %v", err)
	}
	if _, err := s.Setup(ctx, v1.SetupRequest{Token: token, Name: "admin2", Password: goodPassword}); !errors.Is(err, ErrSetupDone) {
		t.Errorf("the setup token used twice: %v", err)
	}
	if path, err := s.PrepareSetup(); path != "" || err != nil {
		t.Errorf("with an admin, a new setup token: %q, %v", path, err)
	}
	login(t, s, "admin")

	// A token left when an admin is made another way is dropped at the
	// next start, and refused before.
	s2, _ := newTestService(t)
	path, _ = s2.PrepareSetup()
	data, _ = os.ReadFile(path)
	addUser(t, s2, "other-admin", v1.UserRoleAdmin)
	if _, err := s2.Setup(ctx, v1.SetupRequest{Token: strings.TrimSpace(string(data)), Name: "late", Password: goodPassword}); !errors.Is(err, ErrSetupDone) {
		t.Errorf("setup with an admin present: %v", err)
	}
	if p, err := s2.PrepareSetup(); p != "" || err != nil {
		t.Errorf("restart with an admin present: %q, %v", p, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the setup token file stays with an admin present: %v", err)
	}
}

// The setup endpoint is open to anyone: a refused setup is answered
// without a password hash, so it cannot keep the hash slots busy that
// logins wait for. With every slot taken, refusals still come at once.
func TestRefusedSetupHashesNothing(t *testing.T) {
	s, _ := newTestService(t)
	path, err := s.PrepareSetup()
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	busy := func(taken bool) {
		for range cap(s.hasher.slots) {
			if taken {
				s.hasher.slots <- struct{}{}
			} else {
				<-s.hasher.slots
			}
		}
	}
	busy(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Setup(ctx, v1.SetupRequest{Token: "not-the-token", Name: "mallory", Password: goodPassword}); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("a wrong setup token, with the hash slots busy: %v", err)
	}
	busy(false)
	addUser(t, s, "root", v1.UserRoleAdmin)
	busy(true)
	req := v1.SetupRequest{Token: strings.TrimSpace(string(token)), Name: "mallory", Password: goodPassword}
	if _, err := s.Setup(ctx, req); !errors.Is(err, ErrSetupDone) {
		t.Errorf("the setup token after the first admin, with the hash slots busy: %v", err)
	}
}

// A controller started again verifies the tokens it signed before: the
// keys come from the store.
func TestTokensOutliveARestart(t *testing.T) {
	s, _ := newTestService(t)
	addUser(t, s, "gus", v1.UserRoleUser)
	sess := login(t, s, "gus")
	again := New(s.cfg)
	if u, err := again.Authenticate(sess.AccessToken); err != nil || u.Name != "gus" {
		t.Errorf("after a restart: %v, %v", u, err)
	}
	if _, err := again.Refresh(context.Background(), sess.RefreshToken); err != nil {
		t.Errorf("refresh after a restart: %v", err)
	}
}
