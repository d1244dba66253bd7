package controller

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/harmonykaas/harmony/internal/buildinfo"
)

// metrics are the controller's own; each Controller has its registry, so
// tests can run several in one process.
type metrics struct {
	registry        *prometheus.Registry
	handler         http.Handler
	enrollments     *prometheus.CounterVec
	renewals        *prometheus.CounterVec
	activeWatches   prometheus.Gauge
	requestDuration *prometheus.HistogramVec
	auditSuppressed prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		enrollments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harmony_controller_enrollments_total",
			Help: "Enrollment requests by result: issued, or the refusal reason.",
		}, []string{"result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harmony_controller_renewals_total",
			Help: "Certificate renewal requests by result: issued, or the refusal reason.",
		}, []string{"result"}),
		activeWatches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "harmony_controller_role_watches_active",
			Help: "Role watches (long polls) currently held open by agents.",
		}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "harmony_controller_http_request_duration_seconds",
			Help:    "HTTP request latency by route, method and status code. Role watches include their wait.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"route", "method", "code"}),
		auditSuppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harmony_controller_audit_suppressed_total",
			Help: "Refused requests of unauthenticated callers left out of the audit trail: past each source's budget.",
		}),
	}
	m.registry.MustRegister(m.enrollments, m.renewals, m.activeWatches, m.requestDuration, m.auditSuppressed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Collector("harmony_controller"))
	// Show the refusal reasons at zero before the first one happens.
	for _, r := range []string{"issued", "token_unknown", "token_expired", "token_used", "cn_mismatch", "san_not_in_inventory", "weak_key", "csr_bad_signature"} {
		m.enrollments.WithLabelValues(r)
	}
	m.renewals.WithLabelValues("issued")
	m.handler = promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
	return m
}

func (c *Controller) metricsHandler() http.Handler { return c.metrics.handler }
