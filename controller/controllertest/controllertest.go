// Package controllertest runs a real harmony-controller in process, on a
// loopback port in a temporary data directory, for the tests of the
// packages that talk to it (harmonyctl, the client).
package controllertest

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
)

// Controller is a running controller and its admin credential.
type Controller struct {
	*controller.Controller
	// AdminConfig is the admin.conf the controller wrote on its first
	// start; Admin is a client loaded from it.
	AdminConfig string
	Admin       *client.Client

	cfg  controller.Config
	stop func()
}

// Start runs a controller until the test ends; mutate changes its
// configuration first.
func Start(t testing.TB, mutate ...func(*controller.Config)) *Controller {
	t.Helper()
	dir := t.TempDir()
	cfg := controller.Config{
		DataDir: dir,
		Listen:  "127.0.0.1:0",
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, m := range mutate {
		m(&cfg)
	}
	tc := &Controller{cfg: cfg, AdminConfig: filepath.Join(dir, controller.AdminConfigFile)}
	tc.serve(t)
	t.Cleanup(func() { tc.stop() })
	adminCfg, err := clientconfig.Load(tc.AdminConfig)
	if err != nil {
		t.Fatalf("load admin.conf: %v", err)
	}
	if tc.Admin, err = client.New(adminCfg, tc.URL()); err != nil {
		t.Fatal(err)
	}
	// Later starts listen where clients already point.
	tc.cfg.Listen = strings.TrimPrefix(tc.URL(), "https://")
	return tc
}

// Restart stops the controller and starts another on the same data and
// address, as after a crash or an upgrade of the controller; the pause
// between them is down.
func (tc *Controller) Restart(t testing.TB, down time.Duration) {
	t.Helper()
	tc.stop()
	time.Sleep(down)
	tc.serve(t)
}

func (tc *Controller) serve(t testing.TB) {
	t.Helper()
	c, err := controller.New(tc.cfg)
	if err != nil {
		t.Fatalf("start controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Serve(ctx); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	tc.Controller = c
	stopped := false
	tc.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			c.Close()
		}
	}
}
