#!/usr/bin/env bash
# Builds the component bundle the harmony-node provisioner installs, from
# the pins in images/components.yaml, and prints its directory:
#
#   kubernetes/<n>/kube, and {kubeadm,kubelet,kubectl,kube-proxy} linked
#                   to it: one multi-call binary (tools/multicall) built from
#                   tools/kubernetes
#   kubernetes/<n-1>/... the same, from tools/kubernetes-previous
#   binaries/<name> daemons built from their modules in tools/ (flanneld)
#   images/kubernetes-control-plane-<version>.tar
#                   one OCI archive a version holding kube-apiserver,
#                   kube-controller-manager and kube-scheduler: three images
#                   of one layer, the same multi-call binary
#   images/*.tar    CoreDNS (tools/coredns) and pause
#                   (k8s.io/kubernetes's build/pause/linux/pause.c)
#   bundle.json     what it holds, with each image's digest
#
# HARMONY_K8S_SOURCE=release takes kubeadm, kubelet and kubectl (n and n-1)
# from dl.k8s.io, checked against the sha256 pins, instead of the module
# builds (scripts/build-kubernetes-release.sh; needs internet). The
# control-plane images and kube-proxy are built from the module either way
# (kube-proxy then is the only link to kube).
#
# kube-proxy is a binary on the node, not an image: the agent runs it as a
# unit with the node's own iptables (agent/components/kubeproxy), so no
# container image has to carry iptables and its libraries.
#
# Everything is cached under $HARMONY_CACHE (default ~/.cache/harmony); the
# bundle's directory name is a hash of its inputs, so an unchanged bundle
# is not rebuilt. The same inputs and SOURCE_DATE_EPOCH (default: the
# commit time of images/components.yaml) give the same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH="/usr/local/go/bin:$PATH" GOWORK=off
CACHE=${HARMONY_CACHE:-$HOME/.cache/harmony}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct -- images/components.yaml 2>/dev/null || true)}
: "${SOURCE_DATE_EPOCH:=0}"
log() { echo "build-bundle: $*" >&2; }

K8S_SOURCE=${HARMONY_K8S_SOURCE:-module}
N=$(scripts/build-kubernetes.sh --version)
N_BIN=$(scripts/build-kubernetes.sh --bin-dir)
P=$(scripts/build-kubernetes.sh tools/kubernetes-previous --version)
# The module builds always: the control-plane images and kube-proxy come
# from them.
scripts/build-kubernetes.sh >&2
scripts/build-kubernetes.sh tools/kubernetes-previous >&2
P_BIN=$(scripts/build-kubernetes.sh tools/kubernetes-previous --bin-dir)
case $K8S_SOURCE in
  module)
    N_NODE=$N_BIN
    P_NODE=$P_BIN
    N_SOURCE="module k8s.io/kubernetes $N (tools/kubernetes)"
    P_SOURCE="module k8s.io/kubernetes $P (tools/kubernetes-previous)"
    ;;
  release)
    N_NODE=$(scripts/build-kubernetes-release.sh "$N")
    P_NODE=$(scripts/build-kubernetes-release.sh "$P")
    N_SOURCE="release dl.k8s.io $N, sha256 pinned in images/components.yaml"
    P_SOURCE="release dl.k8s.io $P, sha256 pinned in images/components.yaml"
    ;;
  *) log "HARMONY_K8S_SOURCE=$K8S_SOURCE: want module or release"; exit 2 ;;
esac

# The image references come from the pin file, so a bump there is a bump
# here.
ref() { # image name as in the ref, e.g. kube-apiserver or coredns/coredns
  local r
  r=$(grep -oE "ref: \"registry\.k8s\.io/$1:[^\"]+\"" images/components.yaml | sed -E 's/^ref: "(.*)"$/\1/')
  [ -n "$r" ] || { log "images/components.yaml has no registry.k8s.io/$1 image"; exit 1; }
  echo "$r"
}
# The control plane of n and n-1, each pinned.
for name in kube-apiserver kube-controller-manager kube-scheduler; do
  for v in "$N" "$P"; do
    grep -qF "ref: \"registry.k8s.io/$name:$v\"" images/components.yaml ||
      { log "images/components.yaml does not pin registry.k8s.io/$name:$v"; exit 1; }
  done
done

