package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/integration/imageboot"
)

// TestApplianceBoot boots the control-plane appliance's disk, taken back
// out of its OVA, under QEMU with the devices its OVF declares (pvscsi and
// vmxnet3) and a blank data disk, and waits for its controller to answer
// /healthz with a controller's certificate through a port QEMU forwards
// from this host. Nothing is added to the disk: the appliance must boot,
// get its address, format and mount its data disk, and start the
// controller, which makes its CA on first start, with only what it
// carries. Then it is upgraded as the README says, by reimage: a fresh
// copy of the image's disk with the first boot's data disk must come up
// with the same CA, so the controller's state was on the data disk and
// nothing of it on the system disk that was thrown away. TestLab runs the
// same root file system in a container, with no kernel, initrd or
// firmware; this is the test that boots them.
func TestApplianceBoot(t *testing.T) {
	ova := newestImage(t, "harmony-control-plane-*.ova")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()

	disk := filepath.Join(dir, "appliance.raw")
	root := ovaDisk(ctx, t, ova, disk)
	// The port is the one the image's own unit gives the controller.
	unit, err := imageboot.ReadFile(ctx, disk, root, "/etc/systemd/system/harmony-controller.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`--listen \S*:(\d+)`).FindSubmatch(unit)
	if m == nil {
		t.Fatalf("the image's harmony-controller.service has no --listen address:\n%s", unit)
	}
	guestPort, err := strconv.ParseUint(string(m[1]), 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	pristine := filepath.Join(dir, "pristine.raw")
	if err := imageboot.CopySparse(disk, pristine); err != nil {
		t.Fatal(err)
	}
	// A blank data disk, as the OVA's second disk is.
	data := filepath.Join(dir, "data.raw")
	if err := os.WriteFile(data, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(data, 1<<30); err != nil {
		t.Fatal(err)
	}
	hostPort := freePort(t)
	opts := imageboot.Options{
		Disk: disk, DataDisk: data, SerialLog: filepath.Join(dir, "serial.log"), VMware: true,
		Net:      netip.MustParsePrefix("198.18.122.0/24"),
		Forwards: []imageboot.Forward{{Host: uint16(hostPort), Guest: uint16(guestPort)}},
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", hostPort, v1.PathHealthz)
	firstCA := bootAppliance(ctx, t, opts, url)

	// The reimage: a new system disk from the same image, the same data
	// disk.
	opts.Disk, opts.SerialLog = filepath.Join(dir, "reimaged.raw"), filepath.Join(dir, "serial-reimaged.log")
	if err := imageboot.CopySparse(pristine, opts.Disk); err != nil {
		t.Fatal(err)
	}
	if ca := bootAppliance(ctx, t, opts, url); !bytes.Equal(ca, firstCA) {
		t.Fatal("after a reimage the appliance's controller has another CA: its state was not on the data disk")
	}
}

// bootAppliance boots the appliance, waits for its controller to answer,
// powers it off, and returns the controller's CA certificate.
func bootAppliance(ctx context.Context, t *testing.T, opts imageboot.Options, url string) []byte {
	t.Helper()
	vm, early, err := imageboot.Boot(ctx, opts, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop()
	t.Logf("%s: kernel %.1f s, systemd %.1f s after QEMU started", filepath.Base(opts.Disk), early.Kernel.Seconds(), early.Systemd.Seconds())
	for {
		ca, err := applianceHealthy(ctx, url)
		if err == nil {
			t.Logf("%s: controller healthy %.1f s after QEMU started", filepath.Base(opts.Disk), time.Since(vm.Started()).Seconds())
			return ca
		}
		select {
		case <-ctx.Done():
		case <-vm.Exited():
		case <-time.After(2 * time.Second):
			continue
		}
		vm.Stop()
		t.Fatalf("the appliance's controller never answered %s (last: %v); serial console (tail):\n%s", url, err, vm.SerialTail(6000))
	}
}

// applianceHealthy asks the controller for /healthz and returns its CA
// certificate. The CA was made inside the VM, so the test cannot know it
// beforehand: the certificate must be a controller's and chain to the CA
// the controller sends with it.
func applianceHealthy(ctx context.Context, url string) ([]byte, error) {
	var ca []byte
	conf := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // checked by VerifyConnection, against the chain's own root
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) < 2 {
				return errors.New("the controller sent no CA with its certificate")
			}
			roots := x509.NewCertPool()
			roots.AddCert(cs.PeerCertificates[len(cs.PeerCertificates)-1])
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots}); err != nil {
				return err
			}
			ca = cs.PeerCertificates[len(cs.PeerCertificates)-1].Raw
			return v1.VerifyController(cs)
		},
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	return ca, nil
}
