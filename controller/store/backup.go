package store

import (
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"
)

var keyCAPin = []byte("ca-pin")

// CAPin is the pin of the CA this store belongs to; "" in a store made
// before stores were bound to their CA.
func (s *Store) CAPin() (string, error) {
	var pin string
	err := s.db.View(func(tx *bolt.Tx) error {
		pin = string(tx.Bucket(bucketMeta).Get(keyCAPin))
		return nil
	})
	return pin, err
}

// BindCA records the CA pin in a store that has none yet. A store bound to
// another CA is an error: its nodes' certificates and tokens are another
// CA's, and its cluster secrets belong to another controller.
func (s *Store) BindCA(pin string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		switch have := string(meta.Get(keyCAPin)); have {
		case pin:
			return nil
		case "":
			return meta.Put(keyCAPin, []byte(pin))
		default:
			return fmt.Errorf("store %s belongs to the CA with pin %s, but the data directory's CA has pin %s", s.path, have, pin)
		}
	})
}

// Summary counts what a store holds, for a backup's manifest and a
// restore's report.
type Summary struct {
	CAPin     string `json:"caPin"`
	TxID      int    `json:"txid"`
	Bytes     int64  `json:"bytes"`
	Nodes     int    `json:"nodes"`
	Clusters  int    `json:"clusters"`
	Providers int    `json:"providers"`
	Certs     int    `json:"certificates"`
}

// Snapshot runs fn inside one read transaction, with what the store holds
// (Bytes is the size of the copy) and a function that writes a consistent
// copy of the whole file while writers go on.
func (s *Store) Snapshot(fn func(sum Summary, copyTo func(io.Writer) error) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		sum := summarize(tx)
		sum.Bytes = tx.Size()
		return fn(sum, func(w io.Writer) error {
			if _, err := tx.WriteTo(w); err != nil {
				return fmt.Errorf("copy %s: %w", s.path, err)
			}
			return nil
		})
	})
}

// Summary counts what the store holds now.
func (s *Store) Summary() (Summary, error) {
	var sum Summary
	err := s.db.View(func(tx *bolt.Tx) error {
		sum = summarize(tx)
		sum.Bytes = tx.Size()
		return nil
	})
	return sum, err
}

func summarize(tx *bolt.Tx) Summary {
	count := func(name []byte) int {
		if b := tx.Bucket(name); b != nil {
			return b.Stats().KeyN
		}
		return 0
	}
	return Summary{
		CAPin:     string(tx.Bucket(bucketMeta).Get(keyCAPin)),
		TxID:      tx.ID(),
		Nodes:     count(bucketNodes),
		Clusters:  count([]byte(Clusters)),
		Providers: count([]byte(Providers)),
		Certs:     count(bucketCerts),
	}
}
