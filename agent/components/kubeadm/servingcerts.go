package kubeadm

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// The kubelets ask the cluster for serving certificates
// (serverTLSBootstrap in the KubeletConfiguration), so that what connects
// to a kubelet (the apiserver for logs and exec, metrics-server,
// Prometheus) can verify it against the cluster CA, and so that the
// kubelet rotates it. kube-controller-manager signs such a request only
// once it is approved, and approves none itself: every master's agent
// does, for the requests that name exactly what the controller gave the
// requesting node (its name and its address, from the role's peers), and
// denies the rest, saying why.

const (
	// kubeletServingSigner is the signer of kubelet serving certificates.
	kubeletServingSigner = "kubernetes.io/kubelet-serving"
	csrPath              = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
	nodeUserPrefix       = "system:node:"
	nodesGroup           = "system:nodes"
	// Reasons the decisions carry, as kubectl get csr shows them.
	approvedReason = "HarmonyNodeVerified"
	deniedReason   = "HarmonyNodeMismatch"
)

// servingUsages are the key usages a kubelet serving certificate may ask
// for; "server auth" is required.
var servingUsages = []string{"digital signature", "key encipherment", "server auth"}

// csrObject is what the approver reads of a CertificateSigningRequest.
// Spec is kept as it came, to be sent back with the decision.
type csrObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec   json.RawMessage `json:"spec"`
	Status struct {
		Conditions []csrCondition `json:"conditions,omitempty"`
	} `json:"status"`
}

type csrCondition struct {
	Type           string `json:"type"`
	Status         string `json:"status"`
	Reason         string `json:"reason,omitempty"`
	Message        string `json:"message,omitempty"`
	LastUpdateTime string `json:"lastUpdateTime,omitempty"`
}

// csrSpec is the part of a request the decision reads. Username and
// Groups are the requester's, set by the apiserver, not by the requester.
type csrSpec struct {
	SignerName string   `json:"signerName"`
	Request    []byte   `json:"request"`
	Usages     []string `json:"usages"`
	Username   string   `json:"username"`
	Groups     []string `json:"groups"`
}

// decided reports whether someone already approved or denied the
// request, or the signer gave up on it.
func (o *csrObject) decided() bool {
	return slices.ContainsFunc(o.Status.Conditions, func(c csrCondition) bool {
		return c.Type == "Approved" || c.Type == "Denied" || c.Type == "Failed"
	})
}

