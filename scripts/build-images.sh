#!/usr/bin/env bash
# Builds both golden images, harmony-node-<version>.ova and
# harmony-control-plane-<version>.ova, into out/images/ (or $IMAGES_OUT):
# Packer 1.9.4 (scripts/build-packer.sh) runs images/*.pkr.hcl with
# packer-plugin-harmony, built from packer/ and installed the 1.9 way into
# a plugin directory in the cache. The component bundle comes from
# scripts/build-bundle.sh. Run as root (debootstrap, chroot, mounts).
#
# The same checkout and SOURCE_DATE_EPOCH (default: the last commit's
# time) give the same OVAs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH="/usr/local/go/bin:$PATH" GOWORK=off
CACHE=${HARMONY_CACHE:-$HOME/.cache/harmony}
OUT=${IMAGES_OUT:-$ROOT/out/images}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
VERSION=${IMAGE_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
IMAGES=${IMAGES:-node control-plane}
log() { echo "build-images: $*" >&2; }

for bin in harmony-agent harmony-controller; do
  [ -x "bin/$bin" ] || { log "bin/$bin is missing: run make build first"; exit 1; }
done
scripts/build-packer.sh
PACKER=$(scripts/build-packer.sh --path)
BUNDLE=$(scripts/build-bundle.sh)

# Packer 1.9 finds plugins by path and name; the checksum file must match.
PLUGIN_VERSION=$(sed -n 's/^const Version = "\(.*\)"$/\1/p' packer/version/version.go)
export PACKER_PLUGIN_PATH=$CACHE/packer-plugins
plugin_dir=$PACKER_PLUGIN_PATH/github.com/harmonykaas/harmony
plugin=packer-plugin-harmony_v${PLUGIN_VERSION}_x5.0_linux_amd64
mkdir -p "$plugin_dir"
(cd packer && go build -trimpath -o "$plugin_dir/$plugin.tmp" .)
mv -f "$plugin_dir/$plugin.tmp" "$plugin_dir/$plugin"
(cd "$plugin_dir" && sha256sum "$plugin" | cut -d' ' -f1 > "${plugin}_SHA256SUM")

export CHECKPOINT_DISABLE=1 PACKER_NO_COLOR=1 PACKER_CONFIG_DIR=$CACHE/packer-config
mkdir -p "$OUT" "$PACKER_CONFIG_DIR"
for image in $IMAGES; do
  log "$image $VERSION (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"
  start=$SECONDS
  "$PACKER" build -color=false \
    -var "image_version=$VERSION" -var "repo_root=$ROOT" -var "bundle_dir=$BUNDLE" \
    -var "cache_dir=$CACHE/debootstrap" -var "output_dir=$OUT" \
    "images/$image.pkr.hcl"
  size=$(stat -c %s "$OUT/harmony-$image-$VERSION.ova")
  log "$image: built in $((SECONDS - start)) s; OVA $((size / 1000000)) MB ($size bytes)"
done
ls -l "$OUT"/*.ova >&2
