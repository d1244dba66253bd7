package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A report in ginkgo's JSON form: the summary counts only the focused
// It specs, folds every kind of failure into failed, and says why each
// failed or skipped one did.
func TestSummary(t *testing.T) {
	report := `[{"SpecReports":[
	 {"ContainerHierarchyTexts":["[sig-network] DNS"],"LeafNodeText":"should resolve [Conformance]","LeafNodeType":"It","State":"passed","RunTime":2000000000},
	 {"ContainerHierarchyTexts":["[sig-node] Pods"],"LeafNodeText":"should run [Conformance]","LeafNodeType":"It","State":"failed","RunTime":1000000000,"Failure":{"Message":"pod never ran\nmore"}},
	 {"ContainerHierarchyTexts":["[sig-node] Pods"],"LeafNodeText":"should time out [Conformance]","LeafNodeType":"It","State":"timedout"},
	 {"ContainerHierarchyTexts":["[sig-apps] Deployment"],"LeafNodeText":"should roll [Conformance]","LeafNodeType":"It","State":"skipped","Failure":{"Message":"needs httpd"}},
	 {"ContainerHierarchyTexts":["[sig-node] Pods"],"LeafNodeText":"slow","LeafNodeType":"It","State":"failed"},
	 {"LeafNodeText":"","LeafNodeType":"SynchronizedBeforeSuite","State":"passed"}
	]}]`
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(&out, path, `\[Conformance\]`); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"1 passed, 2 failed, 1 skipped (3s of specs)",
		"[sig-node] Pods should run [Conformance]\n    pod never ran\n",
		"[sig-apps] Deployment should roll [Conformance]\n    needs httpd",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "slow") {
		t.Errorf("an unfocused spec was counted:\n%s", got)
	}
	if err := run(&out, path, `(`); err == nil {
		t.Error("a bad focus was accepted")
	}
}
