# The control-plane appliance: it runs the controller, with its state and
# daily backups on the data disk so that it upgrades by reimage, and
# carries etcd, keepalived and HAProxy for DESIGN.md's three-VM appliance
# (not built yet). It carries no kubelet or container runtime. `make
# images` builds it; see images/README.md for the variables and
# packer/README.md for installing the plugin.

packer {
  required_version = ">= 1.9.4"
  required_plugins {
    harmony = {
      version = ">= 0.1.0"
      source  = "github.com/harmonykaas/harmony"
    }
  }
}

variable "image_version" {
  type        = string
  description = "The image's version, recorded in image.json and the OVA."
}

variable "repo_root" {
  type        = string
  description = "The Harmony checkout: bin/, systemd/, images/."
}

variable "bundle_dir" {
  type        = string
  description = "The component bundle `make bundle` made: Kubernetes binaries and container images."
}

variable "cache_dir" {
  type        = string
  description = "Where the builder keeps its debootstrap tarballs between builds."
}

variable "output_dir" {
  type    = string
  default = "out/images"
}

variable "debian_mirror" {
  type    = string
  default = "http://deb.debian.org/debian"
}

variable "debian_security_mirror" {
  type    = string
  default = "http://deb.debian.org/debian-security"
}

variable "source_date_epoch" {
  type        = string
  default     = env("SOURCE_DATE_EPOCH")
  description = "Every timestamp in the image and the OVA derives from it."
}

source "harmony-debootstrap" "control-plane" {
  image_name        = "harmony-control-plane"
  suite             = "bookworm"
  mirror            = var.debian_mirror
  security_mirror   = var.debian_security_mirror
  # The base system plus the Debian packages images/components.yaml pins
  # for the appliance, so a warm cache needs no download; the provisioner checks
  # each version against the pin.
  include = [
    "linux-image-cloud-amd64", "systemd-sysv", "udev", "initramfs-tools", "zstd",
    "systemd-boot-efi", "dbus", "iproute2", "iptables", "conntrack", "ethtool", "socat",
    "kmod", "ca-certificates", "openssl",
    "etcd-server", "etcd-client", "keepalived", "haproxy",
  ]
  # The initrd holds only the drivers of the devices the OVF declares
  # (ova/ovf), the pvscsi disk controller and the vmxnet3 NIC, and virtio's
  # for the boot tests under QEMU. Debian's default holds 190 modules
  # (13 MB), which every boot unpacks and probes. The NIC's driver is here
  # so the interface is named and up when networkd starts, not after
  # udev's coldplug in the root: the agent waits for its address.
  initrd_modules    = ["vmw_pvscsi", "sd_mod", "vmxnet3", "virtio_pci", "virtio_blk", "virtio_net"]
  cache_dir         = var.cache_dir
  output_dir        = "${var.output_dir}/build-control-plane"
  disk_size         = "4GiB"
  source_date_epoch = var.source_date_epoch
}

build {
  sources = ["source.harmony-debootstrap.control-plane"]

  provisioner "harmony-node" {
    role              = "control-plane"
    image_version     = var.image_version
    components_file   = "${var.repo_root}/images/components.yaml"
    bundle_dir        = var.bundle_dir
    agent_binary      = "${var.repo_root}/bin/harmony-agent"
    controller_binary = "${var.repo_root}/bin/harmony-controller"
    units_dir         = "${var.repo_root}/systemd"
    overlay_dir       = "${var.repo_root}/images/rootfs"
    source_date_epoch = var.source_date_epoch
  }

  post-processor "harmony-ova" {
    output            = "${var.output_dir}/harmony-control-plane-${var.image_version}.ova"
    source_date_epoch = var.source_date_epoch
  }
}
