package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/agent/files"
)

var rule = ConfListRule{CNIVersion: "0.3.1", Name: "contiv-net", Types: []string{"contivk8s"}}

func TestValidateConfListAccepts(t *testing.T) {
	list, err := ValidateConfList([]byte(`{"cniVersion":"0.3.1","name":"contiv-net","plugins":[{"type":"contivk8s"}]}`), rule)
	if err != nil {
		t.Fatal(err)
	}
	if list.Name != "contiv-net" || list.CNIVersion != "0.3.1" || len(list.Plugins) != 1 || list.Plugins[0].Network.Type != "contivk8s" {
		t.Errorf("parsed %+v", list)
	}
}

func TestValidateConfListRefuses(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"not JSON", `{"cniVersion":`, "libcni"},
		{"no name", `{"cniVersion":"0.3.1","plugins":[{"type":"contivk8s"}]}`, "no name"},
		{"plugin without type", `{"cniVersion":"0.3.1","name":"contiv-net","plugins":[{}]}`, "missing 'type'"},
		{"empty chain", `{"cniVersion":"0.3.1","name":"contiv-net","plugins":[]}`, "no plugins"},
		{"no chain", `{"cniVersion":"0.3.1","name":"contiv-net"}`, "0 plugins"},
		{"unknown spec version", `{"cniVersion":"9.9.9","name":"contiv-net","plugins":[{"type":"contivk8s"}]}`, "not a CNI spec version"},
		{"other spec version", `{"cniVersion":"1.0.0","name":"contiv-net","plugins":[{"type":"contivk8s"}]}`, `want "0.3.1"`},
		{"other network", `{"cniVersion":"0.3.1","name":"pods","plugins":[{"type":"contivk8s"}]}`, `name is "pods"`},
		{"other binary", `{"cniVersion":"0.3.1","name":"contiv-net","plugins":[{"type":"bridge"}]}`, `plugins[0].type is "bridge"`},
		{"longer chain", `{"cniVersion":"0.3.1","name":"contiv-net","plugins":[{"type":"contivk8s"},{"type":"portmap"}]}`, "2 plugins"},
		{"plugin version differs", `{"cniVersion":"0.3.1","name":"contiv-net","plugins":[{"type":"contivk8s","cniVersion":"1.0.0"}]}`, "plugins[0].cniVersion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ValidateConfList([]byte(tc.data), rule)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Through files.Write, a refused candidate leaves the live file as it was.
func TestConfListValidatorKeepsLiveFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "10-contiv.conflist")
	good := []byte(`{"cniVersion":"0.3.1","name":"contiv-net","plugins":[{"type":"contivk8s"}]}`)
	if _, err := files.Write(path, good, 0o644, ConfListValidator(rule)); err != nil {
		t.Fatal(err)
	}
	_, err := files.Write(path, []byte(`{"cniVersion":"0.3.1","name":"contiv-net","plugins":[{"type":"bridge"}]}`), 0o644, ConfListValidator(rule))
	var ve *files.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v, want a ValidationError", err)
	}
	if got, _ := os.ReadFile(path); string(got) != string(good) {
		t.Errorf("live file changed to %s", got)
	}
	if _, err := files.Write(path, nil, 0o644, ConfListValidator(rule)); err == nil {
		t.Error("an empty candidate was accepted")
	}
}
