#!/usr/bin/env bash
# make conformance: Kubernetes' own conformance tests (e2e.test, built from
# the pinned module) against the cluster of a running lab (make lab),
# offline. The test images they can use (make test-images: agnhost,
# busybox) are loaded into every VM first; the specs that need an image
# that cannot be built here are skipped, each with its reason, from
# integration/conformance/skip.txt. Prints passed, failed and skipped.
#
#   make conformance                              sig-network and sig-node
#   make conformance FOCUS='\[sig-network\].*Services'
#   make conformance FOCUS='\[Conformance\]'      everything
#
# LAB_STATE (default .cache/lab) is the lab; NODES (default 4) the
# parallel ginkgo processes. The JSON and JUnit reports and the full log go
# to $LAB_STATE/conformance/<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."
LAB_STATE=${LAB_STATE:-$PWD/.cache/lab}
FOCUS=${FOCUS:-'\[sig-(network|node)\].*\[Conformance\]'}
NODES=${NODES:-4}
export PATH="/usr/local/go/bin:$PATH"
log() { echo "conformance: $*" >&2; }

KUBECONFIG=$LAB_STATE/credentials/admin.kubeconfig
[ -f "$KUBECONFIG" ] || { log "no lab at $LAB_STATE (run make lab first)"; exit 1; }
E2E=$(scripts/build-e2e.sh)
IMAGES=$(scripts/build-test-images.sh)
K8S_BIN=$(scripts/build-kubernetes.sh --bin-dir)

log "loading the test images into every VM"
bin/harmonyctl lab load-image --state "$LAB_STATE" "$IMAGES"/*.tar >&2

# The skip list: one regular expression per line, after its reason.
# grep finds nothing in a list of comments alone: not an error.
SKIP=$({ grep -v -e '^#' -e '^[[:space:]]*$' integration/conformance/skip.txt || true; } | paste -sd'|')
OUT=$LAB_STATE/conformance/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
log "running $FOCUS with $NODES processes; reports in $OUT"
start=$(date +%s)
set +e
"$E2E/ginkgo" --procs="$NODES" --timeout=4h --poll-progress-after=10m --no-color \
  --focus="$FOCUS" ${SKIP:+--skip="$SKIP"} \
  --output-dir="$OUT" --json-report=report.json --junit-report=junit.xml \
  "$E2E/e2e.test" -- \
  --kubeconfig="$KUBECONFIG" --provider=skeleton --kubectl-path="$K8S_BIN/kubectl" \
  --report-dir="$OUT" --disable-log-dump --dump-logs-on-failure=false \
  >"$OUT/e2e.log" 2>&1
rc=$?
set -e
log "e2e.test ended (exit $rc) after $(( $(date +%s) - start )) s; log: $OUT/e2e.log"
go run ./integration/cmd/conformance-report -focus "$FOCUS" "$OUT/report.json" | tee "$OUT/summary.txt"
exit $rc
