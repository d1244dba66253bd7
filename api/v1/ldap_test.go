package v1_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func validLDAP() v1.LDAP {
	return v1.LDAP{
		APIVersion: v1.APIVersion, Kind: "LDAP", URL: "ldaps://ad.example.com:636",
		BindDN: "CN=harmony,DC=example,DC=com", BindPassword: "secret",
		UserSearch:  v1.LDAPUserSearch{BaseDN: "OU=People,DC=example,DC=com", Filter: "(sAMAccountName={username})"},
		GroupSearch: v1.LDAPGroupSearch{BaseDN: "OU=Groups,DC=example,DC=com"},
		GroupRoles:  []v1.LDAPGroupRole{{Group: "admins", Role: v1.UserRoleAdmin}},
	}
}

func TestDecodeLDAP(t *testing.T) {
	decode := func(l v1.LDAP) (*v1.LDAP, error) {
		data, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		return v1.DecodeLDAP(bytes.NewReader(data))
	}
	got, err := decode(validLDAP())
	if err != nil {
		t.Fatal(err)
	}
	if got.GroupSearch.Filter != "(member={dn})" || got.GroupSearch.NameAttribute != "cn" || got.OperationTimeout() != v1.DefaultLDAPTimeout {
		t.Errorf("defaults: %+v, timeout %s", got.GroupSearch, got.OperationTimeout())
	}
	for _, c := range []struct {
		name  string
		mut   func(*v1.LDAP)
		field string
	}{
		{"wrong kind", func(l *v1.LDAP) { l.Kind = "Provider" }, "kind"},
		{"no url", func(l *v1.LDAP) { l.URL = "" }, "url"},
		{"plain ldap without StartTLS", func(l *v1.LDAP) { l.URL = "ldap://ad.example.com" }, "url"},
		{"StartTLS on ldaps", func(l *v1.LDAP) { l.StartTLS = true }, "startTLS"},
		{"http", func(l *v1.LDAP) { l.URL = "https://ad.example.com" }, "url"},
		{"credentials in the url", func(l *v1.LDAP) { l.URL = "ldaps://u:p@ad.example.com" }, "url"},
		{"a path", func(l *v1.LDAP) { l.URL = "ldaps://ad.example.com/dc=x" }, "url"},
		{"not a CA bundle", func(l *v1.LDAP) { l.CA = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" }, "ca"},
		{"a key in the CA bundle", func(l *v1.LDAP) { l.CA = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n" }, "ca"},
		{"no bind DN", func(l *v1.LDAP) { l.BindDN = "" }, "bindDN"},
		{"a bind DN that is a name", func(l *v1.LDAP) { l.BindDN = "harmony" }, "bindDN"},
		{"a bind DN on two lines", func(l *v1.LDAP) { l.BindDN = "cn=a,\ndc=b" }, "bindDN"},
		{"no user base", func(l *v1.LDAP) { l.UserSearch.BaseDN = "" }, "userSearch.baseDN"},
		{"a user filter without {username}", func(l *v1.LDAP) { l.UserSearch.Filter = "(uid=alice)" }, "userSearch.filter"},
		{"a user filter without parentheses", func(l *v1.LDAP) { l.UserSearch.Filter = "uid={username}" }, "userSearch.filter"},
		{"an unbalanced user filter", func(l *v1.LDAP) { l.UserSearch.Filter = "(&(uid={username})" }, "userSearch.filter"},
		{"a group filter without {dn}", func(l *v1.LDAP) { l.GroupSearch.Filter = "(member=x)" }, "groupSearch.filter"},
		{"a bad name attribute", func(l *v1.LDAP) { l.GroupSearch.NameAttribute = "cn;binary" }, "groupSearch.nameAttribute"},
		{"a group mapped twice", func(l *v1.LDAP) {
			l.GroupRoles = append(l.GroupRoles, v1.LDAPGroupRole{Group: "admins", Role: v1.UserRoleUser})
		}, "groupRoles[1].group"},
		{"a group role that is not one", func(l *v1.LDAP) { l.GroupRoles[0].Role = "root" }, "groupRoles[0].role"},
		{"an empty group", func(l *v1.LDAP) { l.GroupRoles[0].Group = "" }, "groupRoles[0].group"},
		{"a timeout over a minute", func(l *v1.LDAP) { l.TimeoutSeconds = 61 }, "timeoutSeconds"},
		{"a huge password", func(l *v1.LDAP) { l.BindPassword = strings.Repeat("x", 1025) }, "bindPassword"},
	} {
		l := validLDAP()
		c.mut(&l)
		_, err := decode(l)
		var fe *v1.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want a field error on %s", c.name, err, c.field)
		}
	}
	// A typo is refused by name.
	if _, err := v1.DecodeLDAP(strings.NewReader(`{"apiVersion":"harmony.dev/v1","kind":"LDAP","bindPasword":"x"}`)); err == nil || !strings.Contains(err.Error(), "bindPasword") {
		t.Errorf("unknown field: %v", err)
	}
	if l := validLDAP().Redacted(); l.BindPassword != "" {
		t.Error("Redacted keeps the bind password")
	}
}
