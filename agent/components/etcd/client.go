package etcd

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// The agent talks to etcd through the JSON gateway that etcd 3.4 serves on
// its client port (/v3/...), over the same mutual TLS as any client. Not
// through go.etcd.io/etcd/client/v3: that would pull gRPC and etcd's own
// dependency tree into the agent for five calls.

// maxResponseBytes bounds what the agent reads from one answer; a member
// list of a few members is a few kilobytes.
const maxResponseBytes = 1 << 20

// maxMembers bounds a member list. etcd clusters have a handful of members;
// anything past this is not an answer the agent should act on.
const maxMembers = 64

// Member is one member of the cluster, as etcd reports it.
type Member struct {
	ID   uint64
	Name string // empty until the member has started and published it
	// PeerURLs are where the other members reach it.
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// MemberStatus is what a member says of itself (/v3/maintenance/status).
type MemberStatus struct {
	MemberID  uint64
	ClusterID uint64
	// Leader is the leader's member ID, 0 while there is none.
	Leader    uint64
	IsLearner bool
	Version   string
	RaftIndex uint64
	// DBSize is the size of the member's database file, in bytes.
	DBSize uint64
}

// APIError is an error etcd answered with: the gateway's JSON body
// ({"error", "message", "code"}, code a gRPC status code) and the HTTP
// status.
type APIError struct {
	HTTPStatus int
	Code       int
	Message    string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("etcd answered HTTP %d (code %d): %s", e.HTTPStatus, e.Code, e.Message)
}

// gRPC status codes the component tells apart.
const (
	codeNotFound           = 5
	codeFailedPrecondition = 9
	codeUnavailable        = 14
)

// isLearnerNotReady reports etcd's refusal to promote a learner that has
// not caught up with the leader yet; promotion is retried.
func isLearnerNotReady(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == codeFailedPrecondition && strings.Contains(ae.Message, "in sync with leader")
}

// isUnhealthyCluster reports etcd's refusal of a membership change that
// its strict reconfiguration check finds unsafe for now.
func isUnhealthyCluster(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == codeUnavailable && strings.Contains(ae.Message, "unhealthy cluster")
}

// isTooManyLearners reports etcd's refusal to add a learner while
// another one (a master joining at the same time) has not been promoted:
// etcd allows one learner at a time by default.
func isTooManyLearners(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == codeFailedPrecondition && strings.Contains(ae.Message, "too many learner members")
}

// isMemberNotFound reports a member ID the cluster does not know.
func isMemberNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == codeNotFound
}

// Client calls the etcd gateway of any member. The zero value is not
// usable; see newClient.
type Client struct {
	http *http.Client
	// timeout bounds one request.
	timeout time.Duration
}

// newClient returns a client that presents cert to the members and trusts
// only the servers tls.Config.RootCAs names. dial, when not nil, makes
// the connections (tests dial inside a network namespace).
func newClient(tlsConfig *tls.Config, dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) *Client {
	tr := &http.Transport{
		// Members are reached directly, never through a proxy from the
		// agent's environment.
		Proxy:               nil,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: timeout,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
	}
	if dial != nil {
		tr.DialContext = dial
	} else {
		tr.DialContext = (&net.Dialer{Timeout: timeout}).DialContext
	}
	return &Client{http: &http.Client{Transport: tr}, timeout: timeout}
}

// Close drops the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// MemberList lists the cluster's members, as the member at endpoint knows
// them.
func (c *Client) MemberList(ctx context.Context, endpoint string) ([]Member, error) {
	var resp struct {
		Members []wireMember `json:"members"`
	}
	if err := c.post(ctx, endpoint, "/v3/cluster/member/list", struct{}{}, &resp); err != nil {
		return nil, err
	}
	return decodeMembers(resp.Members)
}

// MemberAddLearner adds a learner with peerURL and returns it and the
// members after the change.
func (c *Client) MemberAddLearner(ctx context.Context, endpoint, peerURL string) (Member, []Member, error) {
	req := struct {
		PeerURLs  []string `json:"peerURLs"`
		IsLearner bool     `json:"isLearner"`
	}{[]string{peerURL}, true}
	var resp struct {
		Member  *wireMember  `json:"member"`
		Members []wireMember `json:"members"`
	}
	if err := c.post(ctx, endpoint, "/v3/cluster/member/add", req, &resp); err != nil {
		return Member{}, nil, err
	}
	if resp.Member == nil {
		return Member{}, nil, errors.New("member add: the answer has no member")
	}
	added, err := resp.Member.decode()
	if err != nil {
		return Member{}, nil, fmt.Errorf("member add: added member: %w", err)
	}
	members, err := decodeMembers(resp.Members)
	if err != nil {
		return Member{}, nil, fmt.Errorf("member add: %w", err)
	}
	found := false
	for _, m := range members {
		found = found || m.ID == added.ID
	}
	if !found {
		return Member{}, nil, fmt.Errorf("member add: the new member %x is not in the member list that came with it", added.ID)
	}
	return added, members, nil
}

