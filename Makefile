# Harmony. `make build` builds the binaries into bin/, `make test` runs
# every test this machine can run, `make bench` prints measured figures.

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/harmonykaas/harmony/internal/buildinfo.Version=$(VERSION)
BINARIES  := harmony-agent harmony-controller harmonyctl
FUZZTIME  ?= 5s
# Each fuzz target of outside input, as package:Target.
FUZZ_TARGETS := \
	./api/v1:FuzzDecodeBootstrap \
	./api/v1:FuzzDecodeEnrollRequest \
	./api/v1:FuzzDecodeRole \
	./api/v1:FuzzDecodeStatus \
	./agent/bootstrap:FuzzParseOVFEnvProperty \
	./agent/components/etcd:FuzzDecodeMembers \
	./ova/vmdk:FuzzReadVMDK \
	./ova/ovf:FuzzParseOVF

.PHONY: all build test unit fuzz vet bench lab lab-down clean

all: build

build:
	@mkdir -p bin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ $(addprefix ./cmd/,$(BINARIES))

vet:
	$(GO) vet ./...

# The integration tests start the binaries from bin/.
test: build vet unit fuzz

unit: kubernetes
	HARMONY_BIN=$(CURDIR)/bin HARMONY_K8S_BIN=$(K8S_BIN) $(GO) test -race -count=1 -timeout 30m ./...

# kubeadm, kube-apiserver and kubectl, built from the k8s.io/kubernetes
# module pinned in tools/kubernetes/go.mod into .cache/kubernetes/<version>/bin
# (about 5 minutes cold; skipped when they already report the pinned version).
.PHONY: kubernetes
K8S_BIN := $(shell scripts/build-kubernetes.sh --bin-dir)
kubernetes:
	scripts/build-kubernetes.sh

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x $$pkg; \
	done

bench: build kubernetes
	$(GO) run ./integration/bench/enroll $(BENCH_FLAGS)
	HARMONY_BIN=$(CURDIR)/bin HARMONY_K8S_BIN=$(K8S_BIN) $(GO) run ./integration/bench/node $(NODE_BENCH_FLAGS)
	$(GO) run ./integration/bench/vmdk $(VMDK_BENCH_FLAGS)

# The node-stack lab: hosts as network namespaces, real daemons. It prints
# a JSON summary and keeps running; `make lab-down` (or `bin/harmonyctl lab
# down --state $(LAB_STATE)`) removes it.
LAB_STATE ?= $(CURDIR)/.cache/lab
LAB_FLAGS ?= --masters 3 --workers 2
lab: build kubernetes
	bin/harmonyctl lab up --state $(LAB_STATE) --kubernetes-bin-dir $(K8S_BIN) $(LAB_FLAGS)

lab-down: build
	bin/harmonyctl lab down --state $(LAB_STATE)

clean:
	rm -rf bin
