#!/usr/bin/env bash
# Builds the container images Kubernetes' own tests use, which no registry
# here can serve, and packs each as an OCI archive under the name and tag
# the pinned module's e2e image manifest (test/utils/image/manifest.go)
# gives it:
#
#   agnhost.tar  registry.k8s.io/e2e-test-images/agnhost:<its VERSION file>
#                agnhost built from tools/kubernetes's k8s.io/kubernetes, on
#                Debian's static busybox (the small tools) with the tools
#                upstream's Dockerfile adds to Alpine, from Debian: dig, getent,
#                curl, OpenBSD netcat, iproute2, iperf and bash (sh, as
#                Alpine's ash passes on environment variables whose names
#                are not shell names), their libraries, and the user and
#                group it defines (user-defined-in-image, 1000;
#                group-defined-in-image, 50000). Not its CoreDNS 1.6.2.
#                The resolved package versions go into agnhost.debs
#   jessie-dnsutils.tar  registry.k8s.io/e2e-test-images/jessie-dnsutils:<tag>
#                Debian bookworm's dig (bind9-dnsutils), getent and dash
#                (sh, as in Debian) with their library closure, and
#                busybox's small tools: what the DNS specs' probe runs
#                (upstream's is Debian jessie)
#   busybox.tar  registry.k8s.io/e2e-test-images/busybox:<manifest's tag>
#                busybox 1.35.0 built static with its defconfig from the
#                upstream source in Debian's source package (the orig
#                tarball, pinned by its SHA-256) without Debian's patches:
#                one of them makes ash drop environment variables whose
#                names are not shell names (data-1), which the EnvFrom
#                specs print with `sh -c env`; and the specs match ash's
#                own error messages, so sh must be busybox's ash. Every
#                applet linked in /bin, as upstream's image has them; /tmp
#
#   scripts/build-test-images.sh          build if needed, print the directory
#   scripts/build-test-images.sh --dir    print the directory only
#
# The tests and make conformance load these into the lab's nodes (ctr
# images import); the node image does not carry them. Cached under
# $HARMONY_CACHE/test-images/<n>; each archive is rebuilt when its inputs
# change (an .inputs file beside it).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" GOWORK=off
CACHE=${HARMONY_CACHE:-$HOME/.cache/harmony}
N=$(scripts/build-kubernetes.sh --version)
DIR=$CACHE/test-images/$N
# Debian's busybox-static, pinned; apt-get download fetches it.
BUSYBOX_DEB=busybox-static=1:1.35.0-4+deb12u1+b1
# The busybox image's: upstream's source, from Debian's source package.
BUSYBOX_SRC_VERSION=1.35.0
BUSYBOX_SRC_URL=http://deb.debian.org/debian/pool/main/b/busybox/busybox_$BUSYBOX_SRC_VERSION.orig.tar.bz2
BUSYBOX_SRC_SHA256=faeeb244c35a348a334f4a59e44626ee870fb07b6884d68c10ae8bc19f83a694
# The tools the e2e tests run in agnhost beyond busybox's, from Debian
# with their dependency closure as this machine's apt resolves it.
AGNHOST_DEBS=(bind9-dnsutils libc-bin curl netcat-openbsd iproute2 iperf bash)
DNSUTILS_DEBS=(bind9-dnsutils libc-bin dash)
case "${1:-}" in
  --dir) echo "$DIR"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--dir]" >&2; exit 2 ;;
esac
log() { echo "build-test-images: $*" >&2; }

K8S_SRC=$(scripts/build-kubernetes.sh --source)
MANIFEST=$K8S_SRC/test/utils/image/manifest.go
tag() { # image name in the manifest
  local t
  t=$(grep -oE "\"$1\", \"[^\"]+\"" "$MANIFEST" | head -1 | sed -E 's/.*, "(.*)"/\1/')
  [ -n "$t" ] || { log "$MANIFEST names no $1 image"; exit 1; }
  echo "$t"
}
AGNHOST_TAG=$(tag agnhost)
[ "$AGNHOST_TAG" = "$(cat "$K8S_SRC/test/images/agnhost/VERSION")" ] || {
  log "the manifest's agnhost $AGNHOST_TAG is not test/images/agnhost/VERSION"; exit 1; }
BUSYBOX_TAG=$(tag busybox)
DNSUTILS_TAG=$(tag jessie-dnsutils)

