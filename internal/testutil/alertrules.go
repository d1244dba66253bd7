package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// AlertRulesFile is Harmony's Prometheus alerting rules, from the module
// root.
const AlertRulesFile = "internal/promconfig/harmony.rules.yml"

// RuleMetrics are the metric names starting with prefix that the
// alerting rules name, found from the test's package directory up.
func RuleMetrics(t testing.TB, prefix string) []string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	data, err := os.ReadFile(filepath.Join(dir, AlertRulesFile))
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(regexp.QuoteMeta(prefix)+`[a-z_]+`).FindAllString(string(data), -1)
	if len(names) == 0 {
		t.Fatalf("%s names no metric starting %s", AlertRulesFile, prefix)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// CheckRuleMetrics fails the test for each metric starting with prefix
// that the alerting rules name and c does not describe; a histogram's
// series are named by its _bucket, _sum and _count.
func CheckRuleMetrics(t testing.TB, prefix string, c prometheus.Collector) {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	described := map[string]bool{}
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			described[m[1]] = true
		}
	}
	for _, name := range RuleMetrics(t, prefix) {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && described[b] {
				base = b
			}
		}
		if !described[base] {
			t.Errorf("%s names %s, which is not exported", AlertRulesFile, name)
		}
	}
}
