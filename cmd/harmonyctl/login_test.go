package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/controller/controllertest"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// runWithStdin runs a command with stdin.
func runWithStdin(t *testing.T, cmd *cobra.Command, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd.SetIn(strings.NewReader(stdin))
	return runCommand(t, cmd, args...)
}

// From the setup token to signing out: the first admin from the token,
// a login that trusts the controller by its CA pin, a user created by
// that admin who signs in too, sees only what a user may, keeps working
// past the access token's lifetime (the refreshed session is written
// back), and is shut out at once when disabled.
func TestUsersFromSetupToSignOut(t *testing.T) {
	clk := &testutil.Clock{}
	tc := controllertest.Start(t, func(c *controller.Config) { c.Now = clk.Now })
	dir := t.TempDir()
	pin := v1.CAPin(tc.CA().Certificate())
	root := &globals{config: filepath.Join(dir, "root.conf"), server: tc.URL()}
	tokenFile := filepath.Join(filepath.Dir(tc.AdminConfig), "setup-token")

	if out, err := runWithStdin(t, setupCommand(root), "the first admin's password\n",
		"--ca-pin", pin, "--token-file", tokenFile, "--username", "root", "--password-stdin"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	if _, err := os.Stat(tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the setup token file stays after setup: %v", err)
	}
	if out, err := runWithStdin(t, loginCommand(root), "wrong password entirely\n",
		"--ca-pin", pin, "--username", "root", "--password-stdin"); err == nil || !strings.Contains(err.Error(), v1.CodeBadCredentials) {
		t.Errorf("login with a wrong password: %v\n%s", err, out)
	}
	if out, err := runWithStdin(t, loginCommand(root), "the first admin's password\n",
		"--ca-pin", "sha256:"+strings.Repeat("0", 64), "--username", "root", "--password-stdin"); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("login to a controller whose CA does not match the pin: %v\n%s", err, out)
	}
	if out, err := runWithStdin(t, loginCommand(root), "the first admin's password\n",
		"--ca-pin", pin, "--username", "root", "--password-stdin"); err != nil {
		t.Fatalf("login: %v\n%s", err, out)
	}
	cfg, err := clientconfig.Load(root.config)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(root.config); info.Mode().Perm() != 0o600 || cfg.Session == nil || cfg.ClientCertificate != "" {
		t.Fatalf("root's config: mode %v, session %v, certificate %q", info.Mode().Perm(), cfg.Session, cfg.ClientCertificate)
	}
	if out, err := runWithStdin(t, userAddCommand(root), "alice's long password\n", "alice", "--password-stdin"); err != nil {
		t.Fatalf("user add: %v\n%s", err, out)
	}

	// Alice trusts the controller by its CA file.
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, []byte(cfg.CertificateAuthority), 0o644); err != nil {
		t.Fatal(err)
	}
	alice := &globals{config: filepath.Join(dir, "alice.conf"), server: tc.URL()}
	if out, err := runWithStdin(t, loginCommand(alice), "alice's long password\n",
		"--ca-file", caFile, "--username", "alice", "--password-stdin"); err != nil {
		t.Fatalf("alice's login: %v\n%s", err, out)
	}
	alice.server = "" // from her config from now on
	if out, err := runCommand(t, whoamiCommand(alice)); err != nil || out != "user alice (user)\n" {
		t.Errorf("alice's whoami: %q, %v", out, err)
	}
	var apiErr *client.APIError
	if _, err := runCommand(t, userListCommand(alice)); !errors.As(err, &apiErr) || apiErr.Status != 403 {
		t.Errorf("alice lists users: %v", err)
	}
	before, _ := clientconfig.Load(alice.config)
	clk.Advance(v1.AccessTokenLifetime + time.Minute)
	if out, err := runCommand(t, whoamiCommand(alice)); err != nil || out != "user alice (user)\n" {
		t.Errorf("alice's whoami after the access token's lifetime: %q, %v", out, err)
	}
	after, _ := clientconfig.Load(alice.config)
	if after.Session.AccessToken == before.Session.AccessToken || !after.Session.AccessExpiresAt.After(clk.Now()) {
		t.Errorf("the refreshed session was not written back")
	}

	if out, err := runCommand(t, userDisableCommand(root, true), "alice"); err != nil {
		t.Fatalf("disable alice: %v\n%s", err, out)
	}
	if _, err := runCommand(t, whoamiCommand(alice)); !errors.As(err, &apiErr) || apiErr.Body.Code != v1.CodeSessionInvalid {
		t.Errorf("alice after she was disabled: %v", err)
	}
	if out, err := runWithStdin(t, loginCommand(alice), "alice's long password\n", "--username", "alice", "--password-stdin"); err == nil {
		t.Errorf("a disabled user logs in: %s", out)
	}

	// The audit has alice's two logins, the second refused, and root's
	// disabling of her.
	if out, err := runCommand(t, auditCommand(root), "--user", "alice"); err != nil {
		t.Errorf("audit: %v\n%s", err, out)
	}
	rootClient, err := root.client()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := rootClient.Audit(context.Background(), "1h", "", "alice")
	var logins []int
	for _, e := range entries {
		if e.Route == "POST "+v1.PathLogin {
			logins = append(logins, e.Status)
		}
	}
	if err != nil || len(logins) != 2 || logins[0] != 200 || logins[1] != 401 {
		t.Errorf("alice's logins in the audit: %v, %v", logins, err)
	}
	if out, err := runCommand(t, logoutCommand(root)); err != nil {
		t.Fatalf("logout: %v\n%s", err, out)
	}
	if _, err := os.Stat(root.config); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("logout left a config with no credential: %v", err)
	}
	// The ended session is refused even with the tokens kept elsewhere.
	c, _ := client.New(cfg, "")
	if _, err := c.WhoAmI(context.Background()); !errors.As(err, &apiErr) || apiErr.Body.Code != v1.CodeSessionInvalid {
		t.Errorf("root's session after logout: %v", err)
	}
}
