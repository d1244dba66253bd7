#!/usr/bin/env bash
# The "release" source of images/components.yaml: downloads the official
# kubeadm, kubelet and kubectl of a pinned Kubernetes version from dl.k8s.io
# and checks each against the sha256 pinned there (a binary with no pinned
# sha256 is refused). For machines with internet; this build machine has
# none, so `make bundle` builds them from the module instead
# (scripts/build-kubernetes.sh).
#
#   scripts/build-kubernetes-release.sh [VERSION]            download if needed
#   scripts/build-kubernetes-release.sh [VERSION] --bin-dir  print the directory
#
# VERSION defaults to n (tools/kubernetes). The binaries go to
# $HARMONY_CACHE/kubernetes-release/<version>/bin/, apart from the module
# builds so the two sources never mix; `HARMONY_K8S_SOURCE=release
# scripts/build-bundle.sh` puts them in the bundle.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" GOWORK=off
VERSION=$(scripts/build-kubernetes.sh --version)
if [[ ${1:-} == v* ]]; then
  VERSION=$1
  shift
fi
BIN=${HARMONY_CACHE:-$HOME/.cache/harmony}/kubernetes-release/$VERSION/bin
case "${1:-}" in
  --bin-dir) echo "$BIN"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [vX.Y.Z] [--bin-dir]" >&2; exit 2 ;;
esac
go run ./images/components/cmd/fetch-kubernetes-release -pins images/components.yaml -version "$VERSION" -dir "$BIN" >/dev/null
echo "$BIN"