// MemberRemove removes a member.
func (c *Client) MemberRemove(ctx context.Context, endpoint string, id uint64) error {
	return c.post(ctx, endpoint, "/v3/cluster/member/remove", idRequest{ID: wireID(id)}, &struct{}{})
}

// MemberPromote makes a learner a voting member. etcd refuses while the
// learner lags the leader (isLearnerNotReady).
func (c *Client) MemberPromote(ctx context.Context, endpoint string, id uint64) error {
	return c.post(ctx, endpoint, "/v3/cluster/member/promote", idRequest{ID: wireID(id)}, &struct{}{})
}

// MoveLeader hands leadership to member target. Only the leader can: ask
// the leader's own endpoint. etcd answers once the target leads, or with
// an error when it did not take over within an election timeout.
func (c *Client) MoveLeader(ctx context.Context, endpoint string, target uint64) error {
	req := struct {
		TargetID wireID `json:"targetID"`
	}{wireID(target)}
	return c.post(ctx, endpoint, "/v3/maintenance/transfer-leadership", req, &struct{}{})
}

// Status asks the member at endpoint about itself. Learners answer it too.
func (c *Client) Status(ctx context.Context, endpoint string) (MemberStatus, error) {
	var resp struct {
		Header *struct {
			ClusterID wireID `json:"cluster_id"`
			MemberID  wireID `json:"member_id"`
		} `json:"header"`
		Version   string `json:"version"`
		Leader    wireID `json:"leader"`
		RaftIndex wireID `json:"raftIndex"`
		IsLearner bool   `json:"isLearner"`
		DBSize    wireID `json:"dbSize"`
	}
	if err := c.post(ctx, endpoint, "/v3/maintenance/status", struct{}{}, &resp); err != nil {
		return MemberStatus{}, err
	}
	switch {
	case resp.Header == nil:
		return MemberStatus{}, errors.New("status: the answer has no header")
	case resp.Header.MemberID == 0:
		return MemberStatus{}, errors.New("status: the answer has no member_id")
	case resp.Header.ClusterID == 0:
		return MemberStatus{}, errors.New("status: the answer has no cluster_id")
	case len(resp.Version) > 64 || !printable(resp.Version):
		return MemberStatus{}, errors.New("status: the version is not a short printable string")
	}
	return MemberStatus{
		MemberID: uint64(resp.Header.MemberID), ClusterID: uint64(resp.Header.ClusterID),
		Leader: uint64(resp.Leader), IsLearner: resp.IsLearner, Version: resp.Version, RaftIndex: uint64(resp.RaftIndex),
		DBSize: uint64(resp.DBSize),
	}, nil
}

