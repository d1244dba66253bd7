package v1_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func validClusterSpecJSON() []byte {
	return []byte(`{"apiVersion":"harmony.dev/v1","kind":"Cluster","name":"prod","provider":"lab","image":"harmony-node-1","workers":2,"vip":"198.18.10.79","podCIDR":"198.19.0.0/17","serviceCIDR":"198.19.128.0/20"}`)
}

func validProviderJSON() []byte {
	return []byte(`{"apiVersion":"harmony.dev/v1","kind":"Provider","name":"lab","vcenter":{"url":"https://vc.example/sdk","username":"u","password":"p"},"datacenter":"DC0","computeCluster":"C0","folder":"harmony","datastores":{"os":["ds1"],"data":["ds2"]},"network":"VM Network","ipPool":{"network":"198.18.10.0/24","ranges":["198.18.10.20-198.18.10.30","198.18.10.40"],"gateway":"198.18.10.1"}}`)
}

func TestClusterSpecDefaults(t *testing.T) {
	s, err := v1.DecodeClusterSpec(bytes.NewReader(validClusterSpecJSON()))
	if err != nil {
		t.Fatal(err)
	}
	if *s.Masters != 3 || *s.MasterSize != (v1.NodeSize{CPUs: 1, MemoryMiB: 3840}) || *s.WorkerSize != v1.DefaultWorkerSize ||
		s.MasterDataDiskGiB != 20 || s.DNSDomain != "cluster.local" || s.Contiv != nil ||
		s.Network.Plugin != "flannel" || *s.Network.Flannel != (v1.FlannelSettings{VNI: 1, Port: 8472}) {
		t.Fatalf("defaults: %+v", s)
	}
	if cni := s.CNI(); cni.Type != "flannel" || *cni.Flannel != (v1.FlannelSettings{VNI: 1, Port: 8472}) || cni.Contiv != nil {
		t.Fatalf("CNI of the defaults: %+v", cni)
	}
	// contiv settings without a plugin mean contiv, as before network
	// existed; a stored spec without network keeps contiv too.
	spec := bytes.Replace(validClusterSpecJSON(), []byte(`{`), []byte(`{"contiv":{"vni":77},`), 1)
	s, err = v1.DecodeClusterSpec(bytes.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	if cni := s.CNI(); cni.Type != "contiv" || *cni.Contiv != (v1.ContivSettings{Mode: "vxlan", VNI: 77}) || cni.Flannel != nil {
		t.Fatalf("CNI of a contiv spec: %+v", cni)
	}
	if cni := (&v1.ClusterSpec{Contiv: &v1.ContivSettings{VNI: 5}}).CNI(); cni.Type != "contiv" || cni.Contiv.VNI != 5 {
		t.Fatalf("CNI of a spec stored before network: %+v", cni)
	}
	// The sizing table follows the cluster's node count.
	for nodes, want := range map[int]int{5: 1, 6: 2, 100: 4, 101: 8, 500: 16, 501: 32} {
		if got := v1.MasterSizeFor(nodes).CPUs; got != want {
			t.Errorf("%d nodes: %d vCPUs, want %d", nodes, got, want)
		}
	}
}

func TestIPPoolAddresses(t *testing.T) {
	p, err := v1.DecodeProvider(bytes.NewReader(validProviderJSON()))
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := p.IPPool.Addresses()
	if err != nil || len(addrs) != 12 || addrs[11].String() != "198.18.10.40" {
		t.Fatalf("%v %v", addrs, err)
	}
	bad := map[string]v1.IPPool{
		"ipPool.gateway":   {Network: "198.18.10.0/24", Ranges: []string{"198.18.10.5"}, Gateway: "198.18.11.1"},
		"ipPool.ranges[0]": {Network: "198.18.10.0/24", Ranges: []string{"198.18.10.0-198.18.10.5"}, Gateway: "198.18.10.1"},
		"ipPool.ranges[1]": {Network: "198.18.10.0/24", Ranges: []string{"198.18.10.5-198.18.10.9", "198.18.10.9"}, Gateway: "198.18.10.1"},
		"ipPool.network":   {Network: "198.18.10.1/24", Ranges: []string{"198.18.10.5"}, Gateway: "198.18.10.1"},
		"ipPool.ranges":    {Network: "198.18.10.0/24", Gateway: "198.18.10.1"},
	}
	for field, pool := range bad {
		_, err := pool.Addresses()
		var fe *v1.FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
	// A pool that includes its gateway is refused.
	gw := v1.IPPool{Network: "198.18.10.0/24", Ranges: []string{"198.18.10.1-198.18.10.3"}, Gateway: "198.18.10.1"}
	if _, err := gw.Addresses(); err == nil {
		t.Error("a range holding the gateway was accepted")
	}
}

func TestProviderRefusals(t *testing.T) {
	cases := map[string]string{
		"vcenter.url":        `"url":"http://vc.example/sdk"`,
		"vcenter.username":   `"username":""`,
		"vcenter.insecure":   `"thumbprint":"AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD","insecure":true`,
		"datastores.os[0]":   `"datastores":{"os":["ds*"]}`,
		"computeCluster":     `"computeCluster":""`,
		"datastores.data[1]": `"datastores":{"os":["a"],"data":["b","b"]}`,
	}
	for field, patch := range cases {
		var doc map[string]any
		if err := json.Unmarshal(validProviderJSON(), &doc); err != nil {
			t.Fatal(err)
		}
		var over map[string]any
		if err := json.Unmarshal([]byte("{"+patch+"}"), &over); err != nil {
			t.Fatal(err)
		}
		for k, v := range over {
			switch k {
			case "url", "username", "thumbprint", "insecure":
				doc["vcenter"].(map[string]any)[k] = v
			default:
				doc[k] = v
			}
		}
		data, _ := json.Marshal(doc)
		_, err := v1.DecodeProvider(bytes.NewReader(data))
		var fe *v1.FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
}

func TestClusterSpecNetworkRefusals(t *testing.T) {
	cases := map[string]string{
		"network.plugin":         `"network":{"plugin":"calico"}`,
		"network.flannel.vni":    `"network":{"flannel":{"vni":16777216}}`,
		"network.flannel.port":   `"network":{"plugin":"flannel","flannel":{"port":70000}}`,
		"network.flannel":        `"network":{"plugin":"contiv","flannel":{"vni":2}}`,
		"contiv":                 `"network":{"plugin":"flannel"},"contiv":{"vni":5}`,
		"contiv.mode":            `"contiv":{"mode":"bgp"}`,
		"contiv.vni":             `"network":{"plugin":"contiv"},"contiv":{"vni":16777216}`,
		"etcdSnapshots.interval": `"etcdSnapshots":{"interval":"1m"}`,
		"etcdSnapshots.keep":     `"etcdSnapshots":{"keep":1000}`,
	}
	for field, patch := range cases {
		spec := bytes.Replace(validClusterSpecJSON(), []byte(`{`), []byte(`{`+patch+`,`), 1)
		_, err := v1.DecodeClusterSpec(bytes.NewReader(spec))
		var fe *v1.FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
}

// FuzzDecodeClusterSpec: no input panics; what is accepted validates again
// after a round trip; every refusal is a FieldError.
func FuzzDecodeClusterSpec(f *testing.F) {
	f.Add(validClusterSpecJSON())
	f.Add([]byte(`{"apiVersion":"harmony.dev/v1","kind":"Cluster","name":"a","masters":2}`))
	f.Add([]byte(`{"contiv":{"vni":-1}}`))
	f.Add([]byte(`{"network":{"plugin":"flannel","flannel":{"vni":-1,"port":0}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := v1.DecodeClusterSpec(bytes.NewReader(data))
		if err != nil {
			var fe *v1.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("refusal is not a FieldError: %v", err)
			}
			return
		}
		again, _ := json.Marshal(s)
		if _, err := v1.DecodeClusterSpec(bytes.NewReader(again)); err != nil {
			t.Fatalf("accepted spec fails after a round trip: %v\n%s", err, again)
		}
	})
}

// FuzzDecodeProvider: the same properties for provider documents.
func FuzzDecodeProvider(f *testing.F) {
	f.Add(validProviderJSON())
	f.Add([]byte(`{"ipPool":{"network":"198.18.0.0/15","ranges":["198.18.0.1-198.19.255.254"],"gateway":"198.18.0.0"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := v1.DecodeProvider(bytes.NewReader(data))
		if err != nil {
			var fe *v1.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("refusal is not a FieldError: %v", err)
			}
			return
		}
		again, _ := json.Marshal(p)
		if _, err := v1.DecodeProvider(bytes.NewReader(again)); err != nil {
			t.Fatalf("accepted provider fails after a round trip: %v\n%s", err, again)
		}
	})
}
