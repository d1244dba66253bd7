#!/usr/bin/env bash
# Builds kubeadm, kube-apiserver and kubectl from the k8s.io/kubernetes module
# pinned in tools/kubernetes/go.mod (there is no route to pkgs.k8s.io here).
#
#   scripts/build-kubernetes.sh              build if needed; print nothing else on stdout
#   scripts/build-kubernetes.sh --bin-dir    print the directory the binaries go to
#   scripts/build-kubernetes.sh --version    print the pinned version
#
# The binaries go to .cache/kubernetes/<version>/bin/. The build is skipped
# when every binary there already reports the pinned version; a cold build
# takes about 5 minutes on 2 cores, a rebuild from the Go build cache far less.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODDIR=$ROOT/tools/kubernetes
export PATH="/usr/local/go/bin:$PATH"
export GOWORK=off

# The one pin: the k8s.io/kubernetes requirement in tools/kubernetes/go.mod
# (inside or outside a require block).
VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }
  $1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2 }' "$MODDIR/go.mod")
if ! [[ $VERSION =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "build-kubernetes: no single 'k8s.io/kubernetes v1.Y.Z' requirement in $MODDIR/go.mod (got '$VERSION')" >&2
  exit 1
fi
MINOR=${BASH_REMATCH[1]}
BIN=$ROOT/.cache/kubernetes/$VERSION/bin

case "${1:-}" in
  --bin-dir) echo "$BIN"; exit 0 ;;
  --version) echo "$VERSION"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--bin-dir|--version]" >&2; exit 2 ;;
esac

# Every staging module must be replaced with the release matching the pin,
# or the build silently mixes versions.
if grep -E '^\s+k8s\.io/[a-z-]+ => k8s\.io/[a-z-]+ v' "$MODDIR/go.mod" | grep -v " v0.$MINOR.${VERSION##*.}\$" >&2; then
  echo "build-kubernetes: the staging replaces above do not match $VERSION" >&2
  exit 1
fi

reports_version() { # binary, command...
  local bin=$1; shift
  [ -x "$BIN/$bin" ] || return 1
  "$BIN/$bin" "$@" 2>/dev/null | grep -qw -- "$VERSION"
}
if reports_version kubeadm version -o short &&
  reports_version kube-apiserver --version &&
  reports_version kubectl version --client; then
  echo "build-kubernetes: $BIN already holds $VERSION" >&2
  exit 0
fi

echo "build-kubernetes: building kubeadm, kube-apiserver, kubectl $VERSION into $BIN (about 5 minutes cold)" >&2
mkdir -p "$BIN"
tmp=$(mktemp -d "$BIN/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR -X $pkg.gitTreeState=clean"
# CGO off: static binaries, so that `kubeadm --rootfs DIR` still runs after
# it chroots into DIR, and the lab needs no C toolchain.
(cd "$MODDIR" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kubeadm \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kubectl)
for b in kubeadm kube-apiserver kubectl; do
  mv -f "$tmp/$b" "$BIN/$b"
done
reports_version kubeadm version -o short || { echo "build-kubernetes: built kubeadm does not report $VERSION" >&2; exit 1; }
echo "build-kubernetes: done" >&2
