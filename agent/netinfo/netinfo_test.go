package netinfo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDefaultRouteInterface(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	withDefault := write("route", header+
		"eth1\t000012C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"+
		"eth0\t00000000\t010012C6\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
	if got := defaultRouteInterface(withDefault); got != "eth0" {
		t.Fatalf("default route interface %q, want eth0", got)
	}
	noDefault := write("route2", header+"eth1\t000012C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")
	if got := defaultRouteInterface(noDefault); got != "" {
		t.Fatalf("no default route, got %q", got)
	}
	if got := defaultRouteInterface(filepath.Join(dir, "missing")); got != "" {
		t.Fatalf("missing table, got %q", got)
	}
}
