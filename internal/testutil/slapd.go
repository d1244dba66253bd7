package testutil

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-ldap/ldap/v3"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Slapd is a real OpenLDAP server (Debian's slapd) on loopback, serving an
// Active-Directory-shaped directory: users keyed by sAMAccountName, the
// disabled flag in userAccountControl, and nested groupOfNames groups.
// OpenLDAP has no AD schema with matching rules, so a small test schema
// gives those two attributes their AD meaning; the bitwise filter that
// leaves disabled accounts out is AD's own, which OpenLDAP also speaks.
//
// The directory:
//
//	alice   in harmony-admins                      (admin)
//	bob     in harmony-users and team-a;            (user)
//	        team-a in k8s-viewers and loop-a, loop-a and loop-b in each other
//	carol   in harmony-users, disabled (userAccountControl 514)
//	dave    in no group
//	eve     in harmony-users and a group named "system:masters"
//
// Every user's password is SlapdPassword(name).
type Slapd struct {
	// URL is ldaps://; StartTLSURL the ldap:// port for StartTLS.
	URL, StartTLSURL string
	CAPEM            string
	dir              string
	cmd              *exec.Cmd
	done             chan error
	log              *LogBuffer
	// seen is how much of log Operations has returned.
	seen int
}

// Names in the test directory.
const (
	SlapdBase            = "dc=harmony,dc=test"
	SlapdAdminDN         = "cn=admin," + SlapdBase
	SlapdServiceDN       = "cn=harmony-svc,ou=services," + SlapdBase
	SlapdServicePassword = "service-account-password"
	slapdAdminPassword   = "directory-admin-password"
)

// SlapdUserDN is a test user's entry.
func SlapdUserDN(name string) string { return "cn=" + name + ",ou=people," + SlapdBase }

// SlapdGroupDN is a test group's entry.
func SlapdGroupDN(name string) string { return "cn=" + ldap.EscapeDN(name) + ",ou=groups," + SlapdBase }

// SlapdPassword is a test user's password.
func SlapdPassword(name string) string { return name + "-directory-password" }

const slapdSchema = `attributetype ( 1.3.6.1.4.1.99999.1.1 NAME 'sAMAccountName'
	EQUALITY caseIgnoreMatch SUBSTR caseIgnoreSubstringsMatch
	SYNTAX 1.3.6.1.4.1.1466.115.121.1.15 SINGLE-VALUE )
attributetype ( 1.3.6.1.4.1.99999.1.2 NAME 'userAccountControl'
	EQUALITY integerMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.27 SINGLE-VALUE )
objectclass ( 1.3.6.1.4.1.99999.2.1 NAME 'harmonyTestADUser' AUXILIARY
	MAY ( sAMAccountName $ userAccountControl ) )
`

const slapdConf = `include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include {{dir}}/ad.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {{dir}}/slapd.pid
argsfile {{dir}}/slapd.args
TLSCACertificateFile {{dir}}/ca.pem
TLSCertificateFile {{dir}}/server.pem
TLSCertificateKeyFile {{dir}}/server.key
database mdb
maxsize 67108864
suffix "` + SlapdBase + `"
rootdn "` + SlapdAdminDN + `"
rootpw ` + slapdAdminPassword + `
directory {{dir}}/data
index objectClass,member eq
access to attrs=userPassword by anonymous auth by * none
access to * by users read by * none
`