// Health asks /health: true when the member has a leader, no alarm, and
// serves a read through the cluster. etcd answers 503 with a body when
// unhealthy, so the body decides, not the status.
func (c *Client) Health(ctx context.Context, endpoint string) (bool, error) {
	body, status, err := c.do(ctx, http.MethodGet, endpoint, "/health", nil)
	if err != nil {
		return false, err
	}
	var resp struct {
		Health *string `json:"health"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return false, fmt.Errorf("/health: HTTP %d with a body that is not JSON: %w", status, err)
	}
	switch {
	case resp.Health == nil:
		return false, fmt.Errorf("/health: HTTP %d without a health field", status)
	case *resp.Health == "true" && status == http.StatusOK:
		return true, nil
	case *resp.Health == "false" || *resp.Health == "true":
		return false, nil
	}
	return false, fmt.Errorf("/health: health is %q, neither true nor false", truncate(*resp.Health))
}

func (c *Client) post(ctx context.Context, endpoint, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	raw, status, err := c.do(ctx, http.MethodPost, endpoint, path, body)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return apiError(path, status, raw)
	}
	if err := json.Unmarshal(raw, resp); err != nil {
		return fmt.Errorf("%s: the answer is not the JSON expected: %w", path, err)
	}
	return nil
}

// do makes one request and returns the body and HTTP status.
func (c *Client) do(ctx context.Context, method, endpoint, path string, body []byte) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, endpoint+path, rd)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s%s: %w", method, endpoint, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s%s: read answer: %w", method, endpoint, path, err)
	}
	if len(raw) > maxResponseBytes {
		return nil, 0, fmt.Errorf("%s %s%s: answer larger than %d bytes", method, endpoint, path, maxResponseBytes)
	}
	return raw, resp.StatusCode, nil
}

// apiError decodes the gateway's error body, or says what came instead.
func apiError(path string, status int, raw []byte) error {
	var body struct {
		Error   string `json:"error"`
		Message string `json:"message"`
		Code    int    `json:"code"`
	}
	if err := json.Unmarshal(raw, &body); err != nil || (body.Message == "" && body.Error == "") {
		return fmt.Errorf("%s: HTTP %d: %q", path, status, truncate(string(raw)))
	}
	msg := body.Message
	if msg == "" {
		msg = body.Error
	}
	return &APIError{HTTPStatus: status, Code: body.Code, Message: truncate(msg)}
}

// wireID is a uint64 as the gateway writes it: a decimal JSON string.
type wireID uint64

func (id wireID) MarshalJSON() ([]byte, error) {
	return json.Marshal(strconv.FormatUint(uint64(id), 10))
}

func (id *wireID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("ID %s is not a decimal string", truncate(string(b)))
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("ID %q is not a 64-bit unsigned decimal", truncate(s))
	}
	*id = wireID(v)
	return nil
}

type idRequest struct {
	ID wireID `json:"ID"`
}

type wireMember struct {
	ID         wireID   `json:"ID"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
	IsLearner  bool     `json:"isLearner"`
}

// decode validates one member: a member list feeds --initial-cluster and
// the removal of stale members, so nothing odd may pass.
func (w wireMember) decode() (Member, error) {
	m := Member{ID: uint64(w.ID), Name: w.Name, IsLearner: w.IsLearner}
	if m.ID == 0 {
		return m, errors.New("member without an ID")
	}
	if len(w.Name) > 253 || !printable(w.Name) {
		return m, fmt.Errorf("member %x: name %q is not a short printable string", m.ID, truncate(w.Name))
	}
	if len(w.PeerURLs) == 0 {
		return m, fmt.Errorf("member %x: no peer URLs", m.ID)
	}
	for _, list := range []struct {
		field string
		urls  []string
		out   *[]string
	}{{"peerURLs", w.PeerURLs, &m.PeerURLs}, {"clientURLs", w.ClientURLs, &m.ClientURLs}} {
		if len(list.urls) > 16 {
			return m, fmt.Errorf("member %x: %d %s", m.ID, len(list.urls), list.field)
		}
		for _, raw := range list.urls {
			if err := checkMemberURL(raw); err != nil {
				return m, fmt.Errorf("member %x: %s: %w", m.ID, list.field, err)
			}
			*list.out = append(*list.out, raw)
		}
	}
	return m, nil
}

func decodeMembers(wire []wireMember) ([]Member, error) {
	if len(wire) == 0 {
		return nil, errors.New("member list is empty")
	}
	if len(wire) > maxMembers {
		return nil, fmt.Errorf("member list has %d members, more than %d", len(wire), maxMembers)
	}
	seen := map[uint64]bool{}
	out := make([]Member, 0, len(wire))
	for _, w := range wire {
		m, err := w.decode()
		if err != nil {
			return nil, err
		}
		if seen[m.ID] {
			return nil, fmt.Errorf("member %x appears twice", m.ID)
		}
		seen[m.ID] = true
		out = append(out, m)
	}
	return out, nil
}

// checkMemberURL accepts what etcd writes as a member URL: http(s), a host
// and port, nothing else.
func checkMemberURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL", truncate(raw))
	case u.Scheme != "https" && u.Scheme != "http":
		return fmt.Errorf("%q is not an http(s) URL", truncate(raw))
	case u.Host == "" || u.Port() == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%q is not scheme://host:port", truncate(raw))
	case strings.ContainsAny(raw, ",= "):
		return fmt.Errorf("%q contains a separator of --initial-cluster", truncate(raw))
	}
	return nil
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// truncate keeps outside text short in errors and logs.
func truncate(s string) string {
	const n = 200
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