// judgeServingRequest returns nil for a request this cluster's node may
// have, and otherwise what is wrong with it, naming the field.
func judgeServingRequest(spec csrSpec, peers []v1.Peer) error {
	if spec.SignerName != kubeletServingSigner {
		return fmt.Errorf("spec.signerName: %q, not %s", spec.SignerName, kubeletServingSigner)
	}
	node, ok := strings.CutPrefix(spec.Username, nodeUserPrefix)
	if !ok || node == "" {
		return fmt.Errorf("spec.username: %q is not a node's kubelet (%sNAME)", spec.Username, nodeUserPrefix)
	}
	if !slices.Contains(spec.Groups, nodesGroup) {
		return fmt.Errorf("spec.groups: %q lacks %s", spec.Groups, nodesGroup)
	}
	i := slices.IndexFunc(peers, func(p v1.Peer) bool { return p.Name == node })
	if i < 0 {
		return fmt.Errorf("spec.username: node %q is not a node of this cluster", node)
	}
	peer := peers[i]
	if !slices.Contains(spec.Usages, "server auth") {
		return fmt.Errorf("spec.usages: %q lacks server auth", spec.Usages)
	}
	for _, u := range spec.Usages {
		if !slices.Contains(servingUsages, u) {
			return fmt.Errorf("spec.usages: %q is not for a serving certificate (only %q)", u, servingUsages)
		}
	}

	block, rest := pem.Decode(spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" || len(strings.TrimSpace(string(rest))) != 0 {
		return errors.New("spec.request: not exactly one PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return fmt.Errorf("spec.request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return fmt.Errorf("spec.request: %w", err)
	}
	if want := nodeUserPrefix + node; req.Subject.CommonName != want {
		return fmt.Errorf("spec.request: subject CN %q, not the requester's %q", req.Subject.CommonName, want)
	}
	if !slices.Equal(req.Subject.Organization, []string{nodesGroup}) {
		return fmt.Errorf("spec.request: subject O %q, not [%s]", req.Subject.Organization, nodesGroup)
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return errors.New("spec.request: asks for e-mail or URI names, which a kubelet never serves")
	}
	if len(req.DNSNames) == 0 && len(req.IPAddresses) == 0 {
		return errors.New("spec.request: names neither a DNS name nor an IP address")
	}
	for _, name := range req.DNSNames {
		if name != node {
			return fmt.Errorf("spec.request: DNS name %q is not node %s's name", name, node)
		}
	}
	addr := net.ParseIP(peer.Address)
	for _, ip := range req.IPAddresses {
		if !ip.Equal(addr) {
			return fmt.Errorf("spec.request: IP address %s is not node %s's address (%s)", ip, node, peer.Address)
		}
	}
	return nil
}

// judgeServingRequests approves or denies, through this master's
// apiserver, every kubelet serving certificate request no one has decided
// yet. It returns what it decided; a request another master decided
// first is left to it.
func (c *Component) judgeServingRequests(ctx context.Context, host *reconcile.Host, role *v1.Role) ([]string, error) {
	api, err := c.kubeAPI(host, AdminKubeconfig)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var list struct {
		Items []csrObject `json:"items"`
	}
	query := url.Values{"fieldSelector": {"spec.signerName=" + kubeletServingSigner}}
	if _, err := api.Call(ctx, http.MethodGet, csrPath+"?"+query.Encode(), "", nil, &list, http.StatusOK); err != nil {
		return nil, fmt.Errorf("list CertificateSigningRequests: %w", err)
	}
	log := logger(host)
	var actions []string
	for _, o := range list.Items {
		if o.decided() {
			continue
		}
		var spec csrSpec
		if err := json.Unmarshal(o.Spec, &spec); err != nil {
			log.Warn("a CertificateSigningRequest this agent cannot read", "csr", o.Metadata.Name, "err", err)
			continue
		}
		o.APIVersion, o.Kind = "certificates.k8s.io/v1", "CertificateSigningRequest" // a list's items lack them
		cond := csrCondition{Type: "Approved", Status: "True", Reason: approvedReason,
			Message:        "the requester is this cluster's node, and asks for its own name and address only",
			LastUpdateTime: time.Now().UTC().Format(time.RFC3339)}
		verdict := judgeServingRequest(spec, role.Peers)
		if verdict != nil {
			cond.Type, cond.Reason, cond.Message = "Denied", deniedReason, verdict.Error()
		}
		o.Status.Conditions = append(o.Status.Conditions, cond)
		code, err := api.Call(ctx, http.MethodPut, csrPath+"/"+url.PathEscape(o.Metadata.Name)+"/approval", "application/json",
			o, nil, http.StatusOK, http.StatusConflict, http.StatusNotFound)
		if err != nil {
			return actions, fmt.Errorf("decide CertificateSigningRequest %s: %w", o.Metadata.Name, err)
		}
		if code != http.StatusOK {
			continue // another master decided, or the requester withdrew it
		}
		c.metrics.countServingRequest(cond.Type)
		if verdict != nil {
			log.Warn("denied a kubelet serving certificate request", "csr", o.Metadata.Name, "requester", spec.Username, "reason", verdict)
			actions = append(actions, fmt.Sprintf("denied kubelet serving certificate request %s of %s: %v", o.Metadata.Name, spec.Username, verdict))
			continue
		}
		log.Info("approved a kubelet serving certificate request", "csr", o.Metadata.Name, "requester", spec.Username)
		actions = append(actions, fmt.Sprintf("approved kubelet serving certificate request %s of %s", o.Metadata.Name, spec.Username))
	}
	return actions, nil
}
