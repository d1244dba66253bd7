package controller

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// browser is an HTTP client with a cookie jar, as the console's page has.
type browser struct {
	t      *testing.T
	client *http.Client
	base   string
}

func (tc *testController) browser() *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		tc.t.Fatal(err)
	}
	c := tc.anonClient()
	c.Jar = jar
	return &browser{t: tc.t, client: c, base: tc.url}
}

// do sends a JSON request with extra headers ("Name: value").
func (b *browser) do(method, path string, body any, headers ...string) (response, *http.Response) {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			b.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	return readResponse(b.t, req, resp), resp
}

func (b *browser) cookie(name string) string {
	u, _ := url.Parse(b.base)
	for _, c := range b.client.Jar.Cookies(u) {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

func (b *browser) csrf() string { return v1.HeaderCSRF + ": " + b.cookie(v1.CookieCSRF) }

// A browser may hold the admin's client certificate too: another site's
// page that makes it send a change is refused, whether the browser tells
// by Origin or by Sec-Fetch-Site, however the body is typed. The CLI,
// which sends neither header, is not affected.
func TestCrossSiteChangesAreRefusedForCertificateCallers(t *testing.T) {
	tc := startController(t, t.TempDir())
	// What <form enctype="text/plain" method="POST"> on another site can
	// send: its one "=" hidden inside a JSON string.
	body := `{"name":"mallory","role":"admin","password":"aaaaaaaaaaaaaaaa=bbbb"}`
	for _, h := range [][2]string{{"Origin", "https://evil.example"}, {"Sec-Fetch-Site", "cross-site"}} {
		req, _ := http.NewRequest("POST", tc.url+v1.PathUsers, strings.NewReader(body))
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set(h[0], h[1])
		resp, err := tc.admin.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readResponse(t, req, resp).wantStatus(t, http.StatusForbidden, v1.CodeCSRF)
	}
	if r := doJSON(t, tc.admin, "GET", tc.url+v1.PathUsers+"/mallory", nil); r.status != http.StatusNotFound {
		t.Fatalf("a refused cross-site change made the user: %d %s", r.status, r.body)
	}
	if r := doJSON(t, tc.admin, "POST", tc.url+v1.PathUsers, v1.UserCreate{Name: "mallory", Role: v1.UserRoleUser, Password: "aaaaaaaaaaaaaaaa=bbbb"}); r.status != http.StatusCreated {
		t.Errorf("the CLI's own change: %d %s", r.status, r.body)
	}
}

// A browser's session is in cookies its script cannot read, and every
// change it makes needs the CSRF token: one check per attack.
func TestBrowserSessionCookiesAndCSRF(t *testing.T) {
	tc := startController(t, t.TempDir())
	const password = "a console user's password"
	if r := doJSON(t, tc.admin, "POST", tc.url+v1.PathUsers, v1.UserCreate{Name: "ada", Role: v1.UserRoleAdmin, Password: password}); r.status != http.StatusCreated {
		t.Fatalf("create user: %d %s", r.status, r.body)
	}
	login := v1.LoginRequest{Username: "ada", Password: password, Browser: true}

	t.Run("a login form on another site cannot sign the browser in", func(t *testing.T) {
		b := tc.browser()
		r, _ := b.do("POST", v1.PathLogin, login)
		r.wantStatus(t, http.StatusForbidden, v1.CodeCSRF)
		r, _ = b.do("POST", v1.PathLogin, login, v1.HeaderCSRF+": 1", "Origin: https://evil.example")
		r.wantStatus(t, http.StatusForbidden, v1.CodeCSRF)
		if b.cookie(v1.CookieAccess) != "" {
			t.Error("a refused login set a session cookie")
		}
	})

	b := tc.browser()
	r, resp := b.do("POST", v1.PathLogin, login, v1.HeaderCSRF+": 1")
	if r.status != http.StatusOK {
		t.Fatalf("browser login: %d %s", r.status, r.body)
	}
	var sess v1.Session
	r.decode(t, &sess)
	if sess.AccessToken != "" || sess.RefreshToken != "" || sess.User.Name != "ada" || sess.AccessExpiresAt.IsZero() {
		t.Errorf("a browser's login answered %+v: want the user and expiry, no token", sess)
	}
	t.Run("the cookies are HttpOnly but for the CSRF token, Secure, SameSite=Strict, __Host-", func(t *testing.T) {
		set := map[string]*http.Cookie{}
		for _, c := range resp.Cookies() {
			set[c.Name] = c
		}
		for _, name := range []string{v1.CookieAccess, v1.CookieRefresh, v1.CookieCSRF} {
			c := set[name]
			switch {
			case c == nil || c.Value == "":
				t.Errorf("no %s cookie", name)
			case !c.Secure || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "":
				t.Errorf("%s: %s", name, c)
			case c.HttpOnly != (name != v1.CookieCSRF):
				t.Errorf("%s: HttpOnly %v", name, c.HttpOnly)
			}
		}
	})

	if r, _ := b.do("GET", v1.PathWhoAmI, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"ada"`) {
		t.Fatalf("whoami with the session cookie: %d %s", r.status, r.body)
	}
	create := func(name string) v1.UserCreate {
		return v1.UserCreate{Name: name, Role: v1.UserRoleUser, Password: password}
	}
	t.Run("a change without the CSRF token is refused", func(t *testing.T) {
		r, _ := b.do("POST", v1.PathUsers, create("mallory1"))
		r.wantStatus(t, http.StatusForbidden, v1.CodeCSRF)
	})
	t.Run("a change with a wrong CSRF token is refused", func(t *testing.T) {
		r, _ := b.do("POST", v1.PathUsers, create("mallory2"), v1.HeaderCSRF+": "+b.cookie(v1.CookieCSRF)+"x")
		r.wantStatus(t, http.StatusForbidden, v1.CodeCSRF)
	})
	t.Run("a change from another site's page is refused", func(t *testing.T) {
		r, _ := b.do("POST", v1.PathUsers, create("mallory3"), b.csrf(), "Origin: https://evil.example")
		r.wantStatus(t, http.StatusForbidden, v1.CodeCSRF)
	})
	if r := doJSON(t, tc.admin, "GET", tc.url+v1.PathUsers+"/mallory1", nil); r.status != http.StatusNotFound {
		t.Errorf("a refused change was made: %d", r.status)
	}
	if r, _ := b.do("POST", v1.PathUsers, create("bob"), b.csrf(), "Origin: "+tc.url); r.status != http.StatusCreated {
		t.Errorf("a change with the CSRF token: %d %s", r.status, r.body)
	}

	t.Run("refresh renews the access cookie and keeps the CSRF token", func(t *testing.T) {
		before, csrf := b.cookie(v1.CookieAccess), b.cookie(v1.CookieCSRF)
		tc.clock.Advance(2 * time.Minute)
		r, _ := b.do("POST", v1.PathRefresh, v1.RefreshRequest{Browser: true})
		r.wantStatus(t, http.StatusForbidden, v1.CodeCSRF)
		r, _ = b.do("POST", v1.PathRefresh, v1.RefreshRequest{Browser: true}, b.csrf())
		if r.status != http.StatusOK || strings.Contains(string(r.body), before) {
			t.Fatalf("browser refresh: %d %s", r.status, r.body)
		}
		if after := b.cookie(v1.CookieAccess); after == "" || after == before || b.cookie(v1.CookieCSRF) != csrf {
			t.Errorf("after a refresh the access cookie is %q (was %q), the CSRF token %q (was %q)", after, before, b.cookie(v1.CookieCSRF), csrf)
		}
	})

	t.Run("logout ends the session and clears the cookies", func(t *testing.T) {
		access := b.cookie(v1.CookieAccess)
		r, _ := b.do("POST", v1.PathLogout, v1.RefreshRequest{Browser: true}, b.csrf())
		if r.status != http.StatusNoContent {
			t.Fatalf("logout: %d %s", r.status, r.body)
		}
		if b.cookie(v1.CookieAccess) != "" || b.cookie(v1.CookieRefresh) != "" {
			t.Error("the cookies outlived the logout")
		}
		// A copy of the old cookie opens nothing.
		stale := tc.browser()
		u, _ := url.Parse(tc.url)
		stale.client.Jar.SetCookies(u, []*http.Cookie{{Name: v1.CookieAccess, Value: access, Path: "/", Secure: true}})
		r, _ = stale.do("GET", v1.PathWhoAmI, nil)
		r.wantStatus(t, http.StatusUnauthorized, v1.CodeSessionInvalid)
	})

	t.Run("a browser refresh with a token in the body is refused", func(t *testing.T) {
		r, _ := tc.browser().do("POST", v1.PathRefresh, v1.RefreshRequest{Browser: true, RefreshToken: "x"}, v1.HeaderCSRF+": 1")
		if r.status != http.StatusBadRequest || r.err.Field != "refreshToken" {
			t.Errorf("got %d %+v", r.status, r.err)
		}
	})
}
