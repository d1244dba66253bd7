// Package buildinfo holds the version stamped into every binary at link
// time (-X .../buildinfo.Version=...) and exports it as a metric.
package buildinfo

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is set by the Makefile; "dev" in a plain go build.
var Version = "dev"

// Collector returns a <prefix>_build_info gauge, always 1, labelled with
// the version and the Go version.
func Collector(prefix string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        prefix + "_build_info",
		Help:        "A metric with a constant 1, labelled by the build's version and Go version.",
		ConstLabels: prometheus.Labels{"version": Version, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}
