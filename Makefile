# Harmony. `make build` builds the binaries into bin/, `make test` runs
# every test this machine can run, `make bench` prints measured figures.

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/harmonykaas/harmony/internal/buildinfo.Version=$(VERSION)
BINARIES  := harmony-agent harmony-controller harmonyctl
# Heavy builds (Kubernetes, CoreDNS, Packer, debootstrap tarballs, the
# component bundle) are cached outside the checkout, so every clone on one
# machine shares them.
HARMONY_CACHE ?= $(HOME)/.cache/harmony
export HARMONY_CACHE
IMAGES_OUT ?= $(CURDIR)/out/images
export IMAGES_OUT
# A budget in executions, not seconds: with a duration, Go's fuzz
# coordinator (go1.26) can report the end of its own deadline as a
# failure, "context deadline exceeded" with no failing input
# (golang/go#75804, fixed in go1.27). A count sets no deadline to race.
# 100000 is 6 to 20 s per target on a 2-core machine.
FUZZEXECS ?= 100000
# Each fuzz target of outside input, as package:Target.
FUZZ_TARGETS := \
	./api/v1:FuzzDecodeBootstrap \
	./api/v1:FuzzDecodeEnrollRequest \
	./api/v1:FuzzDecodeRole \
	./api/v1:FuzzDecodeStatus \
	./api/v1:FuzzDecodeClusterSpec \
	./api/v1:FuzzDecodeUpgradeRequest \
	./api/v1:FuzzDecodeProvider \
	./api/v1:FuzzDecodeNetworkGuestinfo \
	./agent/bootstrap:FuzzParseOVFEnvProperty \
	./agent/components/etcd:FuzzDecodeMembers \
	./ova/vmdk:FuzzReadVMDK \
	./ova/archive:FuzzValidate \
	./ova/ovf:FuzzParseOVF

.PHONY: all build test unit fuzz vet bench conformance bench-images bench-clusters lab lab-down clean images next-image bundle packer packer-plugin reproducible vcsim

all: build

# bin/vmware-rpctool is the lab's stand-in for open-vm-tools' tool: VM
# bodies read their guestinfo through it (integration/lab/body). Static,
# because it runs inside the node image. bin/vcsim is the simulator as a
# process, for make vcsim and the tests that keep it out of theirs.
build:
	@mkdir -p bin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ $(addprefix ./cmd/,$(BINARIES))
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/vmware-rpctool ./integration/lab/cmd/vmware-rpctool
	$(GO) build -trimpath -o bin/vcsim ./integration/cmd/vcsim

vet:
	$(GO) vet ./...
	cd packer && $(GO) vet ./...

# The integration tests start the binaries from bin/ and boot the images
# in $(IMAGES_OUT).
test: build vet unit fuzz reproducible

# The image boot tests run alone, after the rest: QEMU under TCG takes
# both cores, which would starve the timing-sensitive tests beside it.
# The race detector's reports go to files, printed again at the end when
# a test fails: in the interleaved output of parallel packages a report
# is easily cut off. The integration package is named first: go test
# starts packages in the order given, and its labs, which take turns with
# lab/body's (testutil.Heavy), are the longest chain; started after the
# agent's packages, as ./... alone orders it, they ended CI about four
# minutes later.
RACE_LOGS := $(CURDIR)/out/race
unit: kubernetes images next-image test-images
	rm -rf $(RACE_LOGS) && mkdir -p $(RACE_LOGS)
	HARMONY_BIN=$(CURDIR)/bin HARMONY_K8S_BIN=$(K8S_BIN) HARMONY_IMAGES=$(IMAGES_OUT) HARMONY_NEXT_IMAGES=$(NEXT_IMAGES_OUT) HARMONY_TEST_IMAGES=$(TEST_IMAGES) GORACE=log_path=$(RACE_LOGS)/report \
		$(GO) test -race -count=1 -timeout 70m -skip '^(TestImageBoot|TestApplianceBoot)$$' ./integration/ ./... || { cat $(RACE_LOGS)/report.* 2>/dev/null; exit 1; }
	cd packer && $(GO) test -count=1 -timeout 20m ./...
	HARMONY_BIN=$(CURDIR)/bin HARMONY_IMAGES=$(IMAGES_OUT) $(GO) test -count=1 -timeout 30m -run '^(TestImageBoot|TestApplianceBoot)$$' -v ./integration/

# The Kubernetes binaries, built from the k8s.io/kubernetes modules pinned
# in tools/kubernetes (n) and tools/kubernetes-previous (n-1) into
# $(HARMONY_CACHE)/kubernetes/<version>/bin (5-10 minutes cold; skipped
# when they already report the pinned version).
.PHONY: kubernetes
K8S_BIN := $(shell scripts/build-kubernetes.sh --bin-dir)
kubernetes:
	scripts/build-kubernetes.sh
	scripts/build-kubernetes.sh tools/kubernetes-previous

# The container images Kubernetes' tests use (agnhost, busybox,
# jessie-dnsutils: scripts/build-test-images.sh), built from the pinned
# module and Debian's packages; the tests load them into the lab's nodes.
.PHONY: test-images
TEST_IMAGES := $(shell scripts/build-test-images.sh --dir)
test-images:
	scripts/build-test-images.sh

# Kubernetes' conformance tests against the running lab (make lab), offline:
# e2e.test and ginkgo from the pinned module, the test images loaded into
# every VM. FOCUS narrows it (default: sig-network and sig-node).
.PHONY: conformance
conformance: build test-images
	FOCUS='$(FOCUS)' LAB_STATE=$(LAB_STATE) scripts/conformance.sh

# What the node image carries from Kubernetes: binaries for n and n-1, and
# the control plane's container images as OCI archives (images/components.yaml).
bundle: kubernetes
	scripts/build-bundle.sh

