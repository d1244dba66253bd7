package haproxy

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
)

// check runs `haproxy -c` on a candidate config. It is the validator given
// to files.Write: a config HAProxy would refuse at reload never replaces
// the live one.
func (c *Component) check(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CheckTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.cfg.Binary, "-c", "-f", path)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("haproxy -c: %w (after %s)", ctx.Err(), c.cfg.CheckTimeout)
	case err != nil:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return fmt.Errorf("haproxy -c: %w", err)
		}
		return fmt.Errorf("haproxy -c: %s", checkerMessage(out, path))
	}
	return nil
}

// checkConfigBytes checks body as it would be at finalPath, from a scratch
// file beside it.
func (c *Component) checkConfigBytes(ctx context.Context, finalPath string, body []byte) error {
	f, err := os.CreateTemp(filepath.Dir(finalPath), "."+filepath.Base(finalPath)+".check-*")
	if err != nil {
		return fmt.Errorf("scratch config: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(body); err != nil {
		f.Close()
		return fmt.Errorf("scratch config: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("scratch config: %w", err)
	}
	return c.check(ctx, f.Name())
}

// checkerMessage keeps HAProxy's alerts, without the version banner, the
// pids and the closing summary, and names the candidate for what it is.
func checkerMessage(out []byte, candidate string) string {
	var msgs []string
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "[ALERT]") {
			continue
		}
		// "[ALERT]    (12319) : config : parsing [f:9] : ..."
		if _, rest, ok := strings.Cut(line, ") : "); ok {
			line = rest
		}
		if strings.Contains(line, "Error(s) found in configuration file") || strings.Contains(line, "Fatal errors found in configuration") {
			continue
		}
		msgs = append(msgs, line)
	}
	msg := strings.Join(msgs, "; ")
	if msg == "" {
		msg = strings.Join(strings.Fields(string(out)), " ")
	}
	if msg == "" {
		msg = "refused the config without a message"
	}
	msg = strings.ReplaceAll(msg, candidate, "candidate")
	const limit = 1024
	if len(msg) > limit {
		msg = msg[:limit] + "…"
	}
	return msg
}

// observe reports health: the unit runs and, unless disabled, its stats
// endpoint answers. Right after a start or reload the workers may still be
// binding, so a failed probe is retried for a moment.
func (c *Component) observe(ctx context.Context, host *reconcile.Host, justChanged bool) (bool, string) {
	s, err := host.Services.State(ctx, Name)
	if err != nil {
		return false, fmt.Sprintf("observe haproxy unit: %v", err)
	}
	if !s.Running {
		msg := "haproxy is not running"
		if s.LastExit != "" {
			msg += " (last exit: " + s.LastExit + ")"
		}
		return false, msg
	}
	if c.cfg.NoStatsProbe {
		return true, "haproxy running"
	}
	wait := time.Duration(0)
	if justChanged {
		wait = 3 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		up, total, err := c.backendsUp(ctx)
		if err == nil {
			return true, fmt.Sprintf("haproxy running; %d of %d apiservers UP", up, total)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false, fmt.Sprintf("haproxy running but its stats endpoint does not answer: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// backendsUp reads the stats CSV and counts the apiservers HAProxy marks
// UP.
func (c *Component) backendsUp(ctx context.Context) (up, total int, err error) {
	rows, err := c.statsCSV(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range rows {
		if r["pxname"] != "apiservers" || r["svname"] == "FRONTEND" || r["svname"] == "BACKEND" {
			continue
		}
		total++
		if strings.HasPrefix(r["status"], "UP") {
			up++
		}
	}
	return up, total, nil
}

// statsCSV fetches /stats;csv from the local stats frontend, one map per
// row keyed by column name.
func (c *Component) statsCSV(ctx context.Context) ([]map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.cfg.StatsAddr.String()+"/stats;csv", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /stats;csv: %s", resp.Status)
	}
	var body bytes.Buffer
	if _, err := body.ReadFrom(http.MaxBytesReader(nil, resp.Body, 1<<20)); err != nil {
		return nil, fmt.Errorf("GET /stats;csv: %w", err)
	}
	text := strings.TrimPrefix(body.String(), "# ")
	r := csv.NewReader(strings.NewReader(text))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("GET /stats;csv: %w", err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("GET /stats;csv: empty")
	}
	head := recs[0]
	rows := make([]map[string]string, 0, len(recs)-1)
	for _, rec := range recs[1:] {
		m := make(map[string]string, len(head))
		for i, h := range head {
			if i < len(rec) {
				m[h] = rec[i]
			}
		}
		rows = append(rows, m)
	}
	return rows, nil
}
