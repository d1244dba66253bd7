// Command ocipack packs binaries into a container image, as an OCI image
// layout in one tar (an "OCI archive") that `ctr images import` reads with
// its reference. The output depends only on the inputs and
// SOURCE_DATE_EPOCH: layers have fixed owners and mtimes, and the config's
// creation time is the epoch.
//
// No registry is reachable where Harmony images are built, so the node
// image's container images (kube-apiserver and friends, CoreDNS, pause)
// are made from binaries built here:
//
//	ocipack -ref registry.k8s.io/pause:3.10.1 -file pause:/pause -entrypoint /pause -user 65535:65535 -out pause.tar
//
// It prints each image's manifest digest, one a line, -ref's first, then
// each -also's, which names another image of the same layer with its own
// entrypoint: -also registry.k8s.io/kube-scheduler:v1.34.2=/usr/local/bin/kube-scheduler.
//
// Files are owned by root. An image that runs as a non-root user and must
// bind a low port (CoreDNS on 53) gets the file capability upstream's image
// sets with setcap: -cap /coredns=cap_net_bind_service.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is one image, or several that differ only in their reference and
// entrypoint (Also) and share the one layer: the control plane's three
// images, each running its own name of one multi-call binary.
type Spec struct {
	Ref   string
	Also  []Variant
	Files []File
	// Links are symbolic links, such as busybox's applets.
	Links []Link
	// Dirs are empty directories, such as /tmp.
	Dirs       []Dir
	Entrypoint []string
	Cmd        []string
	User       string
	Env        []string
	Created    time.Time
}

// Variant is another image of the same layer.
type Variant struct {
	Ref        string
	Entrypoint []string
}

// File is one file in the image's single layer.
type File struct {
	Source string // on this machine
	Path   string // absolute, in the image
	Mode   int64
	// Caps are file capabilities (permitted and effective), stored as the
	// security.capability extended attribute, which containerd sets when
	// it unpacks the layer.
	Caps []string
}

// Link is a symbolic link in the layer.
type Link struct {
	Path   string // absolute, in the image
	Target string
}

// Dir is a directory in the layer, with its mode.
type Dir struct {
	Path string
	Mode int64
}

