package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Every path these tests write lives in t.TempDir(): a test pointed at the
// real /dev/null once replaced it with a regular file.

// nullDevice makes a null device (major 1, minor 3, like /dev/null) in a
// temporary directory. It needs root; the test is skipped without.
func nullDevice(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("mknod needs root: %v", err)
		}
		t.Fatal(err)
	}
	return path
}

// devState is what must not change about a device node.
type devState struct {
	mode os.FileMode
	rdev uint64
	ino  uint64
	uid  uint32
}

func statDev(t *testing.T, path string) devState {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return devState{mode: info.Mode(), rdev: st.Rdev, ino: st.Ino, uid: st.Uid}
}

func checkDevice(t *testing.T, path string, before devState) {
	t.Helper()
	after := statDev(t, path)
	if after.mode&fs.ModeCharDevice == 0 {
		t.Fatalf("%s is no longer a character device: mode %v", path, after.mode)
	}
	if after != before {
		t.Fatalf("%s changed: before %+v, after %+v", path, before, after)
	}
}

func checkFile(t *testing.T, path string, want []byte, perm os.FileMode) {
	t.Helper()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm() != perm {
		t.Errorf("%s: mode %v, want a regular file with %v", path, info.Mode(), perm)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s holds %q, want %q", path, got, want)
	}
}

func checkLink(t *testing.T, path, want string) {
	t.Helper()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("%s is no longer a symlink: mode %v", path, info.Mode())
	}
	if got, _ := os.Readlink(path); got != want {
		t.Fatalf("%s points to %q, want %q", path, got, want)
	}
}

// noTemporaries checks that no temporary file was left in dir.
func noTemporaries(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left in %s", e.Name(), dir)
		}
	}
}

var secret = []byte(`{"token":"secret"}` + "\n")

func TestWriteOutputCharDevice(t *testing.T) {
	dir := t.TempDir()
	dev := nullDevice(t, dir, "null")
	before := statDev(t, dev)
	if err := CheckOutput(dev); err != nil {
		t.Fatal(err)
	}
	if err := WriteOutput(dev, nil, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	checkDevice(t, dev, before)
	noTemporaries(t, dir)
}

func TestWriteOutputFifo(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.Lstat(fifo)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		f, err := os.Open(fifo) // blocks until the writer opens
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		defer f.Close()
		data, err := io.ReadAll(f)
		if err != nil {
			t.Error(err)
		}
		got <- data
	}()
	if err := WriteOutput(fifo, nil, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case data := <-got:
		if !bytes.Equal(data, secret) {
			t.Errorf("reader got %q, want %q", data, secret)
		}
	case <-time.After(10 * time.Second):
		// The fifo was replaced under the reader, which waits on it still.
		t.Fatal("the reader got nothing")
	}
	info, err := os.Lstat(fifo)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode()&fs.ModeNamedPipe == 0 || info.Mode() != before.Mode() || !os.SameFile(info, before) {
		t.Errorf("fifo %v became %v", before.Mode(), info.Mode())
	}
	noTemporaries(t, dir)
}

func TestWriteOutputSymlinkToFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.json")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(target, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	// A chain of two links, the first relative.
	mid := filepath.Join(dir, "mid")
	if err := os.Symlink(target, mid); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "out.json")
	if err := os.Symlink("mid", link); err != nil {
		t.Fatal(err)
	}
	if err := WriteOutput(link, nil, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	checkLink(t, link, "mid")
	checkLink(t, mid, target)
	checkFile(t, target, secret, 0o600)
	noTemporaries(t, dir)
}

func TestWriteOutputSymlinkToDevice(t *testing.T) {
	dir := t.TempDir()
	dev := nullDevice(t, dir, "null")
	before := statDev(t, dev)
	link := filepath.Join(dir, "stdout")
	if err := os.Symlink(dev, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteOutput(link, nil, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	checkLink(t, link, dev)
	checkDevice(t, dev, before)
	noTemporaries(t, dir)
}

// /dev/stdout is a symlink to /proc/self/fd/1, whose target, a pipe, has no
// path: the kernel, not filepath.EvalSymlinks, must follow it. The link is
// in the temporary directory and the pipe is the test's own.
func TestWriteOutputSymlinkToPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	dir := t.TempDir()
	link := filepath.Join(dir, "stdout")
	fdPath := "/proc/self/fd/" + strconv.Itoa(int(w.Fd()))
	if err := os.Symlink(fdPath, link); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, len(secret))
		_, err := io.ReadFull(r, buf)
		if err != nil {
			t.Error(err)
		}
		got <- buf
	}()
	if err := WriteOutput(link, nil, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	w.Close()
	select {
	case data := <-got:
		if !bytes.Equal(data, secret) {
			t.Errorf("pipe got %q, want %q", data, secret)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pipe got nothing")
	}
	checkLink(t, link, fdPath)
}

func TestWriteOutputDanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	// link -> sub/mid -> ../new.json, relative to sub/: dir/new.json.
	link := filepath.Join(dir, "out.json")
	if err := os.Symlink("sub/mid", link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../new.json", filepath.Join(dir, "sub", "mid")); err != nil {
		t.Fatal(err)
	}
	if err := CheckOutput(link); err != nil {
		t.Fatal(err)
	}
	if err := WriteOutput(link, nil, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	checkLink(t, link, "sub/mid")
	checkLink(t, filepath.Join(dir, "sub", "mid"), "../new.json")
	checkFile(t, filepath.Join(dir, "new.json"), secret, 0o600)
	noTemporaries(t, dir)

	// A dangling link into a missing directory is refused, by CheckOutput
	// too, naming the link.
	bad := filepath.Join(dir, "bad")
	if err := os.Symlink("nodir/x", bad); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{CheckOutput(bad), WriteOutput(bad, nil, secret, 0o600)} {
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("dangling link into a missing directory: %v", err)
		}
	}
	checkLink(t, bad, "nodir/x")
}

