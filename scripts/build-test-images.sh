#!/usr/bin/env bash
# Builds the container images Kubernetes' own tests use, which no registry
# here can serve, and packs each as an OCI archive under the name and tag
# the pinned module's e2e image manifest (test/utils/image/manifest.go)
# gives it:
#
#   agnhost.tar  registry.k8s.io/e2e-test-images/agnhost:<its VERSION file>
#                agnhost built from tools/kubernetes's k8s.io/kubernetes, on
#                Debian's static busybox (sh, nc, wget, nslookup, ...) where
#                upstream's has Alpine with curl and bind-tools
#   busybox.tar  registry.k8s.io/e2e-test-images/busybox:<manifest's tag>
#                Debian's static busybox (1.35 in bookworm; the manifest's
#                tag names 1.37), every applet linked, /tmp
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
case "${1:-}" in
  --dir) echo "$DIR"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--dir]" >&2; exit 2 ;;
esac
log() { echo "build-test-images: $*" >&2; }

K8S_SRC=$(cd tools/kubernetes && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
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

mkdir -p "$DIR"
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
OCIPACK=$CACHE/tools/ocipack
go build -trimpath -o "$OCIPACK" ./images/ocipack
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0}
inputs_of() { sha256sum scripts/build-test-images.sh images/ocipack/main.go tools/kubernetes/go.sum | sha256sum | cut -c1-16; }
INPUTS=$(inputs_of)
fresh() { [ -f "$DIR/$1.tar" ] && [ "$(cat "$DIR/$1.inputs" 2>/dev/null)" = "$INPUTS" ]; }
if fresh agnhost && fresh busybox; then
  log "$DIR is up to date"
  echo "$DIR"
  exit 0
fi

# busybox: the binary and one link per applet, as the applet list names it.
log "fetching $BUSYBOX_DEB"
(cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$BUSYBOX_DEB" >&2)
dpkg-deb -x "$tmp"/busybox-static_*.deb "$tmp/busybox-root"
BUSYBOX=$tmp/busybox-root/bin/busybox
busybox_args=(-file "$BUSYBOX:/bin/busybox" -dir /tmp:1777)
while read -r applet; do
  [ "$applet" = bin/busybox ] || busybox_args+=(-link "/$applet=/bin/busybox")
done < <("$BUSYBOX" --list-full | sort -u)

pack() { # name ref args...
  local name=$1 ref=$2
  shift 2
  "$OCIPACK" -ref "$ref" -out "$tmp/$name.tar" "$@" >/dev/null
  mv -f "$tmp/$name.tar" "$DIR/$name.tar"
  echo "$ref" > "$DIR/$name.ref"
  echo "$INPUTS" > "$DIR/$name.inputs"
  log "$ref packed"
}
pack busybox "registry.k8s.io/e2e-test-images/busybox:$BUSYBOX_TAG" "${busybox_args[@]}" -cmd sh

log "building agnhost $AGNHOST_TAG from k8s.io/kubernetes $N (a few minutes cold)"
(cd tools/kubernetes && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/agnhost" k8s.io/kubernetes/test/images/agnhost)
# As upstream's: /agnhost with pause as the default, and agnhost-2 beside it.
pack agnhost "registry.k8s.io/e2e-test-images/agnhost:$AGNHOST_TAG" "${busybox_args[@]}" \
  -file "$tmp/agnhost:/agnhost" -link /agnhost-2=agnhost -dir /uploads -entrypoint /agnhost -cmd pause
echo "$DIR"
