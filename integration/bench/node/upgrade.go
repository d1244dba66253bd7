package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/integration/lab"
	"github.com/harmonykaas/harmony/integration/upgradewatch"
	"github.com/harmonykaas/harmony/internal/kubeconfig"
)

// Anchors for an upgrade, from public reports (issue 14): Google
// Distributed Cloud for VMware plans about 15 minutes per node, OpenShift
// about 5; measured control-plane rolls show 1 to 8 s of /readyz failure.
const (
	anchorNodeGDC       = 15 * time.Minute
	anchorNodeOpenShift = 5 * time.Minute
	anchorAPIGap        = 8 * time.Second
)

// kubeClient calls the cluster's API as its admin, through the VIP.
func kubeClient(sum *lab.Summary, timeout time.Duration) (*http.Client, error) {
	data, err := os.ReadFile(sum.Kubeconfig)
	if err != nil {
		return nil, err
	}
	kc, err := kubeconfig.Parse(data)
	if err != nil {
		return nil, err
	}
	tlsConf, err := kc.TLSConfig()
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: tlsConf, DisableKeepAlives: true}}, nil
}

// upgrade moves the bench lab's 3+2 cluster to the second node image of
// the checkout (make next-image) while upgradewatch's clients sample the
// API through the VIP, and prints the wall time, each replacement's time,
// the longest API unavailability and the etcd leader elections, next to
// the anchors.
func upgrade(ctx context.Context, stateDir, nextImages string, sum *lab.Summary) error {
	found, _ := filepath.Glob(filepath.Join(nextImages, "harmony-node-*.ova"))
	if len(found) != 1 {
		return fmt.Errorf("want one harmony-node-*.ova in %s (make next-image), found %v", nextImages, found)
	}
	img, err := lab.ImportImage(ctx, stateDir, found[0], slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	conf, err := clientconfig.Load(sum.AdminConfig)
	if err != nil {
		return err
	}
	ctl, err := client.New(conf, "")
	if err != nil {
		return err
	}
	kube, err := kubeClient(sum, 2*time.Second)
	if err != nil {
		return err
	}
	const configMap = "bench-upgrade"
	resp, err := kube.Post(sum.APIServer+"/api/v1/namespaces/default/configmaps", "application/json",
		bytes.NewReader([]byte(`{"metadata":{"name":"`+configMap+`"},"data":{"a":"b"}}`)))
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("create ConfigMap %s: %s", configMap, resp.Status)
	}
	m, err := reachMasters(stateDir, sum)
	if err != nil {
		return err
	}
	watch := upgradewatch.Start(upgradewatch.Target{APIServer: sum.APIServer, Kube: kube, ConfigMap: configMap,
		Etcd: m.etcd, MasterIPs: m.ips, Controller: ctl, Cluster: lab.ClusterName})
	start := time.Now()
	op, err := ctl.UpgradeCluster(ctx, lab.ClusterName, v1.UpgradeRequest{Image: img.Name})
	if err != nil {
		watch.Stop()
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Hour)
	done, err := ctl.WaitOperation(wctx, op.ID, nil)
	cancel()
	took := time.Since(start)
	res := watch.Stop()
	if err != nil {
		return err
	}
	if done.State != v1.OperationSucceeded {
		return fmt.Errorf("upgrade %s: %s", done.State, done.Message)
	}
	nodes := len(sum.Nodes)
	perNode := took / time.Duration(nodes)
	fmt.Printf("\nupgrade by reimage of the 3+2 cluster to %s: %.0f s, %.0f s per node (anchors: GDC for VMware plans %s per node: %s; OpenShift %s: %s)\n",
		img.Name, took.Seconds(), perNode.Seconds(), anchorNodeGDC, verdict(perNode < anchorNodeGDC), anchorNodeOpenShift, verdict(perNode < anchorNodeOpenShift))
	for _, n := range slices.Sorted(maps.Keys(res.Replaced)) {
		fmt.Printf("  %-8s replaced in %5.0f s: %s\n", n, res.Replaced[n].Seconds(), res.Timeline(n))
	}
	gap := time.Duration(res.LongestRun) * 100 * time.Millisecond
	fmt.Printf("  API through the VIP (/readyz and a ConfigMap, one retry, every 100 ms): %d samples, %d failed; longest unavailability %.1f s, target none: %s (others measure 1 to %s)\n",
		res.Samples, res.Failed, gap.Seconds(), verdict(res.LongestRun == 0), anchorAPIGap)
	masters := len(m.ips)
	fmt.Printf("  etcd leader elections: %d for %d masters, target at most one per master: %s\n",
		res.Elections(), masters, verdict(res.Elections() <= masters))
	return nil
}

// masters are the cluster's masters' addresses and an etcd client for
// them.
type masters struct {
	ips  []string
	etcd *upgradewatch.Etcd
}

// reachMasters reads the etcd client credential from the first master's
// body.
func reachMasters(stateDir string, sum *lab.Summary) (masters, error) {
	var m masters
	var first string
	for _, n := range sum.Nodes {
		if n.Role == string(v1.RoleMaster) {
			m.ips = append(m.ips, n.IP)
			if first == "" {
				first = n.Name
			}
		}
	}
	if first == "" {
		return m, fmt.Errorf("the lab has no master")
	}
	vm, err := lab.OpenVM(stateDir, first)
	if err != nil {
		return m, err
	}
	b, err := vm.Body()
	if err != nil {
		return m, err
	}
	m.etcd, err = upgradewatch.NewEtcd(b)
	return m, err
}
