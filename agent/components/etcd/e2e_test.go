//go:build linux

package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// Three masters, each a network namespace running the real etcd under the
// real process supervisor, driven only by the component: they found one
// cluster, survive a stopped member, take back a member with its data,
// take in a wiped member through the learner path, renew a certificate
// without a restart, ignore a new worker and an agent restart, keep
// running under a broken role, and stop for a worker role.
func TestMembersInNetworkNamespaces(t *testing.T) {
	needLab(t, "runs three etcd members")
	ctx := context.Background()
	id := labID(t)
	sw := labSwitch(t, id)
	masters := map[string]string{}
	var hosts []*labHost
	for i, name := range []string{"m1", "m2", "m3"} {
		addr := fmt.Sprintf("198.18.30.%d", 11+i)
		masters[name] = addr
		hosts = append(hosts, newLabHost(t, id, sw, name, addr))
	}
	m1, m2, m3 := hosts[0], hosts[1], hosts[2]
	caPair := newCA(t, "etcd-ca")
	ca, err := pki.LoadCA(caPair)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]*v1.Role{}
	for _, h := range hosts {
		roles[h.name] = testRole(t, h.name, masters, caPair)
	}

	// 1. All three start together, as masters cloned at once do: none
	// finds a cluster, so they found one.
	first := make([]reconcile.Status, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { first[i] = h.comp.Reconcile(ctx, h.host, roles[h.name]) })
	}
	wg.Wait()
	for i, st := range first {
		if st.Phase != reconcile.PhaseConverged || !slices.Contains(st.Actions, "started etcd") || !slices.Equal(st.Units, []string{"etcd"}) {
			t.Fatalf("%s first pass: %+v", hosts[i].name, st)
		}
		t.Logf("%s first pass: %v (%s)", hosts[i].name, st.Actions, st.Message)
	}
	cl := m1.client(t, ca)
	eventually(t, 90*time.Second, "three voting members with a leader", func() error {
		members, err := cl.MemberList(ctx, m1.endpoint())
		if err != nil {
			return err
		}
		return votingMembers(members, "m1", "m2", "m3")
	})
	started := map[string]service.State{}
	for _, h := range hosts {
		started[h.name] = h.state(t)
	}
	// The second pass changes nothing, and the member is healthy.
	leaders := 0
	for _, h := range hosts {
		var st reconcile.Status
		eventually(t, 60*time.Second, h.name+" healthy", func() error {
			st = h.comp.Reconcile(ctx, h.host, roles[h.name])
			if len(st.Actions) != 0 {
				t.Fatalf("%s second pass acted: %+v", h.name, st)
			}
			if !st.Healthy || st.Phase != reconcile.PhaseConverged {
				return fmt.Errorf("%s: %+v", h.name, st)
			}
			return nil
		})
		if now := h.state(t); now.PID != started[h.name].PID || !now.Started.Equal(started[h.name].Started) || now.Restarts != started[h.name].Restarts {
			t.Fatalf("%s etcd restarted: %+v, then %+v", h.name, started[h.name], now)
		}
		status, err := cl.Status(ctx, h.endpoint())
		if err != nil {
			t.Fatal(err)
		}
		m := gather(t, h)
		if m["harmony_agent_etcd_member_info"].labels["member_id"] != hexID(status.MemberID) ||
			m["harmony_agent_etcd_member_info"].labels["name"] != h.name ||
			m["harmony_agent_etcd_has_leader"].value != 1 || m["harmony_agent_etcd_is_learner"].value != 0 {
			t.Errorf("%s metrics %+v, status %+v", h.name, m, status)
		}
		leaders += int(m["harmony_agent_etcd_is_leader"].value)
		if want := "member " + hexID(status.MemberID) + " (" + h.name + "): voting member"; !strings.HasPrefix(st.Message, want) {
			t.Errorf("%s message %q, want it to start with %q", h.name, st.Message, want)
		}
	}
	if leaders != 1 {
		t.Errorf("%d members export is_leader 1, want exactly 1", leaders)
	}

	// 2. One member stops: the other two keep a quorum and take writes.
	// The stopped one comes back from its data directory, as itself.
	before, err := m3.client(t, ca).Status(ctx, m3.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := m3.sup.Stop(ctx, UnitName); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a write with m3 down", func() error {
		return kvPut(ctx, cl, m1.endpoint(), "written-while-m3-was-down", "yes")
	})
	st := m3.comp.Reconcile(ctx, m3.host, roles["m3"])
	if st.Phase != reconcile.PhaseConverged || !slices.Equal(st.Actions, []string{"started etcd"}) {
		t.Fatalf("m3 after stop: %+v", st)
	}
	m3cl := m3.client(t, ca)
	eventually(t, 60*time.Second, "m3 back with the write", func() error {
		status, err := m3cl.Status(ctx, m3.endpoint())
		if err != nil {
			return err
		}
		if status.MemberID != before.MemberID {
			t.Fatalf("m3 came back as %x, was %x", status.MemberID, before.MemberID)
		}
		v, err := kvGetLocal(ctx, m3cl, m3.endpoint(), "written-while-m3-was-down")
		if err != nil || v != "yes" {
			return fmt.Errorf("m3 reads %q, %v", v, err)
		}
		return nil
	})

	// 3. One member loses its data: it removes its stale self, joins as a
	// learner with a new ID, and is promoted within the pass.
	old, err := m2.client(t, ca).Status(ctx, m2.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.sup.Stop(ctx, UnitName); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(m2.host.Path(DefaultDataDir)); err != nil {
		t.Fatal(err)
	}
	st = m2.comp.Reconcile(ctx, m2.host, roles["m2"])
	t.Logf("m2 rejoin: %v (%s)", st.Actions, st.Message)
	if st.Phase != reconcile.PhaseConverged || !st.Healthy {
		t.Fatalf("m2 after wipe: %+v", st)
	}
	fresh, err := m2.client(t, ca).Status(ctx, m2.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if fresh.MemberID == old.MemberID || fresh.IsLearner {
		t.Fatalf("m2 after wipe: %+v (was %x)", fresh, old.MemberID)
	}
	// The bootstrap record is rewritten only if the join's initial cluster
	// differs from the last one (m2 may have joined as a learner before).
	wantActions := []string{"removed stale member " + hexID(old.MemberID), "added learner " + hexID(fresh.MemberID),
		"started etcd", "promoted member " + hexID(fresh.MemberID)}
	if !slices.Equal(slices.DeleteFunc(slices.Clone(st.Actions), func(a string) bool { return a == "wrote "+BootstrapFile }), wantActions) {
		t.Errorf("m2 rejoin actions %q, want %q", st.Actions, wantActions)
	}
	members, err := cl.MemberList(ctx, m1.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := votingMembers(members, "m1", "m2", "m3"); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.ID == old.MemberID {
			t.Errorf("the stale member %x is still listed", old.MemberID)
		}
	}
	if st := m2.comp.Reconcile(ctx, m2.host, roles["m2"]); len(st.Actions) != 0 || !st.Healthy {
		t.Errorf("m2 pass after the rejoin: %+v", st)
	}

	// 4. A renewed server certificate (here: lost) is issued again and
	// served at the next handshake, without a restart.
	was := m1.state(t)
	if err := os.Remove(m1.host.Path(PKIDir + "/" + serverCert)); err != nil {
		t.Fatal(err)
	}
	st = m1.comp.Reconcile(ctx, m1.host, roles["m1"])
	if !slices.Equal(st.Actions, []string{"issued server certificate"}) || !st.Healthy {
		t.Fatalf("m1 after losing its server certificate: %+v", st)
	}
	if now := m1.state(t); now.PID != was.PID || now.Restarts != was.Restarts {
		t.Fatalf("etcd restarted for a renewed certificate: %+v, then %+v", was, now)
	}
	onDisk, err := os.ReadFile(m1.host.Path(PKIDir + "/" + serverCert))
	if err != nil {
		t.Fatal(err)
	}
	certs, err := v1.ParseCertificatesPEM(onDisk)
	if err != nil {
		t.Fatal(err)
	}
	if served := servedCert(t, m1, ca); served.SerialNumber.Cmp(certs[0].SerialNumber) != 0 {
		t.Errorf("etcd serves serial %v, the new certificate has %v", served.SerialNumber, certs[0].SerialNumber)
	}

	// 5. A new worker in the role, and an agent restart, restart nothing.
	for _, h := range hosts {
		started[h.name] = h.state(t)
		r := cloneRole(roles[h.name])
		r.Peers = append(r.Peers, v1.Peer{Name: "w2", Role: v1.RoleWorker, Address: "198.18.31.22"})
		r.Revision++
		roles[h.name] = r
		if st := h.comp.Reconcile(ctx, h.host, r); len(st.Actions) != 0 || !st.Healthy {
			t.Errorf("%s with a new worker: %+v", h.name, st)
		}
	}
	m3.restartAgent(t)
	if st := m3.comp.Reconcile(ctx, m3.host, roles["m3"]); len(st.Actions) != 0 || !st.Healthy {
		t.Errorf("m3 after an agent restart: %+v", st)
	}
	for _, h := range hosts {
		if now := h.state(t); now.PID != started[h.name].PID || !now.Started.Equal(started[h.name].Started) {
			t.Errorf("%s etcd restarted: %+v, then %+v", h.name, started[h.name], now)
		}
	}

	// 6. A broken role (the CA without its key) fails, naming the field;
	// the member keeps running.
	broken := cloneRole(roles["m2"])
	broken.PKI.EtcdCA.Key = ""
	st = m2.comp.Reconcile(ctx, m2.host, broken)
	if st.Phase != reconcile.PhaseFailed || len(st.Actions) != 0 || !strings.Contains(st.Message, "pki.etcdCA.key") ||
		!strings.Contains(st.Message, "keeps running") {
		t.Errorf("broken role: %+v", st)
	}
	if now := m2.state(t); now.PID != started["m2"].PID || !now.Running {
		t.Errorf("etcd after a broken role: %+v, was %+v", now, started["m2"])
	}

	// 7. A worker runs no member: etcd stops, and no metrics remain.
	worker := cloneRole(roles["m1"])
	worker.Role = v1.RoleWorker
	for i := range worker.Peers {
		if worker.Peers[i].Name == "m1" {
			worker.Peers[i].Role = v1.RoleWorker
		}
	}
	if err := worker.Validate(); err != nil {
		t.Fatal(err)
	}
	st = m1.comp.Reconcile(ctx, m1.host, worker)
	if st.Phase != reconcile.PhaseDisabled || !slices.Equal(st.Actions, []string{"stopped etcd"}) {
		t.Fatalf("worker: %+v", st)
	}
	if _, err := m1.sup.State(ctx, UnitName); !errors.Is(err, service.ErrUnknownUnit) {
		t.Errorf("etcd state on a worker: %v", err)
	}
	if m := gather(t, m1); len(m) != 0 {
		t.Errorf("a worker exports %v", m)
	}
	if st := m1.comp.Reconcile(ctx, m1.host, worker); len(st.Actions) != 0 {
		t.Errorf("second worker pass: %+v", st)
	}
}

// votingMembers checks that members are exactly the named ones, started
// and voting.
func votingMembers(members []Member, names ...string) error {
	var got []string
	for _, m := range members {
		if m.IsLearner {
			return fmt.Errorf("member %x (%s) is a learner", m.ID, m.Name)
		}
		got = append(got, m.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, names) {
		return fmt.Errorf("members %q, want %q", got, names)
	}
	return nil
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func kvPut(ctx context.Context, cl *Client, endpoint, key, value string) error {
	req := map[string]string{
		"key":   base64.StdEncoding.EncodeToString([]byte(key)),
		"value": base64.StdEncoding.EncodeToString([]byte(value)),
	}
	return cl.post(ctx, endpoint, "/v3/kv/put", req, &struct{}{})
}

// kvGetLocal reads key from the member at endpoint itself (a serializable
// read), to see what that member holds.
func kvGetLocal(ctx context.Context, cl *Client, endpoint, key string) (string, error) {
	req := map[string]any{"key": base64.StdEncoding.EncodeToString([]byte(key)), "serializable": true}
	var resp struct {
		Kvs []struct {
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := cl.post(ctx, endpoint, "/v3/kv/range", req, &resp); err != nil {
		return "", err
	}
	if len(resp.Kvs) != 1 {
		return "", fmt.Errorf("%d values", len(resp.Kvs))
	}
	return string(resp.Kvs[0].Value), nil
}

// servedCert is the certificate h's etcd presents on a new connection.
func servedCert(t *testing.T, h *labHost, ca *pki.CA) *x509.Certificate {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := testutil.NetnsDialer(h.ns)(ctx, "tcp", h.endpoint()[len("https://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	pair, err := tls.LoadX509KeyPair(filepath.Join(h.host.Path(PKIDir), clientCert), filepath.Join(h.host.Path(PKIDir), clientKey))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	conn := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: h.addr.String(), Certificates: []tls.Certificate{pair}})
	if err := conn.HandshakeContext(ctx); err != nil {
		t.Fatal(err)
	}
	return conn.ConnectionState().PeerCertificates[0]
}

type sample struct {
	labels map[string]string
	value  float64
}

// gather returns the component's metrics by name (one sample each).
func gather(t *testing.T, h *labHost) map[string]sample {
	t.Helper()
	families, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]sample{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			out[f.GetName()] = sample{labels: labelMap(m.GetLabel()), value: m.GetGauge().GetValue()}
		}
	}
	return out
}

func labelMap(pairs []*dto.LabelPair) map[string]string {
	out := map[string]string{}
	for _, p := range pairs {
		out[p.GetName()] = p.GetValue()
	}
	return out
}

// A master that was in the initial cluster but never started (its agent
// came late) finds the cluster the other two founded: it removes the
// member that stood for it and joins as a learner, and is promoted.
func TestLateInitialMemberJoinsAsLearner(t *testing.T) {
	ctx := context.Background()
	hosts, masters, caPair, ca := newMasters(t, "198.18.30.%d", 21)
	m1, m3 := hosts[0], hosts[2]
	roles := map[string]*v1.Role{}
	for _, h := range hosts {
		roles[h.name] = testRole(t, h.name, masters, caPair)
	}

	// m1 and m2 found the cluster: alone, neither has a quorum, so neither
	// answers the other, and both found it.
	var wg sync.WaitGroup
	for _, h := range hosts[:2] {
		wg.Go(func() {
			st := h.comp.Reconcile(ctx, h.host, roles[h.name])
			if st.Phase != reconcile.PhaseConverged || slices.ContainsFunc(st.Actions, func(a string) bool { return strings.HasPrefix(a, "added learner") }) {
				t.Errorf("%s founding pass: %+v", h.name, st)
			}
		})
	}
	wg.Wait()
	cl := m1.client(t, ca)
	var stale Member
	eventually(t, 90*time.Second, "m1 and m2 serving, m3 never started", func() error {
		members, err := cl.MemberList(ctx, m1.endpoint())
		if err != nil {
			return err
		}
		serving := 0
		for _, m := range members {
			switch {
			case m.Name == "m3" && len(m.ClientURLs) == 0:
				stale = m
			case len(m.ClientURLs) > 0:
				serving++
			}
		}
		if serving != 2 || stale.ID == 0 {
			return fmt.Errorf("members %+v", members)
		}
		return nil
	})

	st := m3.comp.Reconcile(ctx, m3.host, roles["m3"])
	t.Logf("m3: %v (%s)", st.Actions, st.Message)
	status, err := m3.client(t, ca).Status(ctx, m3.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"removed stale member " + hexID(stale.ID), "added learner " + hexID(status.MemberID),
		"wrote " + BootstrapFile, "started etcd", "promoted member " + hexID(status.MemberID)}
	if st.Phase != reconcile.PhaseConverged || !st.Healthy || len(st.Actions) < len(want) || !slices.Equal(st.Actions[len(st.Actions)-len(want):], want) {
		t.Fatalf("m3 late pass: %+v, want actions ending in %q", st, want)
	}
	if flag := flagValue(m3.stateCommand(t), "--initial-cluster-state"); flag != StateExisting {
		t.Errorf("m3 started with --initial-cluster-state=%s", flag)
	}
	members, err := cl.MemberList(ctx, m1.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := votingMembers(members, "m1", "m2", "m3"); err != nil {
		t.Fatal(err)
	}
	if st := m3.comp.Reconcile(ctx, m3.host, roles["m3"]); len(st.Actions) != 0 || !st.Healthy {
		t.Errorf("m3 second pass: %+v", st)
	}
}
