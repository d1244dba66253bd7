package testutil

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// PrometheusAPI reads the answer of the Prometheus at base (its http://
// address) to GET /api/v1/path into v.
func PrometheusAPI(ctx context.Context, base, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/"+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("prometheus %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// PrometheusRules counts the rules the Prometheus at base has loaded, and
// names those not evaluated healthy ("NAME: HEALTH: ERROR"): with an
// error, or not yet evaluated.
func PrometheusRules(ctx context.Context, base string) (n int, unhealthy []string, err error) {
	var rules struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := PrometheusAPI(ctx, base, "rules", &rules); err != nil {
		return 0, nil, err
	}
	for _, g := range rules.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				unhealthy = append(unhealthy, fmt.Sprintf("%s: %s: %s", r.Name, r.Health, r.LastError))
			}
		}
	}
	return n, unhealthy, nil
}