// StartSlapd runs slapd with its files in dir (which it owns) until Close.
func StartSlapd(dir string) (*Slapd, error) {
	if _, err := os.Stat("/usr/sbin/slapd"); err != nil {
		return nil, fmt.Errorf("slapd is not installed (Debian package slapd; scripts/install-deps.sh installs it): %w", err)
	}
	caPEM, certPEM, keyPEM, err := slapdCertificates()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"ad.schema": []byte(slapdSchema), "ca.pem": caPEM, "server.pem": certPEM, "server.key": keyPEM,
		"slapd.conf": []byte(strings.ReplaceAll(slapdConf, "{{dir}}", dir)),
		"data.ldif":  []byte(slapdData()),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	conf := filepath.Join(dir, "slapd.conf")
	if out, err := exec.Command("/usr/sbin/slapadd", "-f", conf, "-l", filepath.Join(dir, "data.ldif")).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("slapadd: %v: %s", err, out)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	s := &Slapd{
		URL:         fmt.Sprintf("ldaps://127.0.0.1:%d", ports[0]),
		StartTLSURL: fmt.Sprintf("ldap://127.0.0.1:%d", ports[1]),
		CAPEM:       string(caPEM), dir: dir, done: make(chan error, 1),
	}
	log := new(LogBuffer)
	s.log = log
	// -d keeps slapd in the foreground, so that Close can stop it; at the
	// stats level it logs each connection and operation (Operations).
	s.cmd = exec.Command("/usr/sbin/slapd", "-f", conf, "-h", s.URL+"/ "+s.StartTLSURL+"/", "-d", "stats")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start slapd: %w", err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := s.Admin()
		if err == nil {
			conn.Close()
			return s, nil
		}
		select {
		case werr := <-s.done:
			return nil, fmt.Errorf("slapd exited: %v: %s", werr, log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("slapd did not answer within 30s: %v", err)
		}
	}
}

// slapdOp matches the stats lines of an operation's request and result.
var slapdOp = regexp.MustCompile(`conn=(\d+) op=(\d+) (BIND|SRCH|UNBIND|EXT|MOD|ADD|DEL|CMP|RESULT|SEARCH RESULT)\b(?:.* err=(\d+))?`)

// Operations waits until every connection slapd accepted has closed and
// returns the operations it served, in order, each as its request's verb
// and its LDAP result code ("BIND 49"), without the DNs and filters: what
// a client's conversation with the directory looked like, for tests that
// compare two of them. Each call returns what came after the previous one.
func (s *Slapd) Operations(ctx context.Context) ([]string, error) {
	var text string
	for {
		text = s.log.String()[s.seen:]
		if strings.Count(text, " ACCEPT from ") == strings.Count(text, " closed") {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("slapd's connections did not all close: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.seen += len(text)
	// slapd's threads log a request and its result in either order.
	type op struct {
		conn, n      int
		verb, result string
	}
	byKey := map[[2]int]*op{}
	var ops []*op
	for _, line := range strings.Split(text, "\n") {
		m := slapdOp.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		conn, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		o := byKey[[2]int{conn, n}]
		if o == nil {
			o = &op{conn: conn, n: n}
			byKey[[2]int{conn, n}] = o
			ops = append(ops, o)
		}
		if m[3] == "RESULT" || m[3] == "SEARCH RESULT" {
			o.result = m[4]
		} else if o.verb == "" {
			o.verb = m[3]
		}
	}
	slices.SortFunc(ops, func(a, b *op) int { return cmp.Or(cmp.Compare(a.conn, b.conn), cmp.Compare(a.n, b.n)) })
	out := make([]string, 0, len(ops))
	for _, o := range ops {
		out = append(out, strings.TrimSpace(o.verb+" "+o.result))
	}
	return out, nil
}

// Close stops slapd.
func (s *Slapd) Close() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		<-s.done
		s.done <- nil // a second Close returns at once
	}
}

// Dial is an LDAPS connection to slapd, trusting its CA, not bound.
func (s *Slapd) Dial() (*ldap.Conn, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(s.CAPEM))
	return ldap.DialURL(s.URL, ldap.DialWithTLSConfig(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}))
}

