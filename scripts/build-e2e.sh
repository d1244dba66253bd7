#!/usr/bin/env bash
# Builds Kubernetes' end-to-end suite (e2e.test) and the ginkgo runner that
# drives it in parallel, from the k8s.io/kubernetes module pinned in
# tools/kubernetes, and prints their directory:
#
#   $HARMONY_CACHE/kubernetes/<n>/e2e/{e2e.test,ginkgo}
#
#   scripts/build-e2e.sh          build if needed
#   scripts/build-e2e.sh --dir    print the directory only
#
# e2e.test takes about 5 minutes cold on 2 cores (180 MB). ginkgo is the
# version k8s.io/kubernetes requires, as its own hack/ scripts build it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" GOWORK=off
CACHE=${HARMONY_CACHE:-$HOME/.cache/harmony}
N=$(scripts/build-kubernetes.sh --version)
DIR=$CACHE/kubernetes/$N/e2e
case "${1:-}" in
  --dir) echo "$DIR"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--dir]" >&2; exit 2 ;;
esac
log() { echo "build-e2e: $*" >&2; }

GINKGO_VERSION=$(cd tools/kubernetes && go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
stamp="$N ginkgo $GINKGO_VERSION $(sha256sum tools/kubernetes/go.sum | cut -c1-16)"
if [ -x "$DIR/e2e.test" ] && [ -x "$DIR/ginkgo" ] && [ "$(cat "$DIR/.built" 2>/dev/null)" = "$stamp" ]; then
  log "$DIR holds e2e.test $N and ginkgo $GINKGO_VERSION"
  echo "$DIR"
  exit 0
fi
mkdir -p "$DIR"
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$N -X $pkg.gitTreeState=clean"
log "building e2e.test $N (about 5 minutes cold) and ginkgo $GINKGO_VERSION"
# -vet=off: go test -c would vet every package of the suite, for minutes.
(cd tools/kubernetes && CGO_ENABLED=0 go test -c -vet=off -trimpath -ldflags "$ldflags" -o "$tmp/e2e.test" k8s.io/kubernetes/test/e2e)
(cd tools/kubernetes && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/ginkgo" github.com/onsi/ginkgo/v2/ginkgo)
mv -f "$tmp/e2e.test" "$tmp/ginkgo" "$DIR/"
echo "$stamp" > "$DIR/.built"
echo "$DIR"
