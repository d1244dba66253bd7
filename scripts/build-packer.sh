#!/usr/bin/env bash
# Builds Packer from the module pinned in tools/packer/go.mod (1.9.4, the
# last MPL release) into $HARMONY_CACHE/packer/<version>/packer, unless it
# is there and reports that version. About 6 minutes cold on 2 cores.
#
#   scripts/build-packer.sh           build if needed
#   scripts/build-packer.sh --path    print the binary's path
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" GOWORK=off
VERSION=$(awk '$1 == "require" && $2 == "github.com/hashicorp/packer" { print $3 }' tools/packer/go.mod)
[[ $VERSION =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { echo "build-packer: no 'require github.com/hashicorp/packer v1.Y.Z' in tools/packer/go.mod" >&2; exit 1; }
BIN=${HARMONY_CACHE:-$HOME/.cache/harmony}/packer/$VERSION/packer
case "${1:-}" in
  --path) echo "$BIN"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--path]" >&2; exit 2 ;;
esac
# Not `| grep -q`: with pipefail, grep's early exit can fail the pipeline.
if grep -q "^Packer ${VERSION}\$" <<<"$("$BIN" version 2>/dev/null)"; then
  echo "build-packer: $BIN is Packer $VERSION" >&2
  exit 0
fi
echo "build-packer: building Packer $VERSION into $BIN (about 6 minutes cold)" >&2
mkdir -p "$(dirname "$BIN")"
ver=${VERSION#v}
(cd tools/packer && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X github.com/hashicorp/packer/version.Version=$ver -X github.com/hashicorp/packer/version.VersionPrerelease=" \
  -o "$BIN.tmp" github.com/hashicorp/packer)
mv -f "$BIN.tmp" "$BIN"
"$BIN" version >&2
