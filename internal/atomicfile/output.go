package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Stdout is the output path that means standard output.
const Stdout = "-"

// maxSymlinks bounds the links followed to a dangling link's target, as the
// kernel's own limit does.
const maxSymlinks = 40

// WriteOutput writes data to path, an output path a user named (an -o
// flag), without ever damaging what the path names. Atomic replacement is
// for regular files only; the rules are:
//
//   - "-" (Stdout) is standard output: data is written to stdout, or to
//     os.Stdout if stdout is nil.
//   - A symlink is followed to its final target and the rules below apply
//     to the target; the link itself is never replaced. A dangling link's
//     target is created.
//   - A character or block device or a fifo (/dev/null, a terminal, a pipe
//     behind /dev/stdout) is opened for writing and written into, as a
//     shell redirection would: never created, truncated, renamed over,
//     chmodded or chowned. perm does not apply. A fifo blocks until it has
//     a reader.
//   - A socket cannot be opened, and a directory cannot be written: both are
//     refused with an error naming the path.
//   - A regular file or a missing path is replaced atomically, as by Write:
//     it ends with data and with mode perm whatever its mode was before, and
//     owned by the writer. Other hard links to an existing file keep the old
//     content.
//
// Errors name path.
func WriteOutput(path string, stdout io.Writer, data []byte, perm os.FileMode) error {
	return WriteOutputFunc(path, stdout, perm, writeBytes(data))
}

// WriteOutputFunc is WriteOutput for content too large to hold in memory,
// such as a backup: write is called once with a buffered writer to the
// destination, and its error is returned wrapped with the path. If write
// fails, a regular file at path is left as it was and no new file is
// created, but a device, fifo or standard output may have received part of
// the content.
func WriteOutputFunc(path string, stdout io.Writer, perm os.FileMode, write func(w io.Writer) error) error {
	body := bufferedBody(write)
	d, err := resolveOutput(path)
	if err != nil {
		return err
	}
	switch d.kind {
	case toStdout:
		if stdout == nil {
			stdout = os.Stdout
		}
		if err := body(stdout); err != nil {
			return fmt.Errorf("write standard output: %w", err)
		}
		return nil
	case into:
		return writeInto(path, body)
	}
	err = replace(d.target, perm, body, nil)
	if err != nil && d.target != path {
		return fmt.Errorf("%s is a symlink to %s: %w", path, d.target, err)
	}
	return err
}

// CheckOutput returns the error that WriteOutput would return for path
// before writing anything: a directory, a socket, a symlink that cannot be
// followed, a new file in a missing directory. A command that must do
// something first that cannot be undone, such as issue a one-time token,
// checks its output path with it so as not to fail afterwards. It does not
// open a device or fifo, and cannot foresee a full disk or a race.
func CheckOutput(path string) error {
	d, err := resolveOutput(path)
	if err != nil || d.kind != replaced {
		return err
	}
	dir := filepath.Dir(d.target)
	info, err := os.Stat(dir)
	if err == nil && !info.IsDir() {
		err = fmt.Errorf("%s: not a directory", dir)
	}
	if err != nil {
		if d.target != path {
			return fmt.Errorf("%s is a symlink to %s: write %s: %w", path, d.target, d.target, err)
		}
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// outputKind is how WriteOutput writes to a destination.
type outputKind int

const (
	toStdout outputKind = iota
	replaced            // atomic replacement of a regular file, or creation
	into                // written into in place: a device or fifo
)

// output is where WriteOutput writes.
type output struct {
	kind   outputKind
	target string // for replaced: the path to rename onto, a link's target
}

// resolveOutput applies WriteOutput's rules to path, refusing what it must.
func resolveOutput(path string) (output, error) {
	switch path {
	case "":
		return output{}, errors.New("write: empty output path")
	case Stdout:
		return output{kind: toStdout}, nil
	}
	link, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return output{kind: replaced, target: path}, nil
	}
	if err != nil {
		return output{}, fmt.Errorf("write %s: %w", path, err)
	}
	if link.Mode()&fs.ModeSymlink == 0 {
		return classify(path, link)
	}

	// A symlink. The kernel follows it to classify the target: that works
	// for /proc/self/fd/N links to pipes and terminals too, which have no
	// path that filepath.EvalSymlinks could find.
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		target, err := danglingTarget(path)
		if err != nil {
			return output{}, fmt.Errorf("write %s: %w", path, err)
		}
		return output{kind: replaced, target: target}, nil
	case err != nil:
		return output{}, fmt.Errorf("write %s: %w", path, err)
	case !info.Mode().IsRegular():
		// A device or fifo is opened through the link itself, so that the
		// kernel reaches it; a directory or socket is refused.
		return classify(path, info)
	}
	// A regular file is replaced by rename, so that needs its real path.
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return output{}, fmt.Errorf("write %s: %w", path, err)
	}
	if tinfo, err := os.Stat(target); err != nil || !os.SameFile(info, tinfo) {
		// e.g. a /proc/self/fd/N link to a deleted file.
		return output{}, fmt.Errorf("write %s: symlink to a file that has no path of its own", path)
	}
	return output{kind: replaced, target: target}, nil
}

// classify applies the rules to an existing file that is not a symlink.
func classify(path string, info fs.FileInfo) (output, error) {
	switch mode := info.Mode(); {
	case mode.IsRegular():
		return output{kind: replaced, target: path}, nil
	case mode.IsDir():
		return output{}, fmt.Errorf("write %s: is a directory; name a file", path)
	case mode&fs.ModeSocket != 0:
		// open(2) fails on a socket with ENXIO; say why in words.
		return output{}, fmt.Errorf("write %s: is a socket, which cannot be opened as a file; use - for standard output", path)
	case mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe) != 0:
		return output{kind: into}, nil
	default:
		return output{}, fmt.Errorf("write %s: unsupported file type %v", path, mode.Type())
	}
}

// writeInto writes into an existing device or fifo. No O_CREATE: nothing
// must be made at a path that was a device a moment ago; no O_TRUNC, which
// a device may act on; O_NOCTTY so that a terminal does not become this
// process's controlling terminal.
func writeInto(path string, body func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// The path was a device or fifo when it was looked at; if it has become
	// a regular file or a directory since, do not write into it in place.
	if info, err := f.Stat(); err != nil || info.Mode().IsRegular() || info.IsDir() {
		f.Close()
		return fmt.Errorf("write %s: changed while being opened", path)
	}
	if err := body(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// danglingTarget follows the symlink at path, link by link, to the missing
// path it ends at. filepath.EvalSymlinks cannot: it fails on the missing
// last target.
func danglingTarget(path string) (string, error) {
	p := path
	for range maxSymlinks {
		info, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return p, nil
		}
		if err != nil {
			return "", err
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			return "", fmt.Errorf("%s appeared while the symlink was followed", p)
		}
		dest, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(dest) {
			// Relative to the link's real directory: a lexical join would
			// get "dir/../x" wrong when dir is itself a symlink.
			dir, err := filepath.EvalSymlinks(filepath.Dir(p))
			if err != nil {
				return "", err
			}
			dest = filepath.Join(dir, dest)
		}
		p = dest
	}
	return "", fmt.Errorf("more than %d levels of symbolic links", maxSymlinks)
}
