package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/internal/testutil"
)

// checkKubeletServing: every node's kubelet serves a certificate the
// cluster CA signed for that node's name and address (its serving request,
// approved by the masters' agents and signed by the controller manager),
// the apiserver reaches every kubelet through it (it verifies kubelets
// against the cluster CA), and no kubelet's request was denied.
func (l *labUnderTest) checkKubeletServing(t *testing.T) {
	clusterCA := l.kubeTLS(t).RootCAs
	for _, n := range l.cluster(t).Status.Nodes {
		var last string
		testutil.Eventually(t, 3*time.Minute, "the kubelet of "+n.Name+" to serve the cluster CA's certificate", func() bool {
			cert, err := kubeletCert(n.IP, clusterCA)
			switch {
			case err != nil:
				last = err.Error()
			case cert.Subject.CommonName != "system:node:"+n.Name:
				last = "subject " + cert.Subject.String()
			case !slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.String() == n.IP }):
				last = fmt.Sprintf("addresses %v", cert.IPAddresses)
			default:
				return true
			}
			return false
		}, func() { t.Logf("%s: %s", n.Name, last) })

		// The apiserver's own connection to the kubelet, as logs and
		// exec take it.
		if code, body := l.kubeGetBody(t, "/api/v1/nodes/"+n.Name+"/proxy/healthz"); code != http.StatusOK || body != "ok" {
			t.Errorf("the apiserver to the kubelet of %s: %d %q", n.Name, code, body)
		}
	}

	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Username string `json:"username"`
			} `json:"spec"`
			Status struct {
				Conditions []struct {
					Type    string `json:"type"`
					Reason  string `json:"reason"`
					Message string `json:"message"`
				} `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	code, body := l.kubeGetBody(t, "/apis/certificates.k8s.io/v1/certificatesigningrequests?fieldSelector=spec.signerName%3Dkubernetes.io%2Fkubelet-serving")
	if code != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("list kubelet serving requests: %d %s", code, body)
	}
	approved := map[string]bool{}
	for _, r := range list.Items {
		for _, c := range r.Status.Conditions {
			switch c.Type {
			case "Approved":
				approved[strings.TrimPrefix(r.Spec.Username, "system:node:")] = true
			case "Denied", "Failed":
				t.Errorf("%s of %s: %s %s: %s", r.Metadata.Name, r.Spec.Username, c.Type, c.Reason, c.Message)
			}
		}
	}
	for _, n := range l.cluster(t).Status.Nodes {
		if !approved[n.Name] {
			t.Errorf("no approved serving request of %s among %d", n.Name, len(list.Items))
		}
	}
}

// kubeletCert is the certificate the kubelet at ip serves to a client
// that trusts only the cluster CA and checks the address.
func kubeletCert(ip string, clusterCA *x509.CertPool) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{RootCAs: clusterCA, ServerName: ip, MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip, "10250"))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

// kubeGetBody is GET path through the VIP with the lab's kubeconfig: the
// status and the answer.
func (l *labUnderTest) kubeGetBody(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := l.kubeClient(t, 30*time.Second).Get(l.sum.APIServer + path)
	if err != nil {
		t.Errorf("GET %s: %v", path, err)
		return 0, ""
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(data)
}
