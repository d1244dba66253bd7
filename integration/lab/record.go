package lab

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/procfs"
)

// record is lab.json: everything the lab made, written before each thing
// is made, so that Down can remove a lab that Up left half built.
type record struct {
	// ID makes the lab's names unique per state directory.
	ID     string `json:"id"`
	Subnet string `json:"subnet"`
	// CreatedDir: Up made StateDir, so Down removes it whole.
	CreatedDir bool   `json:"createdDir"`
	Switch     string `json:"switch"`
	// Uplink is the machine's end of the link to the lab's bridge.
	Uplink string       `json:"uplink"`
	Procs  []procRecord `json:"procs"`
	// BinDir holds vmware-rpctool, bound into every body.
	BinDir string `json:"binDir"`
	// VCenterLatencyMS is Config.VCenterLatency, for lab serve.
	VCenterLatencyMS int64 `json:"vcenterLatencyMS,omitempty"`
	// ControllerFlags are the controller's flags beyond its data
	// directory and address, for each start.
	ControllerFlags []string `json:"controllerFlags,omitempty"`

	path string
}

// procRecord is a process the lab started outside any host namespace. Its
// start time tells it from a later process that reused the PID.
type procRecord struct {
	Name string `json:"name"`
	procfs.Proc
}

const recordName = "lab.json"

// labID is short enough for interface names (15 bytes at most).
func labID(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return hex.EncodeToString(sum[:3])
}

func newRecord(stateDir string) *record {
	id := labID(stateDir)
	return &record{
		ID:     id,
		Switch: "hlab-" + id + "-sw",
		Uplink: "hl" + id,
		path:   filepath.Join(stateDir, recordName),
	}
}

// loadRecord reads a lab's record; it returns nil, nil when there is none.
func loadRecord(stateDir string) (*record, error) {
	path := filepath.Join(stateDir, recordName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read lab record: %w", err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("lab record %s: %w", path, err)
	}
	// The names come back from a file anyone with the state dir could
	// edit, and go to ip(8) and kill(2): accept only the lab's own.
	want := labID(stateDir)
	if r.ID != want || r.Switch != "hlab-"+want+"-sw" || r.Uplink != "hl"+want {
		return nil, fmt.Errorf("lab record %s: id %q does not belong to this state dir (want %s)", path, r.ID, want)
	}
	r.path = path
	return &r, nil
}

func (r *record) save() error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(r.path, append(data, '\n'), 0o600)
}

// dir is the lab's state directory.
func (r *record) dir() string { return filepath.Dir(r.path) }

// Paths in the state directory.
func (r *record) vmsDir() string      { return filepath.Join(r.dir(), "vms") }
func (r *record) imagesDir() string   { return filepath.Join(r.dir(), "images") }
func (r *record) logsDir() string     { return filepath.Join(r.dir(), "logs") }
func (r *record) credsDir() string    { return filepath.Join(r.dir(), "credentials") }
func (r *record) vcenterFile() string { return filepath.Join(r.credsDir(), "vcenter.json") }

// controllerDir is the lab controller's data directory; admin.conf in it
// is harmonyctl's configuration.
func (r *record) controllerDir() string { return filepath.Join(r.dir(), "controller") }

// vmDir is a VM's directory: its body's state is in vmDir/body, its
// guestinfo socket in vmDir/guestinfo.
func (r *record) vmDir(name string) string { return filepath.Join(r.vmsDir(), name) }

// bodyDirName is the body's state directory under a VM's directory.
const bodyDirName = "body"

// vmNetns is a VM body's network namespace.
func vmNetns(id, name string) string { return "hlab-" + id + "-" + name }

// vmLink is the switch's end of a VM's link: at most 15 bytes, whatever
// the VM's name.
func vmLink(id, name string) string {
	sum := sha256.Sum256([]byte(name))
	return "h" + id + hex.EncodeToString(sum[:4])
}
