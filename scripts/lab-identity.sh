#!/usr/bin/env bash
# make lab, for now: the identity lab. A real controller and three real
# agents on loopback enroll over TLS, watch their roles, and are scraped
# with a scraper certificate. The network-namespace node-stack lab
# replaces this when the node stack lands.
#
#   LAB_DIR   where state and logs go (default: a new temporary directory)
#   LAB_HOLD  1 to keep everything running until Ctrl-C (default 1 on a
#             terminal, 0 otherwise)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin
LAB_DIR=${LAB_DIR:-$(mktemp -d /tmp/harmony-lab.XXXXXX)}
if [ -t 1 ]; then LAB_HOLD=${LAB_HOLD:-1}; else LAB_HOLD=${LAB_HOLD:-0}; fi
CTL_PORT=${CTL_PORT:-19443}
export HARMONY_CONFIG=$LAB_DIR/controller/admin.conf

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

step() { printf '\n== %s\n' "$*"; }
wait_for() { # file pattern
  for _ in $(seq 1 300); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "lab: timed out waiting for '$2' in $1" >&2; tail -20 "$1" >&2; exit 1
}

step "controller on 127.0.0.1:$CTL_PORT (state in $LAB_DIR/controller)"
"$BIN/harmony-controller" serve --data-dir "$LAB_DIR/controller" --listen "127.0.0.1:$CTL_PORT" \
  >"$LAB_DIR/controller.log" 2>&1 &
pids+=($!)
wait_for "$LAB_DIR/controller.log" "controller serving"

for i in 1 2 3; do
  node=m$i
  step "node $node: add, then start its agent"
  "$BIN/harmonyctl" node add "$node" --cluster lab --role master --ip 127.0.0.1 -o "$LAB_DIR/$node.json"
  "$BIN/harmony-agent" --bootstrap-file "$LAB_DIR/$node.json" --state-dir "$LAB_DIR/$node" \
    --address 127.0.0.1 --metrics-listen "127.0.0.1:$((19100 + i))" --no-guestinfo \
    >"$LAB_DIR/$node.log" 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do wait_for "$LAB_DIR/m$i.log" "new role revision"; done

step "one cluster-wide change: every master gets the VIP"
for i in 1 2 3; do
  "$BIN/harmonyctl" node role "m$i" | sed 's/"name": "lab"/"name": "lab", "vip": "198.18.0.10", "vrid": 51/' >"$LAB_DIR/m$i.role.json"
  "$BIN/harmonyctl" node set-role "m$i" -f "$LAB_DIR/m$i.role.json"
done
for i in 1 2 3; do wait_for "$LAB_DIR/m$i.log" '198.18.0.10'; done

step "a replayed bootstrap token is refused"
"$BIN/harmonyctl" node add w1 --cluster lab --role worker --ip 127.0.0.1 -o "$LAB_DIR/replay.json" >/dev/null 2>&1
cp "$LAB_DIR/replay.json" "$LAB_DIR/replay-copy.json"
"$BIN/harmony-agent" --bootstrap-file "$LAB_DIR/replay.json" --state-dir "$LAB_DIR/replay-a" \
  --address 127.0.0.1 --metrics-listen "" --no-guestinfo >"$LAB_DIR/replay-a.log" 2>&1 &
pids+=($!)
wait_for "$LAB_DIR/replay-a.log" "new role revision"
"$BIN/harmony-agent" --bootstrap-file "$LAB_DIR/replay-copy.json" --state-dir "$LAB_DIR/replay-b" \
  --address 127.0.0.1 --metrics-listen "" --no-guestinfo >"$LAB_DIR/replay-b.log" 2>&1 &
pids+=($!)
wait_for "$LAB_DIR/replay-b.log" "token_used"
grep -h "enrollment refused" "$LAB_DIR/replay-b.log" "$LAB_DIR/controller.log" | cut -c1-220

step "nodes"
"$BIN/harmonyctl" node list

step "scrape m1's metrics with a scraper certificate"
"$BIN/harmonyctl" cert scraper prometheus --out-dir "$LAB_DIR/scraper"
curl -sS --cacert "$LAB_DIR/scraper/ca.crt" --cert "$LAB_DIR/scraper/prometheus.crt" \
  --key "$LAB_DIR/scraper/prometheus.key" https://127.0.0.1:19101/metrics | grep '^harmony_agent_'

echo
echo "lab: all steps passed. Logs and state: $LAB_DIR"
if [ "$LAB_HOLD" = 1 ]; then
  echo "lab: running; HARMONY_CONFIG=$HARMONY_CONFIG $BIN/harmonyctl node list. Ctrl-C stops it."
  wait
fi
