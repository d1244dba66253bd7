package testutil

import (
	"crypto/rand"
	"crypto/sha256"
	"testing"
)

// EtcdSnapshot is a file as `etcdctl snapshot save` writes one: pages of
// a database (random bytes: a copy's checks read only its size and
// SHA-256) and the SHA-256 of them.
func EtcdSnapshot(t testing.TB, pages int) []byte {
	t.Helper()
	db := make([]byte, pages*4096)
	if _, err := rand.Read(db); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}