// Admin is a connection bound as the directory's root, to change it.
func (s *Slapd) Admin() (*ldap.Conn, error) {
	conn, err := s.Dial()
	if err != nil {
		return nil, err
	}
	if err := conn.Bind(SlapdAdminDN, slapdAdminPassword); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// Modify applies one change to an entry as the directory's root.
func (s *Slapd) Modify(ctx context.Context, dn string, change func(*ldap.ModifyRequest)) error {
	conn, err := s.Admin()
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req := ldap.NewModifyRequest(dn, nil)
	change(req)
	if err := conn.Modify(req); err != nil {
		return fmt.Errorf("modify %s: %w", dn, err)
	}
	return nil
}

// Settings are Harmony's LDAP settings for this directory, as an Active
// Directory admin would write them: harmony-admins are admins, only
// members of harmony-users (or nested groups in it) sign in as users.
func (s *Slapd) Settings(url string) v1.LDAP {
	return v1.LDAP{
		APIVersion: v1.APIVersion, Kind: "LDAP", URL: url, StartTLS: strings.HasPrefix(url, "ldap://"), CA: s.CAPEM,
		BindDN: SlapdServiceDN, BindPassword: SlapdServicePassword,
		UserSearch: v1.LDAPUserSearch{BaseDN: "ou=people," + SlapdBase,
			Filter: "(&(objectClass=harmonyTestADUser)(sAMAccountName={username})(!(userAccountControl:1.2.840.113556.1.4.803:=2)))"},
		GroupSearch: v1.LDAPGroupSearch{BaseDN: "ou=groups," + SlapdBase, Filter: "(member={dn})", NameAttribute: "cn"},
		GroupRoles: []v1.LDAPGroupRole{
			{Group: "harmony-admins", Role: v1.UserRoleAdmin},
			{Group: "harmony-users", Role: v1.UserRoleUser},
		},
	}
}

func slapdData() string {
	var b strings.Builder
	entry := func(lines ...string) { b.WriteString(strings.Join(lines, "\n") + "\n\n") }
	entry("dn: "+SlapdBase, "objectClass: dcObject", "objectClass: organization", "o: Harmony test", "dc: harmony")
	for _, ou := range []string{"people", "groups", "services"} {
		entry("dn: ou="+ou+","+SlapdBase, "objectClass: organizationalUnit", "ou: "+ou)
	}
	entry("dn: "+SlapdServiceDN, "objectClass: person", "cn: harmony-svc", "sn: service", "userPassword: "+SlapdServicePassword)
	for _, u := range []struct {
		name    string
		control int
	}{{"alice", 512}, {"bob", 512}, {"carol", 514}, {"dave", 512}, {"eve", 512}} {
		entry("dn: "+SlapdUserDN(u.name), "objectClass: inetOrgPerson", "objectClass: harmonyTestADUser",
			"cn: "+u.name, "sn: "+u.name, "sAMAccountName: "+strings.ToUpper(u.name[:1])+u.name[1:],
			fmt.Sprintf("userAccountControl: %d", u.control), "userPassword: "+SlapdPassword(u.name))
	}
	for _, g := range []struct {
		name    string
		members []string
	}{
		{"harmony-admins", []string{SlapdUserDN("alice")}},
		{"harmony-users", []string{SlapdUserDN("bob"), SlapdUserDN("carol"), SlapdUserDN("eve")}},
		{"team-a", []string{SlapdUserDN("bob")}},
		{"k8s-viewers", []string{SlapdGroupDN("team-a")}},
		{"loop-a", []string{SlapdGroupDN("team-a"), SlapdGroupDN("loop-b")}},
		{"loop-b", []string{SlapdGroupDN("loop-a")}},
		{"system:masters", []string{SlapdUserDN("eve")}},
	} {
		lines := []string{"dn: " + SlapdGroupDN(g.name), "objectClass: groupOfNames", "cn: " + g.name}
		for _, m := range g.members {
			lines = append(lines, "member: "+m)
		}
		entry(lines...)
	}
	return b.String()
}

// slapdCertificates makes a CA and slapd's certificate for 127.0.0.1,
// good for a day: longer than any test or benchmark that runs slapd.
func slapdCertificates() (caPEM, certPEM, keyPEM []byte, err error) {
	ca, err := MakeCA(24 * time.Hour)
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM, keyPEM, err = ca.IssueCert("127.0.0.1", x509.ExtKeyUsageServerAuth)
	return ca.PEM, certPEM, keyPEM, err
}

// freePorts finds n free TCP ports on loopback.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
