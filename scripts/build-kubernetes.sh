#!/usr/bin/env bash
# Builds the Kubernetes binaries from the k8s.io/kubernetes module pinned in a
# tools/ go.mod (there is no route to pkgs.k8s.io here):
#   tools/kubernetes (n) and tools/kubernetes-previous (n-1): kubeadm,
#     kubelet, kubectl, kube-apiserver, kube-controller-manager,
#     kube-scheduler, kube-proxy (a node image runs a cluster at either)
# as one executable, bin/kube, that each name is a symbolic link to
# (tools/multicall: about a quarter of the seven binaries' sizes).
#
#   scripts/build-kubernetes.sh [MODULE]              build if needed
#   scripts/build-kubernetes.sh [MODULE] --bin-dir    print the binaries' directory
#   scripts/build-kubernetes.sh [MODULE] --version    print the pinned version
#   scripts/build-kubernetes.sh [MODULE] --source     print k8s.io/kubernetes'
#                                                     source directory (downloaded if need be)
#
# MODULE defaults to tools/kubernetes. The binaries go to
# $HARMONY_CACHE/kubernetes/<version>/bin/ (HARMONY_CACHE defaults to
# ~/.cache/harmony: outside the checkout, so fresh clones on one machine
# share it). The build is skipped when every binary there already reports
# the pinned version; a cold build takes 5-10 minutes on 2 cores, a rebuild
# from the Go build cache one or two.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODULE=tools/kubernetes
if [[ ${1:-} == tools/* ]]; then
  MODULE=${1%/}
  shift
fi
MODDIR=$ROOT/$MODULE
BINARIES=(kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
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
BIN=${HARMONY_CACHE:-$HOME/.cache/harmony}/kubernetes/$VERSION/bin

# k8s_source prints the pinned k8s.io/kubernetes module's directory.
# `go list -m` names none for a module not yet in the module cache (a
# fresh machine), so it is downloaded first.
k8s_source() {
  local dir
  (cd "$MODDIR" && go mod download k8s.io/kubernetes)
  dir=$(cd "$MODDIR" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
  if [ -z "$dir" ] || [ ! -d "$dir/cmd" ]; then
    echo "build-kubernetes: k8s.io/kubernetes $VERSION is not in the module cache after go mod download (got '$dir')" >&2
    return 1
  fi
  echo "$dir"
}

case "${1:-}" in
  --bin-dir) echo "$BIN"; exit 0 ;;
  --version) echo "$VERSION"; exit 0 ;;
  --source) k8s_source; exit ;;
  "") ;;
  *) echo "usage: $0 [tools/MODULE] [--bin-dir|--version|--source]" >&2; exit 2 ;;
esac

# Every staging module must be replaced with the release matching the pin,
# or the build silently mixes versions.
if grep -E '^\s+k8s\.io/[a-z-]+ => k8s\.io/[a-z-]+ v' "$MODDIR/go.mod" | grep -v " v0.$MINOR.${VERSION##*.}\$" >&2; then
  echo "build-kubernetes: the staging replaces above do not match $VERSION" >&2
  exit 1
fi

reports_version() { # binary
  local bin=$1 args=(--version)
  case $bin in
    kubeadm) args=(version -o short) ;;
    kubectl) args=(version --client) ;;
  esac
  [ "$(readlink "$BIN/$bin")" = kube ] && [ -x "$BIN/$bin" ] || return 1
  # Into a variable first: with pipefail, `| grep -q` can fail the check
  # when grep exits before the binary has written its last line (SIGPIPE).
  local out
  out=$("$BIN/$bin" "${args[@]}" 2>/dev/null) || return 1
  grep -qw -- "$VERSION" <<<"$out"
}
all_built() {
  local b
  for b in "${BINARIES[@]}"; do reports_version "$b" || return 1; done
}
if all_built; then
  echo "build-kubernetes: $BIN already holds $VERSION" >&2
  exit 0
fi

echo "build-kubernetes: building ${BINARIES[*]} $VERSION as $BIN/kube (5-10 minutes cold)" >&2
mkdir -p "$BIN"
tmp=$(mktemp -d "$BIN/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The multi-call main, and each component's upstream main renamed
# main_<name>: each upstream file must hold main alone, or the rename
# would not be enough.
K8S_SRC=$(k8s_source)
mkdir "$tmp/src"
cp tools/multicall/main.go "$tmp/src/main.go"
for b in "${BINARIES[@]}"; do
  mapfile -t src < <(find "$K8S_SRC/cmd/$b" -maxdepth 1 -name '*.go' ! -name '*_test.go')
  decls=$(grep -cE '^(func|var|const|type) ' "${src[@]}" /dev/null | awk -F: '{ n += $2 } END { print n }')
  if [ "${#src[@]}" -ne 1 ] || [ "$decls" -ne 1 ] || ! grep -q '^func main() {$' "${src[0]}"; then
    echo "build-kubernetes: $K8S_SRC/cmd/$b is no longer one file holding main alone; tools/multicall cannot take it" >&2
    exit 1
  fi
  sed "s/^func main() {\$/func main_${b//-/_}() {/" "${src[0]}" >"$tmp/src/$b.go"
done
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR -X $pkg.gitTreeState=clean"
# CGO off: a static binary, so that `kubeadm --rootfs DIR` still runs
# after it chroots into DIR, and the lab needs no C toolchain. The files
# are outside the module; go resolves their imports against it.
(cd "$MODDIR" && CGO_ENABLED=0 go build -trimpath -tags harmony_multicall -ldflags "$ldflags" -o "$tmp/kube" "$tmp"/src/*.go)
# Each rename is atomic: a killed build never leaves a half binary that a
# later run would trust. The links go last, so a reader finds either the
# old binaries or the new one whole.
mv -f "$tmp/kube" "$BIN/kube"
for b in "${BINARIES[@]}"; do
  ln -s kube "$tmp/$b"
  mv -fT "$tmp/$b" "$BIN/$b"
done
all_built || { echo "build-kubernetes: the built binaries do not all report $VERSION" >&2; exit 1; }
echo "build-kubernetes: done" >&2
