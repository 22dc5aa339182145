#!/usr/bin/env bash
# The tests `make test` runs after lint, in four lanes side by side, each a pytest session on a
# local cluster of its own (ports 1,000 apart from GANGPLUGIN_TEST_PORT_BASE, default 23000, up
# to base+6,999; keep them below the kernel's ephemeral range):
#   lane 1  the unit tests and most of the e2e suite, on the newest supported Kueue   (base)
#   lane 2  the e2e files of LANE2_FILES, on the newest Kueue too                     (base+2000)
#   lane 3  the compat set (`-m compat`) on the oldest Kueue (base+1000), then the short soak and
#           MultiKueue, each on clusters of their own (base+3100; base+4000 to base+6999)
#   lane 4  the real nodes (REAL_NODES): real kubelets, gangplugin installed by its chart, real
#           jobs as gangs, on a cluster of their own (base-1000; one pool per machine)
# An e2e session mostly waits on controllers' timers (backoffs, Kueue's requeue, kwok's stages),
# so on 2 cores the lanes together take about as long as lane 1 alone; no verdict depends on that
# (every wait is for a condition). Against a cluster KUBECONFIG names, one session runs it all
# (there is one Kueue, and the tests share that cluster), then MultiKueue's own clusters and the
# real nodes' (always a local cluster of their own).
# Each lane's output goes to .local/test-lane<N>.log and is printed when the lanes are done.
# GANGPLUGIN_TEST_HOG=<n> runs n busy loops per core beside the lanes, for the whole run: a loaded
# machine, on which every verdict must be the same (the lanes print the load they saw).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OLDEST_KUEUE=$(sed -n 's/^KUEUE_VERSION=//p' hack/versions.env)
BASE=${GANGPLUGIN_TEST_PORT_BASE:-23000}
MULTIKUEUE=tests/e2e/test_multikueue.py
SOAK=tests/e2e/test_soak.py # its own cluster, a quarter of lane 1's time before it moved here
LOADED_FILES=(tests/e2e/test_serve.py) # the loaded lane's: leader election, handover, release
REAL_NODES=tests/e2e/test_real_nodes.py # a session of its own: the real-node cluster takes its ports
LANE2_FILES=(
  tests/e2e/test_jobs_kinds.py tests/e2e/test_jobs_samples.py tests/e2e/test_node_failures.py
  tests/e2e/test_localcluster_faults.py tests/e2e/test_drain.py tests/e2e/test_plans.py
  tests/e2e/test_backoff.py tests/e2e/test_kind_config.py
)

# pytest's exit 5 (no tests collected) is a failure here, never a pass.
pytest_run() {
  "$PY" -m pytest "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "make test: pytest collected no tests ($*); that is a failure" >&2
    return 1
  fi
  return "$rc"
}

if [ -n "${KUBECONFIG:-}" ]; then
  echo "make test: KUBECONFIG names the cluster (one Kueue): one session, then MultiKueue's clusters"
  pytest_run tests --ignore="$MULTIKUEUE" --ignore="$SOAK" --ignore="$REAL_NODES" &&
    pytest_run "$MULTIKUEUE" "$SOAK" && pytest_run "$REAL_NODES"
  exit
fi

mkdir -p .local
ignore=(--ignore="$MULTIKUEUE" --ignore="$SOAK")
ignore+=(--ignore="$REAL_NODES")  # lane 4's
for f in "${LANE2_FILES[@]}"; do ignore+=(--ignore="$f"); done
lane1() { GANGPLUGIN_E2E_PORT_BASE=$BASE pytest_run tests "${ignore[@]}"; }
lane2() { GANGPLUGIN_E2E_PORT_BASE=$((BASE + 2000)) pytest_run "${LANE2_FILES[@]}"; }
lane3() {
  GANGPLUGIN_KUEUE_VERSION="$OLDEST_KUEUE" GANGPLUGIN_E2E_PORT_BASE=$((BASE + 1000)) \
    pytest_run -m compat tests/e2e --ignore="$MULTIKUEUE" --ignore="$SOAK" --ignore="$REAL_NODES"
  local rc=$?
  GANGPLUGIN_E2E_PORT_BASE=$((BASE + 3000)) pytest_run "$SOAK" "$MULTIKUEUE" || rc=$?
  return "$rc"
}
lane4() { GANGPLUGIN_E2E_PORT_BASE=$((BASE - 1000)) pytest_run "$REAL_NODES"; }

hogs=()
stop_hogs() { ((${#hogs[@]})) && kill "${hogs[@]}" 2>/dev/null; hogs=(); }
trap stop_hogs EXIT
busy() { # $1 busy loops per core, until stop_hogs
  for _ in $(seq $(($1 * $(nproc)))); do
    bash -c 'while :; do :; done' &
    hogs+=($!)
  done
}
busy "${GANGPLUGIN_TEST_HOG:-0}"
((${#hogs[@]})) && echo "make test: ${#hogs[@]} busy loops beside the lanes"
# The 1-minute load average every 30 s, for the figures: what the machine was doing meanwhile.
(while :; do cut -d' ' -f1 /proc/loadavg; sleep 30; done) >.local/test-load.log &
hogs+=($!)

start=$(date +%s)
pids=()
for n in 1 2 3 4; do
  "lane$n" >".local/test-lane$n.log" 2>&1 &
  pids+=($!)
done
failed=()
for n in 1 2 3 4; do
  wait "${pids[$((n - 1))]}" || failed+=("$n")
done
for n in 1 2 3 4; do
  echo "================ make test: lane $n (.local/test-lane$n.log) ================"
  cat ".local/test-lane$n.log"
done
stop_hogs
echo "make test: the lanes took $(($(date +%s) - start))s; 1-minute load average min/median/max" \
  "$(sort -n .local/test-load.log | awk '{v[NR] = $1} END {print v[1] "/" v[int((NR + 1) / 2)] "/" v[NR]}')" \
  "on $(nproc) cores"

# Then the loaded lane: LOADED_FILES with a busy loop on every core beside them, so that a change
# letting the machine's load decide a verdict (a leader Lease renewal starved by a long pass) fails
# here rather than on a busy day. GANGPLUGIN_TEST_LOADED=0 skips it.
if [ "${GANGPLUGIN_TEST_LOADED:-1}" != 0 ]; then
  loaded_start=$(date +%s)
  busy 1
  GANGPLUGIN_E2E_PORT_BASE=$((BASE + 2000)) pytest_run "${LOADED_FILES[@]}" >.local/test-loaded.log 2>&1 || failed+=(loaded)
  stop_hogs
  echo "================ make test: the loaded lane (.local/test-loaded.log) ================"
  cat .local/test-loaded.log
  echo "make test: the loaded lane took $(($(date +%s) - loaded_start))s"
fi
if ((${#failed[@]})); then
  echo "make test: lane(s) ${failed[*]} failed" >&2
  exit 1
fi
