package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-ldap/ldap/v3"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/access"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// accessConcurrency is how many logins or credential requests run at once;
// the KDF reference runs as many hashes at once as the controller allows.
const (
	accessConcurrency = 4
	kdfConcurrency    = 2
)

// benchAccess measures, on cluster name: local logins (argon2id) next to
// the KDF's own rate, LDAP logins against a real slapd next to a raw
// connect-search-bind against it, and user credentials next to the raw
// signing rate of a P-256 key, the cluster CA's kind, and next to the
// store's synced commits, one of which each request makes.
func (b *bench) benchAccess(ctx context.Context, dir, adminConf, cluster string, rounds int) error {
	slapd, err := testutil.StartSlapd(dir + "/slapd")
	if err != nil {
		return err
	}
	defer slapd.Close()
	if _, err := b.c.ApplyLDAP(ctx, ptr(slapd.Settings(slapd.URL))); err != nil {
		return fmt.Errorf("apply ldap: %w", err)
	}
	const password = "a bench user's password"
	if _, err := b.c.CreateUser(ctx, v1.UserCreate{Name: "local", Role: v1.UserRoleUser, Password: password}); err != nil {
		return err
	}
	if _, err := b.c.Grant(ctx, cluster, v1.GrantRequest{User: "local", Role: v1.GrantView}); err != nil {
		return err
	}
	cfg, err := clientconfig.Load(adminConf)
	if err != nil {
		return err
	}
	anon, err := client.New(&clientconfig.Config{Server: cfg.Server, CertificateAuthority: cfg.CertificateAuthority}, "")
	if err != nil {
		return err
	}

	fmt.Printf("\naccess: %d requests per row, %d at once; reference measured in the same run\n", rounds, accessConcurrency)
	fmt.Printf("%-34s %10s   %-40s %10s %8s\n", "what", "per second", "reference", "per second", "ratio")

	local, err := rate(rounds, func() error { _, err := anon.Login(ctx, "local", password); return err })
	if err != nil {
		return fmt.Errorf("local logins: %w", err)
	}
	kdf, err := rateAt(kdfConcurrency, rounds, func() error { _, err := access.HashPassword(ctx, password); return err })
	if err != nil {
		return err
	}
	row("local logins (argon2id 64 MiB)", local, "argon2id hashes, 2 at once, in process", kdf)

	ldapLogins, err := rate(rounds, func() error { _, err := anon.Login(ctx, "bob", testutil.SlapdPassword("bob")); return err })
	if err != nil {
		return fmt.Errorf("ldap logins: %w", err)
	}
	raw, err := rate(rounds, func() error { return rawDirectoryLogin(slapd, "bob") })
	if err != nil {
		return err
	}
	row("LDAP logins (nested groups)", ldapLogins, "connect, bind, search, user bind (go-ldap)", raw)

	sess, err := anon.Login(ctx, "local", password)
	if err != nil {
		return err
	}
	user, err := client.New(&clientconfig.Config{Server: cfg.Server, CertificateAuthority: cfg.CertificateAuthority, Session: clientconfig.FromAPI(*sess)}, "")
	if err != nil {
		return err
	}
	csr, err := benchCSR()
	if err != nil {
		return err
	}
	creds, err := rate(rounds*10, func() error { _, err := user.Credential(ctx, cluster, csr); return err })
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	digest := sha256.Sum256([]byte("tbs"))
	signs, err := rate(rounds*10, func() error { _, err := ecdsa.SignASN1(rand.Reader, key, digest[:]); return err })
	if err != nil {
		return err
	}
	row("user credentials (5-min certs)", creds, "ECDSA P-256 signatures, in process", signs)
	// Each request also commits its audit entry, a bbolt batch synced to
	// disk; on a slow disk that, not the signature, bounds the rate.
	commits, err := storeCommits(dir, rounds*10)
	if err != nil {
		return err
	}
	row("", creds, "store batch commits (fsync), 4 at once", commits)
	return nil
}

// row prints a measured rate next to its reference's, and their ratio.
func row(what string, got float64, ref string, refRate float64) {
	fmt.Printf("%-34s %10.1f   %-40s %10.1f %8.3f\n", what, got, ref, refRate, got/refRate)
}

// storeCommits is the rate of the product's store's batched commits, one
// small record each, accessConcurrency at once, on the controller's file
// system.
func storeCommits(dir string, n int) (float64, error) {
	ref, err := store.Open(filepath.Join(dir, "reference-store.db"), store.Options{Create: true})
	if err != nil {
		return 0, err
	}
	defer ref.Close()
	var seq atomic.Int64
	return rate(n, func() error {
		key := fmt.Sprintf("reference/%08d", seq.Add(1))
		return ref.Batch(func(tx *store.Tx) error {
			return tx.Put(store.Events, key, v1.Event{Type: "Normal", Reason: "Reference"})
		})
	})
}

// rate runs n calls of fn, accessConcurrency at once, and returns calls
// per second; the first error ends it.
func rate(n int, fn func() error) (float64, error) { return rateAt(accessConcurrency, n, fn) }

func rateAt(concurrency, n int, fn func() error) (float64, error) {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := fn(); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), firstErr
}

// rawDirectoryLogin is the floor of an LDAP sign-in: what any client must
// do, without the group search.
func rawDirectoryLogin(d *testutil.Slapd, user string) error {
	conn, err := d.Dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.Bind(testutil.SlapdServiceDN, testutil.SlapdServicePassword); err != nil {
		return err
	}
	if _, err := conn.Search(ldap.NewSearchRequest(testutil.SlapdUserDN(user), ldap.ScopeBaseObject, ldap.NeverDerefAliases, 1, 0, false,
		"(objectClass=*)", []string{"1.1"}, nil)); err != nil {
		return err
	}
	return conn.Bind(testutil.SlapdUserDN(user), testutil.SlapdPassword(user))
}

func benchCSR() (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return "", err
	}
	return v1.EncodeCSR(der), nil
}

func ptr[T any](v T) *T { return &v }
