package upgradewatch

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/harmonykaas/harmony/agent/components/etcd"
	"github.com/harmonykaas/harmony/integration/lab/body"
)

// Etcd speaks etcd's JSON gateway on the masters' client port with the
// client credential the agent keeps on a master, read once: it stays
// valid across the masters' replacement, as the etcd CA does.
type Etcd struct {
	client *http.Client
}

// NewEtcd reads the credential from a master's body.
func NewEtcd(master *body.Body) (*Etcd, error) {
	caPath, certPath, keyPath := etcd.ClientCredentials()
	cert, err := tls.LoadX509KeyPair(master.Path(certPath), master.Path(keyPath))
	if err != nil {
		return nil, fmt.Errorf("etcd client credential: %w", err)
	}
	caPEM, err := os.ReadFile(master.Path(caPath))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no etcd CA certificate")
	}
	return &Etcd{client: &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}}, nil
}

func (e *Etcd) call(ip, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := e.client.Post("https://"+ip+":2379"+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer r.Body.Close()
	data, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("%s on %s: %s: %s", path, ip, r.Status, data)
	}
	return json.Unmarshal(data, resp)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// Put writes a key through the member at ip.
func (e *Etcd) Put(ip, key, value string) error {
	var resp struct{}
	return e.call(ip, "/v3/kv/put", map[string]any{"key": b64(key), "value": b64(value)}, &resp)
}

// Count is how many keys under prefix the cluster holds, read
// linearizably through the member at ip.
func (e *Etcd) Count(ip, prefix string) (int, error) {
	if prefix == "" {
		return 0, errors.New("count: empty prefix")
	}
	end := prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1)
	var resp struct {
		Count string `json:"count"`
	}
	if err := e.call(ip, "/v3/kv/range", map[string]any{"key": b64(prefix), "range_end": b64(end), "count_only": true}, &resp); err != nil {
		return 0, err
	}
	if resp.Count == "" {
		return 0, nil // the gateway leaves a zero out
	}
	return strconv.Atoi(resp.Count)
}

// Status is what the member at ip reports of itself: the leader it
// follows, and the raft log's last index and the last index it applied.
type Status struct {
	Leader       string
	RaftIndex    uint64
	AppliedIndex uint64
}

// Status reads the member at ip's status.
func (e *Etcd) Status(ip string) (Status, error) {
	// The gateway writes 64-bit integers as strings and leaves zeros out.
	var resp struct {
		Leader           string `json:"leader"`
		RaftIndex        string `json:"raftIndex"`
		RaftAppliedIndex string `json:"raftAppliedIndex"`
	}
	if err := e.call(ip, "/v3/maintenance/status", map[string]any{}, &resp); err != nil {
		return Status{}, err
	}
	st := Status{Leader: resp.Leader}
	for _, f := range []struct {
		name, text string
		to         *uint64
	}{{"raftIndex", resp.RaftIndex, &st.RaftIndex}, {"raftAppliedIndex", resp.RaftAppliedIndex, &st.AppliedIndex}} {
		if f.text == "" {
			continue
		}
		v, err := strconv.ParseUint(f.text, 10, 64)
		if err != nil {
			return Status{}, fmt.Errorf("status of %s: %s %q: %w", ip, f.name, f.text, err)
		}
		*f.to = v
	}
	return st, nil
}

// Leader is the leader the member at ip follows.
func (e *Etcd) Leader(ip string) (string, error) {
	st, err := e.Status(ip)
	return st.Leader, err
}
