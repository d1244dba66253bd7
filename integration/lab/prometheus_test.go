package lab

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/controllertest"
	"github.com/harmonykaas/harmony/internal/promconfig"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// The lab's scrape config finds the agents through the controller: a
// real Prometheus scrapes the nodes the controller has, with their
// labels, drops a deleted one, scrapes the controller with the scraper
// certificate, and evaluates every alerting rule without an error.
func TestPrometheusFindsTheNodesThroughTheController(t *testing.T) {
	ctx := context.Background()
	tc := controllertest.Start(t)
	// Loopback addresses: a scrape of a node that is not there fails at
	// once, on this machine.
	for _, spec := range []v1.NodeSpec{
		{Name: "sd-m1", Cluster: "sd", Role: v1.RoleMaster, IPs: []string{"127.0.0.21", "127.0.0.22"}},
		{Name: "sd-w1", Cluster: "sd", Role: v1.RoleWorker, IPs: []string{"127.0.0.31"}},
	} {
		if _, err := tc.Admin.AddNode(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	controller := netip.MustParseAddrPort(strings.TrimPrefix(tc.URL(), "https://"))
	r, _, data := prometheusScratch(t, "sd")
	conf, err := writeScrapeConfig(ctx, filepath.Join(r.dir(), "prometheus"), tc.Admin, controller)
	if err != nil {
		t.Fatal(err)
	}
	listen := freeLoopbackPort(t)
	proc, err := launchPrometheus(ctx, r, conf, data, listen)
	if proc.PID > 0 {
		t.Cleanup(func() { killAll(ctx, []int{proc.PID}, 5*time.Second) })
	}
	if err != nil {
		t.Fatal(err)
	}
	prom := "http://" + listen.String()

	type target struct {
		Labels map[string]string `json:"labels"`
		Health string            `json:"health"`
	}
	agents := func(t *testing.T, want []string) {
		t.Helper()
		var got []string
		testutil.Eventually(t, 90*time.Second, fmt.Sprintf("Prometheus's agent targets are %q", want), func() bool {
			var body struct {
				Data struct {
					ActiveTargets []target `json:"activeTargets"`
				} `json:"data"`
			}
			if err := testutil.PrometheusAPI(ctx, prom, "targets?state=active", &body); err != nil {
				return false
			}
			got = nil
			for _, tg := range body.Data.ActiveTargets {
				l := tg.Labels
				switch l["job"] {
				case "harmony-agent":
					got = append(got, fmt.Sprintf("%s cluster=%s node=%s role=%s", l["instance"], l["cluster"], l["node"], l["role"]))
				case "harmony-controller":
					if tg.Health != "up" {
						return false
					}
				}
			}
			slices.Sort(got)
			return slices.Equal(got, want)
		}, func() { t.Logf("agent targets: %q", got) })
	}
	agents(t, []string{"127.0.0.21:9101 cluster=sd node=sd-m1 role=master", "127.0.0.31:9101 cluster=sd node=sd-w1 role=worker"})
	if err := tc.Admin.DeleteNode(ctx, "sd-w1"); err != nil {
		t.Fatal(err)
	}
	agents(t, []string{"127.0.0.21:9101 cluster=sd node=sd-m1 role=master"})

	// Every rule loaded and evaluated without an error.
	var unhealthy []string
	testutil.Eventually(t, time.Minute, "every alerting rule evaluated", func() bool {
		n, bad, err := testutil.PrometheusRules(ctx, prom)
		unhealthy = bad
		return err == nil && len(bad) == 0 && n == strings.Count(string(promconfig.Rules), "- alert: ")
	}, func() { t.Logf("rules not evaluated healthy: %q", unhealthy) })
}
