package kubeadm

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/files"
	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
)

// kubeadm makes a master's leaf certificates and kubeconfigs valid for a
// year and never replaces one that exists: a cluster left alone for a
// year would find its apiserver's certificate and its controller
// manager's and scheduler's credentials expired, and `kubeadm init phase
// certs` then refuses the expired files. So the agent renews them, the
// way it renews the leaves it makes itself (pki.RenewalDue): a file in
// the last third of its life is removed (prune), kubeadm's local phases
// make it afresh, and the control plane restarts to read it.

// certsRenewedRecord holds when this master last found a certificate
// due; its time is CertsRenewedEnv's value.
const certsRenewedRecord = StateDir + "/certificates-renewed"

// CertsRenewedEnv carries, in the environment of the control plane's
// pods, when this master last renewed its certificates: a new value
// changes their manifests, and the kubelet restarts them (the controller
// manager and the scheduler read their kubeconfigs only at start; the
// stand-in apiserver, its certificates).
const CertsRenewedEnv = "HARMONY_CERTIFICATES_RENEWED"

// dueForRenewal says, for each leaf certificate and kubeconfig of this
// master that is due at now, why (by node path: the certificate's, or the
// kubeconfig's).
func dueForRenewal(host *reconcile.Host, kubeconfigs []string, now time.Time) map[string]string {
	due := map[string]string{}
	for _, leaf := range leafCerts {
		nodePath := path.Join(PKIDir, leaf.name+".crt")
		if cert, err := readCert(host.Path(nodePath)); err == nil && pki.RenewalDue(cert, now) {
			due[nodePath] = expiryNote(cert.NotAfter, now)
		}
	}
	for _, name := range kubeconfigs {
		nodePath := path.Join(KubernetesDir, name)
		if nodePath == KubeletKubeconfig {
			// The kubelet rotates its client certificate itself, and
			// kubelet-finalize points kubelet.conf at the rotated file.
			continue
		}
		kc, err := readKubeconfig(host.Path(nodePath))
		if err != nil {
			continue
		}
		if cert := kc.clientCert(); cert != nil && pki.RenewalDue(cert, now) {
			due[nodePath] = "its client certificate " + expiryNote(cert.NotAfter, now)
		}
	}
	return due
}

func expiryNote(notAfter, now time.Time) string {
	when := notAfter.UTC().Format(time.RFC3339)
	if !notAfter.After(now) {
		return "expired " + when
	}
	return "expires " + when + ", in the last third of its life"
}

// certsRenewed records a renewal at now when anything is due, before
// prune removes it, so that the configuration rendered in the same pass
// carries the new time; and returns the recorded time ("" for a master
// that never renewed). An unreadable record counts as none: at worst the
// control plane restarts once more.
func certsRenewed(host *reconcile.Host, due map[string]string, now time.Time) (string, error) {
	if len(due) > 0 {
		stamp := now.UTC().Format(time.RFC3339)
		if _, err := files.Write(host.Path(certsRenewedRecord), []byte(stamp+"\n"), 0o600, nil); err != nil {
			return "", fmt.Errorf("record the certificates' renewal: %w", err)
		}
		return stamp, nil
	}
	data, err := os.ReadFile(host.Path(certsRenewedRecord))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	stamp := strings.TrimSpace(string(data))
	if _, perr := time.Parse(time.RFC3339, stamp); err != nil || perr != nil {
		logger(host).Warn("ignoring the record of the last certificate renewal", "path", certsRenewedRecord, "err", errors.Join(err, perr))
		return "", nil
	}
	return stamp, nil
}
