// Package v1 holds the wire types that cross between harmony-agent,
// harmony-controller and harmonyctl: the bootstrap document, enrollment,
// renewal, the role document, status reports and the admin API bodies.
//
// It is the only package both sides import. Every decoder of outside input
// lives here, is bounded, rejects unknown fields, and returns a
// *FieldError that names the offending field.
package v1

// APIVersion is written into every top-level document.
const APIVersion = "harmony.dev/v1"

// Organizations placed in certificate subjects by the controller. The
// controller sets them itself; a CSR's subject is never copied.
const (
	OrgNodes    = "harmony:nodes"
	OrgAdmins   = "harmony:admins"
	OrgScrapers = "harmony:scrapers"
)

// Body limits. Decoders read at most this many bytes.
const (
	MaxBootstrapBytes = 64 << 10
	MaxEnrollBytes    = 64 << 10
	MaxRoleBytes      = 1 << 20
	MaxStatusBytes    = 256 << 10
	MaxAdminBytes     = 1 << 20
)

// Paths of the controller's HTTP API.
const (
	PathCA          = "/api/v1/ca"
	PathEnroll      = "/api/v1/enroll"
	PathRenew       = "/api/v1/node/renew"
	PathNodeRole    = "/api/v1/node/role"
	PathNodeStatus  = "/api/v1/node/status"
	PathNodes       = "/api/v1/nodes"
	PathRoles       = "/api/v1/roles"
	PathScraperCert = "/api/v1/certificates/scraper"
	PathHealthz     = "/healthz"
	PathMetrics     = "/metrics"

	// PathMetricsTargets lists every agent's /metrics in Prometheus's
	// HTTP service discovery format (MetricsTargetGroup).
	PathMetricsTargets = "/api/v1/metrics/targets"

	// PathNodeEtcdSnapshots: GET lists the copies the controller keeps of
	// the node's cluster's etcd snapshots; PUT
	// PathNodeEtcdSnapshots/{takenAt} sends one (a master's), GET
	// PathNodeEtcdSnapshots/{takenAt} fetches one (a restore's source).
	PathNodeEtcdSnapshots = "/api/v1/node/etcd-snapshots"
)
