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
	Hosts  []hostRecord `json:"hosts"`
	Procs  []procRecord `json:"procs"`
	// The binaries, so that a host's agent can be started again.
	BinDir           string `json:"binDir"`
	KubernetesBinDir string `json:"kubernetesBinDir"`

	path string
}

type hostRecord struct {
	Name  string `json:"name"`
	Netns string `json:"netns"`
	IP    string `json:"ip"`
	Role  string `json:"role"`
	Root  string `json:"root"`
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
	for i, h := range r.Hosts {
		if h.Netns != hostNetns(want, h.Name) {
			return nil, fmt.Errorf("lab record %s: hosts[%d].netns %q is not this lab's", path, i, h.Netns)
		}
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

func hostNetns(id, name string) string { return "hlab-" + id + "-" + name }

// hostLink is the switch's end of a host's link.
func hostLink(id, name string) string { return "h" + id + name }
