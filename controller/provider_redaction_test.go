package controller

import (
	"net/http"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// TestApplyProviderAnswerHasNoPassword: the answer to PUT
// /api/v1/providers/{name}, whether it created the provider (201) or
// updated it (200, with the password given again or kept), never carries
// the vCenter password.
func TestApplyProviderAnswerHasNoPassword(t *testing.T) {
	sim, err := vcsim.Start(vcsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	if len(sim.Password) < 8 {
		t.Fatalf("simulator password %q is too short to search for", sim.Password)
	}
	tc := startController(t, t.TempDir())
	url := tc.url + v1.PathProviders + "/lab"

	withPassword := sim.Provider("lab", testPool())
	keepPassword := sim.Provider("lab", testPool())
	keepPassword.VCenter.Password = ""
	for _, step := range []struct {
		name   string
		p      v1.Provider
		status int
	}{
		{"create", withPassword, http.StatusCreated},
		{"update with the password", withPassword, http.StatusOK},
		{"update keeping the stored password", keepPassword, http.StatusOK},
	} {
		r := doJSON(t, tc.admin, "PUT", url, step.p)
		if r.status != step.status {
			t.Fatalf("%s: %d %s, want %d", step.name, r.status, r.body, step.status)
		}
		if strings.Contains(string(r.body), sim.Password) {
			t.Fatalf("%s: the answer carries the vCenter password: %s", step.name, r.body)
		}
		var got v1.Provider
		r.decode(t, &got)
		if got.Name != "lab" || got.VCenter.Username != sim.Username || got.VCenter.Password != "" {
			t.Fatalf("%s: answer %+v", step.name, got)
		}
	}
	// The password is kept where it belongs: the controller still uses it.
	p, err := tc.c.provider("lab")
	if err != nil || p.VCenter.Password != sim.Password {
		t.Fatalf("stored provider lost its password: %v", err)
	}
	if strings.Contains(tc.logs.String(), sim.Password) {
		t.Fatal("the controller logged the vCenter password")
	}
}
