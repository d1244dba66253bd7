package etcd

import (
	"encoding/json"
	"net/url"
	"testing"
)

// FuzzDecodeMembers feeds the gateway's member list, which is outside
// input, to the decoder: it must never panic, and whatever it accepts
// must hold only nonzero, unique IDs and http(s) URLs with a host.
func FuzzDecodeMembers(f *testing.F) {
	f.Add([]byte(`{"members":[{"ID":"11","name":"m1","peerURLs":["https://198.18.0.11:2380"],"clientURLs":["https://198.18.0.11:2379"]}]}`))
	f.Add([]byte(`{"members":[{"ID":"1","peerURLs":["https://198.18.0.11:2380"],"isLearner":true},{"ID":"1","peerURLs":["http://x:1"]}]}`))
	f.Add([]byte(`{"members":[{"ID":1,"name":"m1"}]}`))
	f.Add([]byte(`{"members":[{"ID":"18446744073709551616","peerURLs":["https://a:1"]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var body struct {
			Members []wireMember `json:"members"`
		}
		if json.Unmarshal(data, &body) != nil {
			return
		}
		members, err := decodeMembers(body.Members)
		if err != nil {
			return
		}
		seen := map[uint64]bool{}
		for _, m := range members {
			if m.ID == 0 || seen[m.ID] {
				t.Fatalf("accepted member ID %x twice or zero", m.ID)
			}
			seen[m.ID] = true
			if len(m.PeerURLs) == 0 {
				t.Fatalf("accepted member %x without peer URLs", m.ID)
			}
			for _, raw := range append(append([]string{}, m.PeerURLs...), m.ClientURLs...) {
				u, err := url.Parse(raw)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					t.Fatalf("accepted URL %q", raw)
				}
			}
		}
	})
}
