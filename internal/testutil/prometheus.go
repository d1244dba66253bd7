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