mkdir -p "$DIR"
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
OCIPACK=$CACHE/tools/ocipack
go build -trimpath -o "$OCIPACK" ./images/ocipack
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0}
inputs_of() { sha256sum scripts/build-test-images.sh images/ocipack/main.go tools/kubernetes/go.sum | sha256sum | cut -c1-16; }
INPUTS=$(inputs_of)
fresh() { [ -f "$DIR/$1.tar" ] && [ "$(cat "$DIR/$1.inputs" 2>/dev/null)" = "$INPUTS" ]; }
if fresh agnhost && fresh busybox && fresh jessie-dnsutils; then
  log "$DIR is up to date"
  echo "$DIR"
  exit 0
fi

# apt's package lists: a machine whose packages were all installed long
# ago may have none.
if ! apt-cache show "${BUSYBOX_DEB%%=*}" >/dev/null 2>&1; then
  log "apt has no package lists; apt-get update"
  apt-get update -q >&2
fi

apt_download() { # dir packages...
  local dir=$1
  shift
  mkdir -p "$dir"
  (cd "$dir" && apt-get download -q -o APT::Sandbox::User=root "$@" >&2)
}

# busybox: the binary and one link per applet, as the applet list names it.
log "fetching $BUSYBOX_DEB"
apt_download "$tmp/busybox-deb" "$BUSYBOX_DEB"
dpkg-deb -x "$tmp"/busybox-deb/busybox-static_*.deb "$tmp/busybox-root"
BUSYBOX=$tmp/busybox-root/bin/busybox
busybox_args() { # root: links for the applets the tree at root does not hold
  local root=$1 applet
  printf "%s\n" -file "$BUSYBOX:/bin/busybox"
  while read -r applet; do
    [ "$applet" = bin/busybox ] || [ -e "$root/$applet" ] || [ -L "$root/$applet" ] || printf "%s\n" -link "/$applet=/bin/busybox"
  done < <("$BUSYBOX" --list-full | sort -u)
}
tree_args() { # root: ocipack arguments for every directory, file and link under it
  local root=$1 p rel
  while IFS= read -r -d '' p; do
    rel=${p#"$root"}
    if [ -L "$p" ]; then
      printf "%s\n" -link "$rel=$(readlink "$p")"
    elif [ -d "$p" ]; then
      printf "%s\n" -dir "$rel:$(stat -c %a "$p")"
    else
      printf "%s\n" -file "$p:$rel:$(stat -c %a "$p")"
    fi
  done < <(find "$root" -mindepth 1 -print0 | sort -z)
}

debian_root() { # name root sh packages...: the packages and their library closure under root, sh linked to the shell named
  local name=$1 root=$2 sh=$3 deb closure
  shift 3
  mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "$@" | grep -v -e '^ ' -e '^<' | sort -u)
  log "fetching $* and their libraries (${#closure[@]} packages) for $name"
  apt_download "$tmp/$name-debs" "${closure[@]}"
  for deb in "$tmp/$name-debs"/*.deb; do
    dpkg-deb -x "$deb" "$root"
    dpkg-deb -f "$deb" Package Version | sed 's/^[A-Za-z]*: //' | paste -sd' '
  done > "$DIR/.$name.debs"
  # No docs. sh is never busybox's: Debian's static busybox prefers its
  # own applets to PATH, so its ash would run busybox's tools over
  # Debian's (its nc has no -v).
  rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/lintian" "$root/usr/share/locale"
  ln -sf "$sh" "$root/bin/sh"
}

# The busybox image's busybox, built once per version into the cache
# (about 3 minutes of CPU).
UPSTREAM_BUSYBOX=$CACHE/busybox-upstream/$BUSYBOX_SRC_VERSION/busybox
if [ ! -x "$UPSTREAM_BUSYBOX" ]; then
  log "building busybox $BUSYBOX_SRC_VERSION from upstream's source (Debian's orig tarball)"
  src=$tmp/busybox-src
  mkdir -p "$src"
  curl -fsSL -o "$src/orig.tar.bz2" "$BUSYBOX_SRC_URL"
  echo "$BUSYBOX_SRC_SHA256  $src/orig.tar.bz2" | sha256sum -c --quiet - || {
    log "$BUSYBOX_SRC_URL does not have the pinned SHA-256"; exit 1; }
  tar -xjf "$src/orig.tar.bz2" -C "$src"
  (cd "$src/busybox-$BUSYBOX_SRC_VERSION" &&
    make defconfig >/dev/null &&
    sed -i 's/^# CONFIG_STATIC is not set$/CONFIG_STATIC=y/' .config &&
    grep -qx 'CONFIG_STATIC=y' .config &&
    make -j"$(nproc)" busybox >"$src/build.log" 2>&1) || {
    log "busybox build failed; its log:"; tail -30 "$src/build.log" >&2; exit 1; }
  mkdir -p "$(dirname "$UPSTREAM_BUSYBOX")"
  install -m 0755 "$src/busybox-$BUSYBOX_SRC_VERSION/busybox" "$UPSTREAM_BUSYBOX.tmp"
  mv -f "$UPSTREAM_BUSYBOX.tmp" "$UPSTREAM_BUSYBOX"
fi
mkdir -p "$tmp/busybox-image/tmp" "$tmp/busybox-image/bin"
chmod 1777 "$tmp/busybox-image/tmp"
install -m 0755 "$UPSTREAM_BUSYBOX" "$tmp/busybox-image/bin/busybox"
# As upstream's image: every applet in /bin.
while read -r applet; do
  ln -s busybox "$tmp/busybox-image/bin/$applet"
done < <("$UPSTREAM_BUSYBOX" --list | grep -vx busybox)
mapfile -t busybox_image < <(tree_args "$tmp/busybox-image")
pack() { # name ref args...
  local name=$1 ref=$2
  shift 2
  "$OCIPACK" -ref "$ref" -out "$tmp/$name.tar" "$@" >/dev/null
  mv -f "$tmp/$name.tar" "$DIR/$name.tar"
  echo "$ref" > "$DIR/$name.ref"
  echo "$INPUTS" > "$DIR/$name.inputs"
  log "$ref packed"
}
pack busybox "registry.k8s.io/e2e-test-images/busybox:$BUSYBOX_TAG" "${busybox_image[@]}" -cmd sh

log "building agnhost $AGNHOST_TAG from k8s.io/kubernetes $N (a few minutes cold)"
root=$tmp/agnhost-root
mkdir -p "$root/tmp" "$root/uploads"
chmod 1777 "$root/tmp"
(cd tools/kubernetes && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$root/agnhost" k8s.io/kubernetes/test/images/agnhost)
ln -s agnhost "$root/agnhost-2"
# porter serves TLS with these, at the root, as upstream's Dockerfile adds them.
cp "$K8S_SRC/test/images/agnhost/porter/localhost.crt" "$K8S_SRC/test/images/agnhost/porter/localhost.key" "$root/"
chmod 0644 "$root/localhost.crt" "$root/localhost.key"
debian_root agnhost "$root" bash "${AGNHOST_DEBS[@]}"
# The user and group upstream's Dockerfile adds (adduser on Alpine).
mkdir -p "$root/etc"
printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin' \
  'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' > "$root/etc/passwd"
printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' 'user-defined-in-image:x:1000:' \
  'group-defined-in-image:x:50000:user-defined-in-image' > "$root/etc/group"
chmod 0644 "$root/etc/passwd" "$root/etc/group"
# The nc alternative, which netcat-openbsd's script would make.
ln -sf /bin/nc.openbsd "$root/usr/bin/nc"
mapfile -t agnhost_image < <(tree_args "$root"; busybox_args "$root")
# As upstream's: /agnhost with pause as the default.
pack agnhost "registry.k8s.io/e2e-test-images/agnhost:$AGNHOST_TAG" "${agnhost_image[@]}" -entrypoint /agnhost -cmd pause
mv -f "$DIR/.agnhost.debs" "$DIR/agnhost.debs"

droot=$tmp/dnsutils-root
mkdir -p "$droot/tmp" "$droot/results"
chmod 1777 "$droot/tmp"
debian_root jessie-dnsutils "$droot" dash "${DNSUTILS_DEBS[@]}"
mapfile -t dnsutils_image < <(tree_args "$droot"; busybox_args "$droot")
pack jessie-dnsutils "registry.k8s.io/e2e-test-images/jessie-dnsutils:$DNSUTILS_TAG" "${dnsutils_image[@]}" -cmd sh
mv -f "$DIR/.jessie-dnsutils.debs" "$DIR/jessie-dnsutils.debs"
echo "$DIR"
