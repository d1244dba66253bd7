package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/harmonykaas/harmony/controller"
)

// callLocal sends one request to the running controller's local socket in
// dataDir and returns its answer when the status is want; the caller
// closes the body. Any other answer is an error with the controller's
// reason.
func callLocal(ctx context.Context, dataDir, method, path string, body io.Reader, want int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://local"+path, body)
	if err != nil {
		return nil, err
	}
	resp, err := controller.LocalClient(dataDir).Do(req)
	if err != nil {
		return nil, fmt.Errorf("the controller's local socket in %s does not answer (is the controller running?): %w", dataDir, err)
	}
	if resp.StatusCode != want {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("the controller refused: %s: %s", resp.Status, msg)
	}
	return resp, nil
}