func TestWriteOutputDirectory(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "keep"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{target, link} {
		for name, err := range map[string]error{
			"CheckOutput": CheckOutput(path),
			"WriteOutput": WriteOutput(path, nil, secret, 0o600),
		} {
			if err == nil {
				t.Fatalf("%s(%s): a directory was accepted", name, path)
			}
			if want := "write " + path + ": is a directory"; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("%s(%s) = %q, want it to start %q", name, path, err, want)
			}
		}
	}
	checkLink(t, link, target)
	info, err := os.Lstat(target)
	if err != nil {
		t.Fatal(err)
	}
	if !info.IsDir() || info.Mode().Perm() != 0o750 {
		t.Errorf("directory became %v", info.Mode())
	}
	entries, _ := os.ReadDir(target)
	if len(entries) != 1 || entries[0].Name() != "keep" {
		t.Errorf("directory holds %v", entries)
	}
	if data, _ := os.ReadFile(filepath.Join(target, "keep")); string(data) != "keep" {
		t.Errorf("keep holds %q", data)
	}
	noTemporaries(t, dir)
}

func TestWriteOutputSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, err := range []error{CheckOutput(path), WriteOutput(path, nil, secret, 0o600)} {
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "socket") {
			t.Errorf("socket: %v", err)
		}
	}
	info, err := os.Lstat(path)
	if err != nil || info.Mode()&fs.ModeSocket == 0 {
		t.Fatalf("socket became %v (%v)", info, err)
	}
}

func TestWriteOutputRegularFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.json")
	if err := os.WriteFile(path, []byte("old content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	// A reader that has the old file open keeps seeing the old content: the
	// file is replaced, not rewritten in place.
	old, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := WriteOutput(path, nil, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path, secret, 0o600)
	if data, _ := io.ReadAll(old); string(data) != "old content" {
		t.Errorf("the old file was rewritten in place: it holds %q", data)
	}
	noTemporaries(t, dir)

	// A missing file is created with perm exactly, whatever the umask.
	fresh := filepath.Join(dir, "fresh.json")
	if err := WriteOutput(fresh, nil, secret, 0o640); err != nil {
		t.Fatal(err)
	}
	checkFile(t, fresh, secret, 0o640)
}

func TestWriteOutputStdout(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // so that a file named "-" would show here
	var stdout bytes.Buffer
	if err := CheckOutput(Stdout); err != nil {
		t.Fatal(err)
	}
	if err := WriteOutput(Stdout, &stdout, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stdout.Bytes(), secret) {
		t.Errorf("stdout got %q, want %q", stdout.Bytes(), secret)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files were created: %v", entries)
	}
	if err := WriteOutput("", &stdout, secret, 0o600); err == nil {
		t.Error("an empty path was accepted")
	}
}

func TestWriteOutputFunc(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // so that a file named "-" would land here, not in the source
	path := filepath.Join(dir, "backup.tar")
	// Many small writes, as an archive writer makes.
	chunk := bytes.Repeat([]byte("x"), 1000)
	const chunks = 10_000
	err := WriteOutputFunc(path, nil, 0o600, func(w io.Writer) error {
		for range chunks {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() != chunks*int64(len(chunk)) || info.Mode().Perm() != 0o600 {
		t.Errorf("size %d mode %v", info.Size(), info.Mode())
	}

	// A failed write leaves the old file whole and no temporary behind.
	failure := errors.New("snapshot failed")
	err = WriteOutputFunc(path, nil, 0o600, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return failure
	})
	if !errors.Is(err, failure) || !strings.Contains(err.Error(), path) {
		t.Errorf("err = %v, want the body's error with the path", err)
	}
	if info2, _ := os.Stat(path); !os.SameFile(info, info2) {
		t.Error("a failed write replaced the file")
	}
	noTemporaries(t, dir)

	// Into a device, streaming too.
	dev := nullDevice(t, dir, "null")
	before := statDev(t, dev)
	err = WriteOutputFunc(dev, nil, 0o600, func(w io.Writer) error {
		_, err := w.Write(chunk)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	checkDevice(t, dev, before)

	var stdout bytes.Buffer
	if err := WriteOutputFunc(Stdout, &stdout, 0o600, func(w io.Writer) error {
		_, err := w.Write(chunk)
		return err
	}); err != nil || !bytes.Equal(stdout.Bytes(), chunk) {
		t.Errorf("stdout: %v, %d bytes", err, stdout.Len())
	}
}

// Write, for the program's own state files, replaces a symlink rather than
// following it, unlike WriteOutput.
func TestWriteReplacesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("target"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "state")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Write(link, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	checkFile(t, link, secret, 0o600)
	if data, _ := os.ReadFile(target); string(data) != "target" {
		t.Errorf("the link's target was written: %q", data)
	}
	refused := errors.New("refused")
	if err := WriteChecked(link, []byte("bad"), 0o600, func(string) error { return refused }); err != refused {
		t.Errorf("WriteChecked = %v, want the check's error as it is", err)
	}
	checkFile(t, link, secret, 0o600)
	noTemporaries(t, dir)
}
