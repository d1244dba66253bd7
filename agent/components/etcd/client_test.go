package etcd

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// gatewayStub answers every request with status and body, and keeps the
// last request body.
func gatewayStub(t *testing.T, status int, body string) (*Client, string, *string) {
	t.Helper()
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = r.Method + " " + r.URL.Path + " " + string(b)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	cl := newClient(nil, nil, 5*time.Second)
	t.Cleanup(cl.Close)
	return cl, srv.URL, &got
}

const goodMembers = `{"header":{"cluster_id":"1","member_id":"2"},"members":[
 {"ID":"2","name":"m1","peerURLs":["https://198.18.0.11:2380"],"clientURLs":["https://198.18.0.11:2379"]},
 {"ID":"18446744073709551615","peerURLs":["https://198.18.0.12:2380"],"isLearner":true}]}`

func TestMemberListDecodes(t *testing.T) {
	cl, url, req := gatewayStub(t, 200, goodMembers)
	members, err := cl.MemberList(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	if *req != "POST /v3/cluster/member/list {}" {
		t.Errorf("request %q", *req)
	}
	if len(members) != 2 || members[0].ID != 2 || members[0].Name != "m1" || members[0].IsLearner ||
		members[1].ID != 1<<64-1 || members[1].Name != "" || !members[1].IsLearner || len(members[1].ClientURLs) != 0 {
		t.Errorf("members %+v", members)
	}
}

// What comes back from a member is outside input: each of these answers
// is refused, with a reason.
func TestMemberListRefusesBadAnswers(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"not JSON", `<html>`, "not the JSON expected"},
		{"ID as a number", `{"members":[{"ID":2,"peerURLs":["https://198.18.0.11:2380"]}]}`, "not a decimal string"},
		{"ID not decimal", `{"members":[{"ID":"0x2","peerURLs":["https://198.18.0.11:2380"]}]}`, "not a 64-bit unsigned decimal"},
		{"ID too large", `{"members":[{"ID":"18446744073709551616","peerURLs":["https://198.18.0.11:2380"]}]}`, "not a 64-bit unsigned decimal"},
		{"ID zero", `{"members":[{"ID":"0","peerURLs":["https://198.18.0.11:2380"]}]}`, "without an ID"},
		{"no members", `{"members":[]}`, "empty"},
		{"duplicate", `{"members":[{"ID":"2","peerURLs":["https://198.18.0.11:2380"]},{"ID":"2","peerURLs":["https://198.18.0.12:2380"]}]}`, "twice"},
		{"no peer URLs", `{"members":[{"ID":"2"}]}`, "no peer URLs"},
		{"peer URL scheme", `{"members":[{"ID":"2","peerURLs":["unix:///run/etcd.sock"]}]}`, "not an http(s) URL"},
		{"peer URL without port", `{"members":[{"ID":"2","peerURLs":["https://198.18.0.11"]}]}`, "not scheme://host:port"},
		{"peer URL with a path", `{"members":[{"ID":"2","peerURLs":["https://198.18.0.11:2380/x"]}]}`, "not scheme://host:port"},
		{"peer URL with a separator", `{"members":[{"ID":"2","peerURLs":["https://a,b:2380"]}]}`, "separator"},
		{"client URL", `{"members":[{"ID":"2","peerURLs":["https://198.18.0.11:2380"],"clientURLs":["ftp://x:1"]}]}`, "clientURLs"},
		{"name with a control character", `{"members":[{"ID":"2","name":"m1\n","peerURLs":["https://198.18.0.11:2380"]}]}`, "printable"},
		{"too large", `{"members":[` + strings.Repeat(" ", maxResponseBytes) + `]}`, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, url, _ := gatewayStub(t, 200, tc.body)
			_, err := cl.MemberList(context.Background(), url)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestMemberListTooMany(t *testing.T) {
	var ms []string
	for i := 1; i <= maxMembers+1; i++ {
		ms = append(ms, `{"ID":"`+itoa(i)+`","peerURLs":["https://198.18.0.11:2380"]}`)
	}
	cl, url, _ := gatewayStub(t, 200, `{"members":[`+strings.Join(ms, ",")+`]}`)
	if _, err := cl.MemberList(context.Background(), url); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("error %v", err)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// etcd's refusals come as the gateway's error body; the component tells
// some of them apart.
func TestGatewayErrors(t *testing.T) {
	ctx := context.Background()
	cl, url, req := gatewayStub(t, 412, `{"error":"etcdserver: can only promote a learner member which is in sync with leader","message":"etcdserver: can only promote a learner member which is in sync with leader","code":9}`)
	err := cl.MemberPromote(ctx, url, 1<<63)
	if !isLearnerNotReady(err) || isNotLearner(err) {
		t.Errorf("promote refusal %v not recognised as a lagging learner", err)
	}
	if *req != `POST /v3/cluster/member/promote {"ID":"9223372036854775808"}` {
		t.Errorf("request %q: IDs go out as decimal strings", *req)
	}

	cl, url, _ = gatewayStub(t, 412, `{"error":"etcdserver: can only promote a learner member","message":"etcdserver: can only promote a learner member","code":9}`)
	if err := cl.MemberPromote(ctx, url, 7); !isNotLearner(err) || isLearnerNotReady(err) {
		t.Errorf("promote of a voter: %v", err)
	}

	cl, url, _ = gatewayStub(t, 404, `{"error":"etcdserver: member not found","message":"etcdserver: member not found","code":5}`)
	if err := cl.MemberRemove(ctx, url, 7); !isMemberNotFound(err) {
		t.Errorf("remove of an unknown member: %v", err)
	}

	cl, url, _ = gatewayStub(t, 503, `{"error":"etcdserver: unhealthy cluster","message":"etcdserver: unhealthy cluster","code":14}`)
	if _, _, err := cl.MemberAddLearner(ctx, url, "https://198.18.0.13:2380"); !isUnhealthyCluster(err) {
		t.Errorf("add refused for an unhealthy cluster: %v", err)
	}

	// What etcd 3.6 answered a master that joined while another was a learner.
	cl, url, _ = gatewayStub(t, 412, `{"error":"etcdserver: too many learner members in cluster","message":"etcdserver: too many learner members in cluster","code":9}`)
	if _, _, err := cl.MemberAddLearner(ctx, url, "https://198.18.0.13:2380"); !isTooManyLearners(err) || isUnhealthyCluster(err) || isLearnerNotReady(err) {
		t.Errorf("add refused while another learner waits: %v", err)
	}

	cl, url, _ = gatewayStub(t, 503, `{"error":"etcdserver: rpc not supported for learner","message":"etcdserver: rpc not supported for learner","code":14}`)
	if _, err := cl.MemberList(ctx, url); err == nil || isUnhealthyCluster(err) || !strings.Contains(err.Error(), "learner") {
		t.Errorf("member list from a learner: %v", err)
	}

	cl, url, _ = gatewayStub(t, 502, "Bad Gateway")
	if _, err := cl.MemberList(ctx, url); err == nil || !strings.Contains(err.Error(), "HTTP 502") {
		t.Errorf("plain-text error: %v", err)
	}
}

func TestMemberAddDecodes(t *testing.T) {
	ctx := context.Background()
	cl, url, req := gatewayStub(t, 200, `{"member":{"ID":"5","peerURLs":["https://198.18.0.13:2380"],"isLearner":true},"members":[
		{"ID":"5","peerURLs":["https://198.18.0.13:2380"],"isLearner":true},{"ID":"2","name":"m1","peerURLs":["https://198.18.0.11:2380"]}]}`)
	added, members, err := cl.MemberAddLearner(ctx, url, "https://198.18.0.13:2380")
	if err != nil || added.ID != 5 || !added.IsLearner || len(members) != 2 {
		t.Fatalf("%+v %+v %v", added, members, err)
	}
	if *req != `POST /v3/cluster/member/add {"peerURLs":["https://198.18.0.13:2380"],"isLearner":true}` {
		t.Errorf("request %q", *req)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"no member", `{"members":[{"ID":"2","peerURLs":["https://198.18.0.11:2380"]}]}`, "no member"},
		{"member not listed", `{"member":{"ID":"5","peerURLs":["https://198.18.0.13:2380"]},"members":[{"ID":"2","peerURLs":["https://198.18.0.11:2380"]}]}`, "not in the member list"},
		{"bad member", `{"member":{"ID":"5","peerURLs":[]},"members":[{"ID":"5","peerURLs":["https://198.18.0.11:2380"]}]}`, "no peer URLs"},
	} {
		cl, url, _ := gatewayStub(t, 200, tc.body)
		if _, _, err := cl.MemberAddLearner(ctx, url, "https://198.18.0.13:2380"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestStatusDecodes(t *testing.T) {
	ctx := context.Background()
	// As etcd 3.4.23 writes it: snake_case header, camelCase fields,
	// defaults (isLearner false, leader 0) left out.
	cl, url, _ := gatewayStub(t, 200, `{"header":{"cluster_id":"14371804100607780834","member_id":"1990862588335962672","revision":"1","raft_term":"2"},"version":"3.4.23","dbSize":"20480","leader":"15384607655018781953","raftIndex":"15","raftTerm":"2","raftAppliedIndex":"15","dbSizeInUse":"16384","isLearner":true}`)
	st, err := cl.Status(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	want := MemberStatus{MemberID: 1990862588335962672, ClusterID: 14371804100607780834, Leader: 15384607655018781953,
		IsLearner: true, Version: "3.4.23", RaftIndex: 15, DBSize: 20480}
	if st != want {
		t.Errorf("status %+v, want %+v", st, want)
	}
	cl, url, _ = gatewayStub(t, 200, `{"header":{"cluster_id":"1","member_id":"2"},"version":"3.4.23"}`)
	if st, err := cl.Status(ctx, url); err != nil || st.Leader != 0 || st.IsLearner {
		t.Errorf("status without a leader: %+v, %v", st, err)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"no header", `{"version":"3.4.23"}`, "no header"},
		{"no member ID", `{"header":{"cluster_id":"1"}}`, "no member_id"},
		{"no cluster ID", `{"header":{"member_id":"1"}}`, "no cluster_id"},
		{"bad leader", `{"header":{"cluster_id":"1","member_id":"2"},"leader":"-1"}`, "unsigned"},
		{"odd version", `{"header":{"cluster_id":"1","member_id":"2"},"version":"3.4\u0000"}`, "version"},
	} {
		cl, url, _ := gatewayStub(t, 200, tc.body)
		if _, err := cl.Status(ctx, url); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestHealthDecodes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		healthy bool
		err     string
	}{
		{"healthy", 200, `{"health":"true"}`, true, ""},
		{"unhealthy", 503, `{"health":"false","reason":"RAFT NO LEADER"}`, false, ""},
		{"true but 503", 503, `{"health":"true"}`, false, ""},
		{"neither", 200, `{"health":"maybe"}`, false, "neither true nor false"},
		{"missing", 200, `{}`, false, "without a health field"},
		{"not JSON", 200, `ok`, false, "not JSON"},
	} {
		cl, url, req := gatewayStub(t, tc.status, tc.body)
		healthy, err := cl.Health(context.Background(), url)
		if healthy != tc.healthy || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, %v; want %v, %q", tc.name, healthy, err, tc.healthy, tc.err)
		}
		if *req != "GET /health " {
			t.Errorf("%s: request %q", tc.name, *req)
		}
	}
}

// A member that accepts the connection but never answers (one founding a
// cluster without a quorum yet) costs one request timeout, not a hang.
func TestRequestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	cl := newClient(nil, nil, 200*time.Millisecond)
	defer cl.Close()
	start := time.Now()
	if _, err := cl.Status(context.Background(), srv.URL); err == nil {
		t.Fatal("no error from a member that never answers")
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v", d)
	}
}

// A membership change that etcd refuses for now (unhealthy cluster, or a
// learner already waiting) is tried again until it succeeds or
// PromoteWait runs out; any other refusal ends it at once.
func TestReconfigRetriesOnlyWhatPasses(t *testing.T) {
	refusal := func(code int, msg string) error { return &APIError{HTTPStatus: 412, Code: code, Message: msg} }
	tooMany := refusal(codeFailedPrecondition, "etcdserver: too many learner members in cluster")
	unhealthy := refusal(codeUnavailable, "etcdserver: unhealthy cluster")
	badURL := refusal(3, "etcdserver: bad peer URL")
	c := New(Config{PromoteWait: 30 * time.Second})
	for _, tc := range []struct {
		name    string
		answers []error
		calls   int
		want    error
	}{
		{"another learner, then promoted", []error{tooMany, tooMany, nil}, 3, nil},
		{"unhealthy, then healthy", []error{unhealthy, nil}, 2, nil},
		{"bad request", []error{badURL, nil}, 1, badURL},
	} {
		calls := 0
		err := c.retryReconfig(context.Background(), func() error {
			calls++
			return tc.answers[calls-1]
		})
		if err != tc.want || calls != tc.calls {
			t.Errorf("%s: %d calls, %v; want %d, %v", tc.name, calls, err, tc.calls, tc.want)
		}
	}
	short := New(Config{PromoteWait: 1500 * time.Millisecond})
	calls := 0
	err := short.retryReconfig(context.Background(), func() error { calls++; return tooMany })
	if !isTooManyLearners(err) || calls < 2 || calls > 3 {
		t.Errorf("past PromoteWait: %d calls, %v", calls, err)
	}
}
