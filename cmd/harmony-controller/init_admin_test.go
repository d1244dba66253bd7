package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/controller/controllertest"
)

// init-admin, from the controller's machine, makes the first admin with
// the setup token over the local socket; the token is then used up.
func TestInitAdminFromTheConsole(t *testing.T) {
	tc := controllertest.Start(t)
	dir := filepath.Dir(tc.AdminConfig)
	run := func() (string, error) {
		cmd := initAdminCommand()
		var out strings.Builder
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetIn(strings.NewReader("the console admin's password\n"))
		cmd.SetArgs([]string{"--data-dir", dir, "--username", "root", "--password-stdin"})
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	if out, err := run(); err != nil {
		t.Fatalf("init-admin: %v\n%s", err, out)
	}
	sess, err := tc.Admin.Login(context.Background(), "root", "the console admin's password")
	if err != nil || sess.User.Role != "admin" {
		t.Fatalf("login as the new admin: %+v, %v", sess, err)
	}
	if out, err := run(); err == nil || !strings.Contains(err.Error(), "no setup token") {
		t.Errorf("a second init-admin: %v\n%s", err, out)
	}
}