# CoreDNS, from its module at the version the pin names.
COREDNS_REF=$(ref coredns/coredns)
COREDNS_VERSION=${COREDNS_REF##*:}
if ! grep -q "github.com/coredns/coredns $COREDNS_VERSION\$" tools/coredns/go.mod; then
  log "tools/coredns/go.mod does not require github.com/coredns/coredns $COREDNS_VERSION"
  exit 1
fi
COREDNS=$CACHE/coredns/$COREDNS_VERSION/coredns
# Not `| grep -q`: with pipefail, grep's early exit can fail the pipeline.
if ! grep -q "CoreDNS-${COREDNS_VERSION#v}" <<<"$("$COREDNS" -version 2>/dev/null)"; then
  log "building CoreDNS $COREDNS_VERSION (about 2 minutes cold)"
  mkdir -p "$(dirname "$COREDNS")"
  (cd tools/coredns && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$COREDNS.tmp" github.com/coredns/coredns)
  mv -f "$COREDNS.tmp" "$COREDNS"
fi

# pause, compiled the way Kubernetes' build/pause/Makefile does.
PAUSE_REF=$(ref pause)
PAUSE_VERSION=${PAUSE_REF##*:}
PAUSE=$CACHE/pause/$PAUSE_VERSION/pause
K8S_SRC=$(scripts/build-kubernetes.sh --source)
if ! grep -q "^TAG ?= $PAUSE_VERSION\$" "$K8S_SRC/build/pause/Makefile"; then
  log "k8s.io/kubernetes $N builds pause $(grep -oE '^TAG \?= .*' "$K8S_SRC/build/pause/Makefile"), the pin says $PAUSE_VERSION"
  exit 1
fi
if [ ! -x "$PAUSE" ] || ! grep -q "v$PAUSE_VERSION" <<<"$("$PAUSE" -v 2>&1)"; then
  log "compiling pause $PAUSE_VERSION"
  mkdir -p "$(dirname "$PAUSE")"
  cc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-harmony" -o "$PAUSE.tmp" "$K8S_SRC/build/pause/linux/pause.c"
  strip "$PAUSE.tmp"
  mv -f "$PAUSE.tmp" "$PAUSE"
fi

# Daemons built from their modules (images/components.yaml "binaries"),
# each cached by name and version.
BINARIES=()
while IFS=$'\t' read -r name module version tools dest var; do
  out=$CACHE/binaries/$name/$version/$name
  if [ ! -x "$out" ]; then
    if ! grep -qE "^(require[[:space:]]+|[[:space:]]+)$module $version\$" "$tools/go.mod"; then
      log "$tools/go.mod does not require $module $version"
      exit 1
    fi
    log "building $name $version from $module (a few minutes cold)"
    mkdir -p "$(dirname "$out")"
    ldflags="-s -w"
    [ "$var" = - ] || ldflags+=" -X $var=$version"
    # cgo on and linked statically, as flannel's own Makefile builds it:
    # its UDP backend needs cgo on amd64, and a static binary does not
    # depend on the build machine's glibc.
    (cd "$tools" && CGO_ENABLED=1 go build -trimpath -ldflags "$ldflags -extldflags=-static" -o "$out.tmp" "$module")
    mv -f "$out.tmp" "$out"
  fi
  BINARIES+=("$name $version $module $out")
done < <(go run ./images/components/cmd/pinned-binaries -pins images/components.yaml)

# The bundle's name: a hash of every input, so unchanged inputs reuse it.
OCIPACK=$CACHE/tools/ocipack
go build -trimpath -o "$OCIPACK" ./images/ocipack
key=$( {
  echo "$SOURCE_DATE_EPOCH $K8S_SOURCE"
  sha256sum images/components.yaml images/ocipack/main.go scripts/build-bundle.sh
  sha256sum "$N_BIN/kube" "$P_BIN/kube"
  if [ "$K8S_SOURCE" = release ]; then
    for b in kubeadm kubelet kubectl; do sha256sum "$N_NODE/$b" "$P_NODE/$b"; done
  fi
  sha256sum "$COREDNS" "$PAUSE"
  for b in "${BINARIES[@]}"; do sha256sum "${b##* }"; done
} | sed "s# $CACHE/# #" | sha256sum | cut -c1-16)
BUNDLE=$CACHE/bundle/$key
if [ -f "$BUNDLE/bundle.json" ]; then
  touch "$BUNDLE" # in use again: the newest, so pruning keeps it
  log "$BUNDLE is up to date"
  echo "$BUNDLE"
  exit 0
fi

log "assembling $BUNDLE"
tmp=$(mktemp -d "$CACHE/bundle/.tmp.XXXXXX" 2>/dev/null || { mkdir -p "$CACHE/bundle" && mktemp -d "$CACHE/bundle/.tmp.XXXXXX"; })
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/kubernetes/$N" "$tmp/kubernetes/$P" "$tmp/images"
place() { ln -f "$1" "$2" 2>/dev/null || cp "$1" "$2"; }
# Each version's multi-call binary once, the names it answers to linked
# to it. With release binaries, kube-proxy is the multi-call binary under
# its own name (the release has no kube-proxy binary; the image is larger).
MULTICALL='"multicall": "kube", '
for v in "$N:$N_BIN:$N_NODE" "$P:$P_BIN:$P_NODE"; do
  IFS=: read -r version bin node <<<"$v"
  if [ "$K8S_SOURCE" = module ]; then
    place "$bin/kube" "$tmp/kubernetes/$version/kube"
    for b in kubeadm kubelet kubectl kube-proxy; do ln -s kube "$tmp/kubernetes/$version/$b"; done
  else
    MULTICALL=
    place "$bin/kube" "$tmp/kubernetes/$version/kube-proxy"
    for b in kubeadm kubelet kubectl; do place "$node/$b" "$tmp/kubernetes/$version/$b"; done
  fi
done

binaries_json=""
components_json=""
if [ ${#BINARIES[@]} -gt 0 ]; then mkdir -p "$tmp/binaries"; fi
for b in "${BINARIES[@]}"; do
  read -r name version module out <<<"$b"
  place "$out" "$tmp/binaries/$name"
  entry="{\"name\": \"$name\", \"version\": \"$version\", \"source\": \"module $module\"}"
  binaries_json+="${binaries_json:+,}
    $entry"
  components_json+=",
    $entry"
done

images_json=""
pack() { # file ocipack-args... (the references from its -ref and -also)
  local file=$1 out refs=() digests=() i
  shift
  out=$("$OCIPACK" -out "$tmp/images/$file" "$@")
  mapfile -t digests <<<"$out"
  while [ $# -gt 0 ]; do
    case $1 in
      -ref) refs+=("$2") ;;
      -also) refs+=("${2%%=*}") ;;
    esac
    shift
  done
  [ ${#refs[@]} -eq ${#digests[@]} ] || { log "ocipack gave ${#digests[@]} digests for ${#refs[@]} images"; exit 1; }
  for i in "${!refs[@]}"; do
    images_json+="${images_json:+,}
    {\"ref\": \"${refs[$i]}\", \"digest\": \"${digests[$i]}\", \"file\": \"$file\"}"
    log "${refs[$i]} ${digests[$i]}"
  done
}
# The control plane of a version: three images of one layer holding the
# multi-call binary, each running its own name, in one archive.
for v in "$N:$N_BIN" "$P:$P_BIN"; do
  IFS=: read -r version bin <<<"$v"
  pack "kubernetes-control-plane-$version.tar" \
    -ref "registry.k8s.io/kube-apiserver:$version" -entrypoint /usr/local/bin/kube-apiserver \
    -also "registry.k8s.io/kube-controller-manager:$version=/usr/local/bin/kube-controller-manager" \
    -also "registry.k8s.io/kube-scheduler:$version=/usr/local/bin/kube-scheduler" \
    -file "$bin/kube:/usr/local/bin/kube" -link /usr/local/bin/kube-apiserver=kube \
    -link /usr/local/bin/kube-controller-manager=kube -link /usr/local/bin/kube-scheduler=kube
done
# As upstream's images: CoreDNS runs as nonroot (65532) and binds port 53
# through the file capability its setcap gives it; pause runs as 65535.
pack coredns.tar -ref "$COREDNS_REF" -entrypoint /coredns -file "$COREDNS:/coredns" -user 65532:65532 -cap /coredns=cap_net_bind_service
pack pause.tar -ref "$PAUSE_REF" -entrypoint /pause -file "$PAUSE:/pause" -user 65535:65535

cat > "$tmp/bundle.json" <<EOF
{
  "kubernetes": [
    {"version": "$N", "binaries": ["kubeadm", "kubelet", "kubectl", "kube-proxy"], $MULTICALL"source": "$N_SOURCE"},
    {"version": "$P", "binaries": ["kubeadm", "kubelet", "kubectl", "kube-proxy"], $MULTICALL"source": "$P_SOURCE"}
  ],
  "images": [$images_json
  ],
  "binaries": [$binaries_json
  ],
  "components": [
    {"name": "kubernetes", "version": "$N", "source": "$N_SOURCE"},
    {"name": "kubernetes-previous", "version": "$P", "source": "$P_SOURCE"},
    {"name": "coredns", "version": "$COREDNS_VERSION", "source": "module github.com/coredns/coredns (tools/coredns)"},
    {"name": "pause", "version": "$PAUSE_VERSION", "source": "k8s.io/kubernetes $N build/pause/linux/pause.c"}$components_json
  ]
}
EOF
chmod 755 "$tmp" # mktemp made it 0700
mv "$tmp" "$BUNDLE"
trap - EXIT
# Each commit's SOURCE_DATE_EPOCH makes a new bundle; keep the three newest,
# and any used in the last hour (another checkout's image build may be
# reading it right now).
ls -1dt "$CACHE"/bundle/*/ 2>/dev/null | tail -n +4 | while read -r old; do
  old=${old%/}
  if [ "$old" != "$BUNDLE" ] && [ -n "$(find "$old" -maxdepth 0 -mmin +60)" ]; then
    rm -rf "$old"
  fi
done
echo "$BUNDLE"