# Packer 1.9.4, built from its module into the cache (about 6 minutes cold).
packer:
	scripts/build-packer.sh

packer-plugin:
	@mkdir -p bin
	cd packer && $(GO) build -trimpath -o ../bin/packer-plugin-harmony .

# Both golden OVAs into $(IMAGES_OUT) (root: debootstrap and chroot).
images: build kubernetes packer
	scripts/build-images.sh

# A second node image from the same checkout with another version
# ($(VERSION)-next), in $(NEXT_IMAGES_OUT): what TestLab upgrades its
# cluster to (harmonyctl lab import-image, then cluster upgrade).
NEXT_IMAGES_OUT ?= $(IMAGES_OUT)/next
next-image: images
	rm -rf $(NEXT_IMAGES_OUT)
	IMAGES=node IMAGE_VERSION=$(VERSION)-next IMAGES_OUT=$(NEXT_IMAGES_OUT) scripts/build-images.sh

# The whole node image, built a second time from the same checkout and
# SOURCE_DATE_EPOCH, must be byte-identical to the first. On a cold
# machine the first build makes the debootstrap base and the second uses
# the cache; the builder restores both roots from the cache tarball
# (packer/builder/debootstrap's tests compare the two paths in seconds),
# so no second debootstrap is made here: it would cost minutes and
# compare against a mirror that may have moved on. Two builds from one
# cache agree even if the cache drops extended attributes, so the node
# image must also still carry the ACL systemd puts on /var/log/journal
# (read from the OVA's disk with debugfs, under 10 s).
REPRO_OUT ?= $(HARMONY_CACHE)/reproducible
reproducible: images
	rm -rf $(REPRO_OUT)
	IMAGES=node IMAGES_OUT=$(REPRO_OUT) scripts/build-images.sh
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	for f in $(REPRO_OUT)/harmony-node-*.ova; do \
		cmp "$$f" "$(IMAGES_OUT)/$$(basename "$$f")"; \
		echo "reproducible: $$(basename "$$f") is byte-identical across two builds"; \
		tar -xf "$$f" -C "$$tmp" --wildcards '*.vmdk'; \
		qemu-img convert -O raw "$$tmp"/*.vmdk "$$tmp/disk.raw"; \
		start=$$(sfdisk --dump "$$tmp/disk.raw" | sed -n 's/.*start= *\([0-9]*\),.*name="root".*/\1/p'); \
		debugfs -R 'ea_list /var/log/journal' "$$tmp/disk.raw?offset=$$((start * 512))" 2>&1 | grep -q system.posix_acl_access || \
			{ echo "reproducible: $$(basename "$$f") has lost the ACL on /var/log/journal: the image pipeline drops extended attributes" >&2; exit 1; }; \
		rm -f "$$tmp"/*; \
		echo "reproducible: $$(basename "$$f") keeps extended attributes (the ACL on /var/log/journal)"; \
	done
	rm -rf $(REPRO_OUT)

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZEXECS) executions"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZEXECS)x -fuzzminimizetime 200x $$pkg; \
	done

bench: build kubernetes images next-image test-images
	$(GO) run ./integration/bench/enroll $(BENCH_FLAGS)
	HARMONY_BIN=$(CURDIR)/bin HARMONY_IMAGES=$(IMAGES_OUT) HARMONY_NEXT_IMAGES=$(NEXT_IMAGES_OUT) HARMONY_K8S_BIN=$(K8S_BIN) HARMONY_TEST_IMAGES=$(TEST_IMAGES) $(GO) run ./integration/bench/node $(NODE_BENCH_FLAGS)
	$(GO) run ./integration/bench/vmdk $(VMDK_BENCH_FLAGS)
	$(GO) run ./integration/bench/ovavalidate
	$(MAKE) bench-clusters
	$(MAKE) bench-images

# Cluster create and delete, 3+2 and 3+100, against an in-process vcsim,
# next to the same clones made straight through govmomi.
bench-clusters: build
	HARMONY_BIN=$(CURDIR)/bin $(GO) run ./integration/bench/clusters $(CLUSTER_BENCH_FLAGS)

# Both images built with warm caches (time and size per image, against the
# targets: both under 10 minutes, the node OVA under 500 MB), then the node
# image booted under QEMU until the agent is active.
BENCH_IMAGES ?= $(HARMONY_CACHE)/bench-images
bench-images: build kubernetes packer
	IMAGES_OUT=$(BENCH_IMAGES) scripts/build-images.sh
	$(GO) run ./integration/bench/boot -images $(BENCH_IMAGES) $(BOOT_BENCH_FLAGS)

# The whole system on this machine (root): vcsim as the vCenter, the
# controller importing the node OVA and creating a 3+2 cluster through
# its API, and every VM it powers on booted from the node image. It prints
# where everything is and keeps running; `make lab-down` (or
# `bin/harmonyctl lab down --state $(LAB_STATE)`) removes it.
LAB_STATE ?= $(CURDIR)/.cache/lab
LAB_FLAGS ?= --masters 3 --workers 2 --detach
lab: build images
	bin/harmonyctl lab up --state $(LAB_STATE) $(LAB_FLAGS)

lab-down: build
	bin/harmonyctl lab down --state $(LAB_STATE)

# A standalone vCenter simulator (govmomi's vcsim) to drive the controller
# by hand; it writes a provider document, the password and a small node OVA
# into $(VCSIM_DIR). See "Clusters on a simulated vCenter" in the README.
VCSIM_DIR ?= $(CURDIR)/.cache/vcsim
vcsim: build
	bin/vcsim -l 127.0.0.1:8989 -dir $(VCSIM_DIR)

clean:
	rm -rf bin
