#!/usr/bin/env bash
# Multi-GPU session in one call (4 GPUs of one node, about 9 minutes): weak scaling on a
# rock-like pack of 384^3 per rank and strong scaling on a 768^3 one, 1, 2 and 4 ranks with the
# NCCL halo transport, float32 then float16 storage (1 and 4 ranks), the tile storage the
# execution plan picks (compact below its eta_t threshold: on the rock pack float16 too, since
# compact float16 runs on ranks), then the distributed GPU tests,
# then the halo/latency model (benchmarks/scaling/halo_model.py) fitted to what was measured.
#
#   benchmarks/scaling/run_scaling_gpu.sh OUT [BUDGET_SECONDS] [full|quick|storage]
#
# quick: float32 only, no tests. storage (issue 33, about 2.5 minutes): 1 and 4 ranks of compact
# float16 storage (weak and strong), then weak in place (one copy) compact float32 and float16. Every step runs under `timeout` within what is left of BUDGET
# (default 540 s), so one hang cannot eat the rest; later steps are skipped (and say so) when
# time runs out. The geometries are generated once (OUT/scaling/.geometry, or $CACHE) by two
# prepare steps first. Writes OUT/log.txt and OUT/scaling/scaling-*.{json,md} (per point: ms/step,
# MFLUPS, efficiency, load imbalance, tile storage, device GB per rank); prints a summary last.
# Needs mpirun (Open MPI as root: the OMPI_ALLOW_RUN_AS_ROOT variables below).
set -u
OUT=${1:?usage: run_scaling_gpu.sh OUT [BUDGET_SECONDS] [full|quick|storage]}
BUDGET=${2:-540}
MODE=${3:-full}
case $MODE in full | quick | storage) ;; *) echo "unknown mode $MODE: use full, quick or storage" >&2; exit 2 ;; esac
CACHE=${CACHE:-$OUT/scaling/.geometry}
mkdir -p "$OUT/scaling"
LOG=$OUT/log.txt
: > "$LOG"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the lent machines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
# One node: NCCL's bootstrap over loopback, no InfiniBand probing (P2P/SHM are unaffected).
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1}
MPIRUN=${MPIRUN:-mpirun}
RANKS=${RANKS:-"1 2 4"}
TRANSPORTS=${TRANSPORTS:-nccl}
START=$SECONDS

step() {  # step NAME LIMIT_S CMD...: run CMD with timeout min(LIMIT_S, time left)
    local name=$1 limit=$2 left=$((BUDGET - (SECONDS - START)))
    shift 2
    ((left < limit)) && limit=$left
    if ((limit < 20)); then
        echo "=== $name skipped: out of time" | tee -a "$LOG"
        return 99
    fi
    echo "=== $name (limit ${limit} s, at $((SECONDS - START)) s): $*" >> "$LOG"
    timeout -k 10 "$limit" "$@" >> "$LOG" 2>&1
    local rc=$?
    echo "=== $name: rc $rc at $((SECONDS - START)) s" | tee -a "$LOG"
    return $rc
}

scaling() {  # scaling NAME LIMIT_S ARGS...: one benchmarks/scaling/scaling.py series (rock pack, NCCL)
    local name=$1 limit=$2
    shift 2
    # shellcheck disable=SC2086  # TRANSPORTS and RANKS are lists of words
    step "$name" "$limit" python3 benchmarks/scaling/scaling.py "$@" --backend cupy --pack rock \
        --transport $TRANSPORTS --out "$OUT/scaling" --cache "$CACHE" --point-timeout 150
}

step topology 20 nvidia-smi topo -m
# The packs once, before the series (a point that generated one could run out of its time).
step "weak geometry" 60 python3 benchmarks/scaling/scaling.py prepare weak --pack rock --cross 384 \
    --size 384 --out "$OUT/scaling" --cache "$CACHE"
step "strong geometry" 120 python3 benchmarks/scaling/scaling.py prepare strong --pack rock \
    --size 768 --out "$OUT/scaling" --cache "$CACHE"
if [ "$MODE" = storage ]; then  # compact float16 and in place over ranks (issue 33)
    scaling "weak float16 compact" 60 weak --ranks 1 4 --cross 384 --size 384 --steps 300 \
        --storage float16 --tile-storage compact
    scaling "strong float16 compact" 90 strong --ranks 1 4 --size 768 --steps 60 \
        --storage float16 --tile-storage compact
    scaling "weak float32 compact in place" 50 weak --ranks 1 4 --cross 384 --size 384 \
        --steps 300 --tile-storage compact --streaming in-place
    scaling "weak float16 compact in place" 50 weak --ranks 1 4 --cross 384 --size 384 \
        --steps 300 --storage float16 --tile-storage compact --streaming in-place
    MODE=done
fi
# shellcheck disable=SC2086
[ "$MODE" != done ] && scaling "weak float32" 130 weak --ranks $RANKS --cross 384 --size 384 --steps 300
# shellcheck disable=SC2086
[ "$MODE" != done ] && scaling "strong float32" 190 strong --ranks $RANKS --size 768 --steps 60
if [ "$MODE" = full ]; then
    scaling "weak float16" 70 weak --ranks 1 4 --cross 384 --size 384 --steps 300 \
        --storage float16
    scaling "strong float16" 100 strong --ranks 1 4 --size 768 --steps 60 --storage float16
    # what is left of the budget (the tests also run alone: pytest -m gpu tests/solver)
    step "gpu tests" 120 python3 -m pytest -m gpu -q -p no:cacheprovider \
        tests/solver/test_distributed_compact_gpu.py tests/solver/test_distributed_gpu.py \
        tests/solver/test_distributed_inplace_gpu.py
fi
[ "$MODE" != done ] && step "halo model" 20 python3 benchmarks/scaling/halo_model.py \
    "$OUT"/scaling/scaling-*.json

echo
echo "===== summary ($((SECONDS - START)) s) ====="
sed -n '/^=== topology (/,/^=== topology: rc/p' "$LOG" | grep -v "^===" | head -8
grep -E "^=== .*(: rc|skipped|failed)" "$LOG"
grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed)" "$LOG" | head -12
for f in "$OUT"/scaling/*.md; do
    [ -e "$f" ] || continue
    echo "--- $(basename "$f")"
    grep -E "^(##|\| [0-9])" "$f"
done
sed -n '/^=== halo model (/,/^=== halo model: rc/p' "$LOG" | grep -v "^===" || true
