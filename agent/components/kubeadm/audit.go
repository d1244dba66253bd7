package kubeadm

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/harmonykaas/harmony/agent/files"
	"github.com/harmonykaas/harmony/agent/reconcile"
)

// Every master's apiserver keeps an audit log (the CIS benchmark's
// --audit-log-* settings; kubeadm leaves it off). It is on the master's
// system disk: a reimage starts a new one, so ship it off the node to keep
// it longer than the VM.
const (
	AuditPolicyFile = KubernetesDir + "/audit-policy.yaml"
	AuditLogDir     = "/var/log/kubernetes/audit"
	AuditLogFile    = AuditLogDir + "/audit.log"
	// AuditPolicyEnv carries the policy's digest into the apiserver's
	// environment, so that a new policy restarts it (it reads the file at
	// start only).
	AuditPolicyEnv = "HARMONY_AUDIT_POLICY"
)

// The log's rotation: at 100 MB, keeping 10 files and none older than 30
// days, at most 1.1 GB.
var auditLogArgs = []arg{
	{Name: "audit-policy-file", Value: AuditPolicyFile},
	{Name: "audit-log-path", Value: AuditLogFile},
	{Name: "audit-log-maxsize", Value: "100"},
	{Name: "audit-log-maxbackup", Value: "10"},
	{Name: "audit-log-maxage", Value: "30"},
}

// auditVolumes are the apiserver pod's mounts of the policy and the log.
var auditVolumes = []hostPathMount{
	{Name: "audit-policy", HostPath: AuditPolicyFile, MountPath: AuditPolicyFile, ReadOnly: true, PathType: "File"},
	{Name: "audit-log", HostPath: AuditLogDir, MountPath: AuditLogDir, PathType: "DirectoryOrCreate"},
}

//go:embed audit-policy.yaml
var auditPolicy []byte

// auditPolicyDigest names the policy in the apiserver's environment.
func auditPolicyDigest() string {
	sum := sha256.Sum256(auditPolicy)
	return hex.EncodeToString(sum[:8])
}

// writeAuditPolicy writes the policy and makes the log's directory, which
// only root may read: the log names every user and what they touched.
func writeAuditPolicy(host *reconcile.Host, owe func() error, st *reconcile.Status) error {
	changed, err := files.WriteOwing(host.Path(AuditPolicyFile), auditPolicy, 0o600, nil, owe)
	if err != nil {
		return fmt.Errorf("audit policy: %w", err)
	}
	if changed {
		st.Actions = append(st.Actions, "wrote "+AuditPolicyFile)
	}
	dir := host.Path(AuditLogDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("audit log directory: %w", err)
	}
	return os.Chmod(dir, 0o700)
}
