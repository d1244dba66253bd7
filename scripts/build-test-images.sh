#!/usr/bin/env bash
# Builds the container images Kubernetes' own tests use, which no registry
# here can serve, from the pinned k8s.io/kubernetes module (tools/kubernetes)
# and packs each as an OCI archive under the name and tag the module's e2e
# image manifest (test/utils/image/manifest.go) gives it:
#
#   agnhost.tar  registry.k8s.io/e2e-test-images/agnhost:<test/images/agnhost/VERSION>
#                (one static binary on scratch; upstream's adds Alpine's tools)
#
#   scripts/build-test-images.sh          build if needed, print the directory
#   scripts/build-test-images.sh --dir    print the directory only
#
# The tests load these into the lab's nodes (ctr images import); the node
# image does not carry them. Cached under $HARMONY_CACHE/test-images/<n>.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" GOWORK=off
CACHE=${HARMONY_CACHE:-$HOME/.cache/harmony}
N=$(scripts/build-kubernetes.sh --version)
DIR=$CACHE/test-images/$N
case "${1:-}" in
  --dir) echo "$DIR"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--dir]" >&2; exit 2 ;;
esac
log() { echo "build-test-images: $*" >&2; }

K8S_SRC=$(cd tools/kubernetes && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
AGNHOST_VERSION=$(cat "$K8S_SRC/test/images/agnhost/VERSION")
# The manifest's tag is the one the tests ask for: refuse a mismatch
# rather than pack an image no test finds.
grep -q "\"agnhost\", \"$AGNHOST_VERSION\"" "$K8S_SRC/test/utils/image/manifest.go" || {
  log "test/utils/image/manifest.go does not name agnhost $AGNHOST_VERSION"; exit 1; }
REF=registry.k8s.io/e2e-test-images/agnhost:$AGNHOST_VERSION

mkdir -p "$DIR"
stamp=$DIR/agnhost.ref
if [ -f "$DIR/agnhost.tar" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$REF" ]; then
  log "$DIR/agnhost.tar is $REF"
  echo "$DIR"
  exit 0
fi
log "building agnhost $AGNHOST_VERSION from k8s.io/kubernetes $N (a few minutes cold)"
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd tools/kubernetes && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/agnhost" k8s.io/kubernetes/test/images/agnhost)
OCIPACK=$CACHE/tools/ocipack
go build -trimpath -o "$OCIPACK" ./images/ocipack
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0}
"$OCIPACK" -ref "$REF" -entrypoint /agnhost -file "$tmp/agnhost:/agnhost" -out "$tmp/agnhost.tar" >/dev/null
mv -f "$tmp/agnhost.tar" "$DIR/agnhost.tar"
echo "$REF" > "$stamp"
log "$REF packed"
echo "$DIR"
