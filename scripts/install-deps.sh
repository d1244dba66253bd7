#!/usr/bin/env bash
# Installs everything `make test` needs on a fresh Debian machine of this
# project's kind, explicitly, so that CI does not pass on leftovers.
set -euo pipefail

GO_MIN=1.26
export PATH="/usr/local/go/bin:$PATH"

# keepalived, haproxy and etcd: the node stack's components are validated by, and
# run as, Debian's real daemons. iproute2: test hosts are network namespaces.
# qemu-utils: qemu-img checks the VMDK writer. The images: debootstrap,
# fdisk (sfdisk), dosfstools and mtools (the ESP), e2fsprogs (the root),
# gcc and libc6-dev (the static pause binary; busybox for the e2e busybox
# image, from its bzip2 tarball), containerd and runc (ctr
# imports the container images in a test and runs one), qemu-system-x86 and ovmf (the boot
# test), acl, attr and libcap2-bin (setfacl, setfattr, setcap: the test that
# the debootstrap cache keeps ACLs, xattrs and file capabilities),
# systemd-container (systemd-nspawn boots the lab's VM bodies from the node
# image). slapd: the LDAP tests run a real OpenLDAP (its package does not
# start it here: policy-rc.d denies services on this machine kind, and the
# tests start their own on loopback). chromium: the web console's test
# drives Debian's headless Chromium.
need_apt=()
for pkg in make git ca-certificates curl openssl iproute2 util-linux qemu-utils keepalived haproxy etcd-server etcd-client prometheus prometheus-node-exporter \
  debootstrap fdisk dosfstools mtools e2fsprogs gcc libc6-dev binutils bzip2 containerd runc qemu-system-x86 ovmf \
  acl attr libcap2-bin systemd-container slapd chromium; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  echo "install-deps: apt-get install ${need_apt[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi

if ! command -v go >/dev/null; then
  echo "install-deps: Go $GO_MIN or later is required at /usr/local/go (this machine kind ships it)" >&2
  exit 1
fi
have=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$GO_MIN" "$have" | sort -V | head -1)" != "$GO_MIN" ]; then
  echo "install-deps: Go $have is older than $GO_MIN" >&2
  exit 1
fi

# The lab's bodies each boot a systemd, journald, containerd and a
# kubelet, all holding inotify instances as root; the default 128 per
# user runs out at about six bodies (kind documents the same limit).
# integration/lab checks for at least this many.
if [ "$(cat /proc/sys/fs/inotify/max_user_instances)" -lt 1024 ]; then
  echo "install-deps: sysctl fs.inotify.max_user_instances=1024"
  sysctl -q -w fs.inotify.max_user_instances=1024
fi

# Every module, at the exact versions go.sum pins.
go mod download
go mod verify
echo "install-deps: ok (go $have)"