// capabilityBits are the capabilities -cap accepts, by their number in
// linux/capability.h.
var capabilityBits = map[string]uint{
	"cap_chown":            0,
	"cap_net_bind_service": 10,
	"cap_net_admin":        12,
	"cap_net_raw":          13,
	"cap_sys_admin":        21,
}

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func main() {
	var (
		spec       Spec
		out        string
		files      multiFlag
		env        multiFlag
		caps       multiFlag
		links      multiFlag
		dirs       multiFlag
		also       multiFlag
		entrypoint string
		cmd        string
	)
	flag.StringVar(&spec.Ref, "ref", "", "image reference, e.g. registry.k8s.io/pause:3.10.1")
	flag.Var(&files, "file", "SOURCE:PATH[:MODE] to put in the image (repeatable; MODE octal, default 0755)")
	flag.StringVar(&entrypoint, "entrypoint", "", "entrypoint, comma-separated")
	flag.Var(&also, "also", "REF=ENTRYPOINT another image of the same layer (repeatable; ENTRYPOINT comma-separated)")
	flag.StringVar(&cmd, "cmd", "", "default arguments (the image's CMD), comma-separated")
	flag.Var(&links, "link", "PATH=TARGET symbolic link (repeatable)")
	flag.Var(&dirs, "dir", "PATH[:MODE] empty directory (repeatable; MODE octal, default 0755)")
	flag.StringVar(&spec.User, "user", "", "user the image runs as (default root)")
	flag.Var(&env, "env", "KEY=VALUE (repeatable; PATH is set by default)")
	flag.Var(&caps, "cap", "PATH=cap_name[,cap_name] file capabilities for a -file PATH (repeatable)")
	flag.StringVar(&out, "out", "", "the OCI archive to write")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := func() error {
		epoch, err := sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
		if err != nil {
			return err
		}
		spec.Created = epoch
		for _, f := range files {
			file, err := parseFile(f)
			if err != nil {
				return err
			}
			spec.Files = append(spec.Files, file)
		}
		if err := applyCaps(spec.Files, caps); err != nil {
			return err
		}
		for _, l := range links {
			p, target, ok := strings.Cut(l, "=")
			if !ok || !cleanAbs(p) || target == "" {
				return fmt.Errorf("-link %q: want /ABSOLUTE/PATH=TARGET", l)
			}
			spec.Links = append(spec.Links, Link{Path: p, Target: target})
		}
		for _, d := range dirs {
			p, m, hasMode := strings.Cut(d, ":")
			dir := Dir{Path: p, Mode: 0o755}
			if hasMode {
				mode, err := strconv.ParseInt(m, 8, 32)
				if err != nil || mode < 0 || mode > 0o7777 {
					return fmt.Errorf("-dir %q: mode %q: want octal such as 1777", d, m)
				}
				dir.Mode = mode
			}
			if !cleanAbs(p) {
				return fmt.Errorf("-dir %q: want /ABSOLUTE/PATH[:MODE]", d)
			}
			spec.Dirs = append(spec.Dirs, dir)
		}
		if cmd != "" {
			spec.Cmd = strings.Split(cmd, ",")
		}
		if entrypoint != "" {
			spec.Entrypoint = strings.Split(entrypoint, ",")
		}
		for _, a := range also {
			v, err := parseVariant(a)
			if err != nil {
				return err
			}
			spec.Also = append(spec.Also, v)
		}
		spec.Env = append([]string{defaultPath}, env...)
		if out == "" {
			return errors.New("-out: required")
		}
		digests, err := Write(ctx, spec, out)
		if err != nil {
			return err
		}
		fmt.Println(strings.Join(digests, "\n"))
		return nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ocipack:", err)
		os.Exit(1)
	}
}

// Write builds the images and writes them to out (through a temporary
// file renamed into place), returning their manifest digests, Ref's first.
func Write(ctx context.Context, spec Spec, out string) ([]string, error) {
	images, err := Build(spec)
	if err != nil {
		return nil, err
	}
	digests := make([]string, len(images))
	for i, img := range images {
		d, err := img.Digest()
		if err != nil {
			return nil, fmt.Errorf("%s: digest: %w", img.ref, err)
		}
		digests[i] = d.String()
	}
	tmp, err := os.CreateTemp(path.Dir(out), ".ocipack-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := writeArchive(ctx, tmp, images); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("%s: %w", out, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return nil, err
	}
	return digests, nil
}

// named is an image with its reference.
type named struct {
	v1.Image
	ref name.Tag
}

