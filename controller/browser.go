package controller

import (
	"crypto/rand"
	"crypto/subtle"
	"net/http"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// The web console's session lives in cookies (v1.CookieAccess …), so
// that its tokens never reach JavaScript; this file sets, reads and
// clears them, and holds such requests to the CSRF rules.

// setBrowserSession puts sess into the cookies and keeps csrf (a new one
// at login, the same one at a refresh).
func setBrowserSession(w http.ResponseWriter, sess v1.Session, csrf string) {
	http.SetCookie(w, sessionCookie(v1.CookieAccess, sess.AccessToken, sess.AccessExpiresAt, true))
	http.SetCookie(w, sessionCookie(v1.CookieRefresh, sess.RefreshToken, sess.RefreshExpiresAt, true))
	// The console's script reads this one to send it back.
	http.SetCookie(w, sessionCookie(v1.CookieCSRF, csrf, sess.RefreshExpiresAt, false))
}

// clearBrowserSession tells the browser to drop the cookies.
func clearBrowserSession(w http.ResponseWriter) {
	for _, name := range []string{v1.CookieAccess, v1.CookieRefresh, v1.CookieCSRF} {
		c := sessionCookie(name, "", time.Time{}, name != v1.CookieCSRF)
		c.MaxAge = -1
		http.SetCookie(w, c)
	}
}

func sessionCookie(name, value string, expires time.Time, httpOnly bool) *http.Cookie {
	// __Host- cookies must be Secure, have Path=/ and no Domain.
	return &http.Cookie{Name: name, Value: value, Path: "/", Expires: expires, Secure: true, HttpOnly: httpOnly, SameSite: http.SameSiteStrictMode}
}

// withoutTokens is what a browser's login or refresh answers: who and
// until when, the tokens being in the cookies.
func withoutTokens(sess v1.Session) v1.Session {
	sess.AccessToken, sess.RefreshToken = "", ""
	return sess
}

func newCSRFToken() string { return rand.Text() }

func cookieValue(r *http.Request, name string) string {
	c, err := r.Cookie(name)
	if err != nil {
		return ""
	}
	return c.Value
}

// checkBrowserRequest holds a request that a session cookie authenticates
// (or that starts or ends such a session) to the CSRF rules: if it
// changes anything, HeaderCSRF must equal CookieCSRF. A page of another
// site can make the browser send the cookies, but cannot read CookieCSRF
// nor set a header without a CORS preflight, which the API never
// answers; and authorize has refused its cross-origin changes already.
func checkBrowserRequest(r *http.Request) *apiError {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	want, got := cookieValue(r, v1.CookieCSRF), r.Header.Get(v1.HeaderCSRF)
	if want == "" || subtle.ConstantTimeCompare([]byte(want), []byte(got)) != 1 {
		return refuse(http.StatusForbidden, v1.CodeCSRF, "a browser session's change needs the %s header equal to the %s cookie", v1.HeaderCSRF, v1.CookieCSRF)
	}
	return nil
}
