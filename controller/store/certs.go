package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Cert is an admin or scraper certificate as the store keeps it: every one
// the controller issues is recorded, and a request is accepted only with a
// recorded certificate that is not revoked. (Node certificates are checked
// against their node record instead.)
type Cert struct {
	Serial    string    `json:"serial"`
	Kind      string    `json:"kind"` // v1.OrgAdmins or v1.OrgScrapers
	Name      string    `json:"name"`
	IssuedAt  time.Time `json:"issuedAt"`
	NotAfter  time.Time `json:"notAfter"`
	IssuedBy  string    `json:"issuedBy,omitempty"`
	RevokedAt time.Time `json:"revokedAt,omitzero"`
	RevokedBy string    `json:"revokedBy,omitempty"`
}

// Revoked reports whether the certificate has been revoked.
func (c Cert) Revoked() bool { return !c.RevokedAt.IsZero() }

// ErrLastAdmin refuses to revoke the only admin certificate still valid:
// nobody could then use the API (the way back is on the controller's
// machine: harmony-controller admin-config).
var ErrLastAdmin = errors.New("the last valid admin certificate")

// RecordCert stores a newly issued admin or scraper certificate, and drops
// records that expired more than a week ago, so the bucket does not grow
// with every renewal.
func (s *Store) RecordCert(c Cert, now time.Time) error {
	return s.batch.do(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCerts)
		if b.Get([]byte(c.Serial)) != nil {
			return fmt.Errorf("certificate %s: %w", c.Serial, ErrExists)
		}
		var expired [][]byte
		err := b.ForEach(func(k, v []byte) error {
			var old Cert
			if err := json.Unmarshal(v, &old); err != nil {
				return fmt.Errorf("decode certificate %q: %w", k, err)
			}
			if now.Sub(old.NotAfter) > 7*24*time.Hour {
				expired = append(expired, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range expired {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return putJSON(b, c.Serial, c)
	})
}

// Cert returns one certificate record by serial (lower-case hex).
func (s *Store) Cert(serial string) (Cert, error) {
	var c Cert
	err := s.db.View(func(tx *bolt.Tx) error { return getJSON(tx.Bucket(bucketCerts), serial, &c) })
	return c, err
}

// Certs lists every recorded certificate, ordered by serial.
func (s *Store) Certs() ([]Cert, error) {
	var out []Cert
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCerts).ForEach(func(k, v []byte) error {
			var c Cert
			if err := json.Unmarshal(v, &c); err != nil {
				return fmt.Errorf("decode certificate %q: %w", k, err)
			}
			out = append(out, c)
			return nil
		})
	})
	return out, err
}

// RevokeCert marks a certificate revoked. Revoking a revoked one is a
// no-op that returns the record as it is; revoking the last admin
// certificate valid at now is ErrLastAdmin.
func (s *Store) RevokeCert(serial, by string, now time.Time) (Cert, error) {
	var c Cert
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCerts)
		if err := getJSON(b, serial, &c); err != nil {
			return fmt.Errorf("certificate %s: %w", serial, ErrNotFound)
		}
		if c.Revoked() {
			return nil
		}
		if c.Kind == v1.OrgAdmins && now.Before(c.NotAfter) {
			others := 0
			err := b.ForEach(func(k, v []byte) error {
				var o Cert
				if err := json.Unmarshal(v, &o); err != nil {
					return fmt.Errorf("decode certificate %q: %w", k, err)
				}
				if o.Serial != serial && o.Kind == v1.OrgAdmins && !o.Revoked() && now.Before(o.NotAfter) {
					others++
				}
				return nil
			})
			if err != nil {
				return err
			}
			if others == 0 {
				return fmt.Errorf("certificate %s is %w", serial, ErrLastAdmin)
			}
		}
		c.RevokedAt, c.RevokedBy = now.UTC(), by
		return putJSON(b, serial, c)
	})
	return c, err
}