// Build makes the images: one layer holding the files, and for each image
// a config with its entrypoint and the spec's user and environment.
func Build(spec Spec) ([]named, error) {
	variants := append([]Variant{{Ref: spec.Ref, Entrypoint: spec.Entrypoint}}, spec.Also...)
	refs := make([]name.Tag, len(variants))
	for i, v := range variants {
		ref, err := name.NewTag(v.Ref, name.StrictValidation)
		if err != nil {
			return nil, fmt.Errorf("ref %q: want registry/name:tag: %w", v.Ref, err)
		}
		if slices.ContainsFunc(refs[:i], func(r name.Tag) bool { return r.Name() == ref.Name() }) {
			return nil, fmt.Errorf("ref %q: given twice", v.Ref)
		}
		refs[i] = ref
	}
	if len(spec.Files) == 0 {
		return nil, errors.New("files: none given")
	}
	layerTar, err := layerBytes(spec, spec.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	withLayer, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	out := make([]named, len(variants))
	for i, v := range variants {
		cfg, err := withLayer.ConfigFile()
		if err != nil {
			return nil, err
		}
		cfg = cfg.DeepCopy()
		cfg.Architecture, cfg.OS = "amd64", "linux"
		cfg.Created = v1.Time{Time: spec.Created}
		cfg.Config.Entrypoint = v.Entrypoint
		cfg.Config.Cmd = spec.Cmd
		cfg.Config.User = spec.User
		cfg.Config.Env = spec.Env
		cfg.History = []v1.History{{Created: v1.Time{Time: spec.Created}, CreatedBy: "harmony ocipack", Comment: v.Ref}}
		img, err := mutate.ConfigFile(withLayer, cfg)
		if err != nil {
			return nil, err
		}
		out[i] = named{Image: img, ref: refs[i]}
	}
	return out, nil
}

// layerBytes is the layer's tar: every entry sorted by path after its
// parent directories, owned by root, with the epoch as every time.
func layerBytes(spec Spec, mtime time.Time) ([]byte, error) {
	type entry struct {
		path string
		file *File
		link *Link
		dir  *Dir
	}
	var entries []entry
	for i := range spec.Files {
		entries = append(entries, entry{path: spec.Files[i].Path, file: &spec.Files[i]})
	}
	for i := range spec.Links {
		entries = append(entries, entry{path: spec.Links[i].Path, link: &spec.Links[i]})
	}
	for i := range spec.Dirs {
		entries = append(entries, entry{path: spec.Dirs[i].Path, dir: &spec.Dirs[i]})
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	for i := 1; i < len(entries); i++ {
		if entries[i].path == entries[i-1].path {
			return nil, fmt.Errorf("%s: given twice", entries[i].path)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, e := range entries {
		var parents []string
		for d := path.Dir(e.path); d != "/" && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
			dirs[d] = true
		}
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/",
				Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		name := strings.TrimPrefix(e.path, "/")
		switch {
		case e.link != nil:
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: e.link.Target,
				Mode: 0o777, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		case e.dir != nil:
			if dirs[e.path] {
				return nil, fmt.Errorf("%s: a directory given after what it holds", e.path)
			}
			dirs[e.path] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/",
				Mode: e.dir.Mode, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		default:
			if err := writeFile(tw, e.file, mtime); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeFile(tw *tar.Writer, f *File, mtime time.Time) error {
	data, err := os.ReadFile(f.Source)
	if err != nil {
		return fmt.Errorf("file %s: %w", f.Source, err)
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"),
		Mode: f.Mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}
	if len(f.Caps) > 0 {
		xattr, err := capabilityXattr(f.Caps)
		if err != nil {
			return fmt.Errorf("file %s: %w", f.Path, err)
		}
		hdr.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": string(xattr)}
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = tw.Write(data)
	return err
}

func cleanAbs(p string) bool { return path.IsAbs(p) && path.Clean(p) == p && p != "/" }

func parseFile(s string) (File, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !cleanAbs(parts[1]) {
		return File{}, fmt.Errorf("-file %q: want SOURCE:/ABSOLUTE/PATH[:MODE]", s)
	}
	f := File{Source: parts[0], Path: parts[1], Mode: 0o755}
	if len(parts) == 3 {
		mode, err := strconv.ParseInt(parts[2], 8, 32)
		if err != nil || mode < 0 || mode > 0o7777 {
			return File{}, fmt.Errorf("-file %q: mode %q: want octal such as 0644", s, parts[2])
		}
		f.Mode = mode
	}
	return f, nil
}

func parseVariant(s string) (Variant, error) {
	ref, ep, ok := strings.Cut(s, "=")
	if !ok || ref == "" || !cleanAbs(strings.Split(ep, ",")[0]) {
		return Variant{}, fmt.Errorf("-also %q: want REF=/ABSOLUTE/ENTRYPOINT[,ARG...]", s)
	}
	return Variant{Ref: ref, Entrypoint: strings.Split(ep, ",")}, nil
}

// applyCaps attaches each -cap PATH=caps to the -file with that PATH.
func applyCaps(files []File, caps []string) error {
	for _, c := range caps {
		target, names, ok := strings.Cut(c, "=")
		if !ok || names == "" {
			return fmt.Errorf("-cap %q: want PATH=cap_name[,cap_name]", c)
		}
		i := slices.IndexFunc(files, func(f File) bool { return f.Path == target })
		if i < 0 {
			return fmt.Errorf("-cap %q: no -file puts anything at %s", c, target)
		}
		list := strings.Split(names, ",")
		if _, err := capabilityXattr(list); err != nil {
			return fmt.Errorf("-cap %q: %w", c, err)
		}
		files[i].Caps = append(files[i].Caps, list...)
	}
	return nil
}

// capabilityXattr is the security.capability value `setcap NAMES=+ep`
// writes: struct vfs_cap_data, revision 2, with the effective flag, the
// capabilities in the permitted set and none inheritable.
func capabilityXattr(names []string) ([]byte, error) {
	const revision2, effective = 0x02000000, 0x000001
	var permitted [2]uint32
	for _, n := range names {
		bit, ok := capabilityBits[strings.ToLower(n)]
		if !ok {
			known := make([]string, 0, len(capabilityBits))
			for k := range capabilityBits {
				known = append(known, k)
			}
			sort.Strings(known)
			return nil, fmt.Errorf("capability %q: want one of %s", n, strings.Join(known, ", "))
		}
		permitted[bit/32] |= 1 << (bit % 32)
	}
	out := make([]byte, 20)
	binary.LittleEndian.PutUint32(out[0:], revision2|effective)
	binary.LittleEndian.PutUint32(out[4:], permitted[0]) // inheritable[0] stays 0
	binary.LittleEndian.PutUint32(out[12:], permitted[1])
	return out, nil
}

func sourceDateEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, errors.New("SOURCE_DATE_EPOCH: not set; the image's bytes depend on it")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", v)
	}
	return time.Unix(n, 0).UTC(), nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// writeArchive writes the OCI image layout as one tar: oci-layout,
// index.json (naming each image by its reference, as containerd reads
// it), then the blobs, each once however many images hold it. Every entry
// has the same owner, mode and mtime.
func writeArchive(ctx context.Context, w io.Writer, images []named) error {
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	type blob struct {
		hex  string
		data func() ([]byte, error)
	}
	var blobs []blob
	seen := map[string]bool{}
	addBlob := func(hex string, data func() ([]byte, error)) {
		if !seen[hex] {
			seen[hex] = true
			blobs = append(blobs, blob{hex, data})
		}
	}
	var manifests []blob
	for _, img := range images {
		manifest, err := img.RawManifest()
		if err != nil {
			return err
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		mediaType, err := img.MediaType()
		if err != nil {
			return err
		}
		index.Manifests = append(index.Manifests, v1.Descriptor{
			MediaType: mediaType, Digest: digest, Size: int64(len(manifest)),
			Annotations: map[string]string{
				"io.containerd.image.name":          img.ref.Name(),
				"org.opencontainers.image.ref.name": img.ref.TagStr(),
			},
		})
		configName, err := img.ConfigName()
		if err != nil {
			return err
		}
		addBlob(configName.Hex, img.RawConfigFile)
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		for _, l := range layers {
			d, err := l.Digest()
			if err != nil {
				return err
			}
			addBlob(d.Hex, func() ([]byte, error) {
				rc, err := l.Compressed()
				if err != nil {
					return nil, err
				}
				defer rc.Close()
				return io.ReadAll(rc)
			})
		}
		manifests = append(manifests, blob{digest.Hex, func() ([]byte, error) { return manifest, nil }})
	}
	for _, m := range manifests {
		addBlob(m.hex, m.data)
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	cfg, err := images[0].ConfigFile()
	if err != nil {
		return err
	}
	mtime := cfg.Created.Time
	tw := tar.NewWriter(w)
	put := func(name string, data []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatUSTAR}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put("index.json", indexJSON); err != nil {
		return err
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime, Format: tar.FormatUSTAR}); err != nil {
			return err
		}
	}
	for _, b := range blobs {
		data, err := b.data()
		if err != nil {
			return err
		}
		if err := put("blobs/sha256/"+b.hex, data); err != nil {
			return err
		}
	}
	return tw.Close()
}
