#!/usr/bin/env bash
# Multi-GPU session in one call: GPU topology, halo link costs per transport, the distributed
# GPU tests, then weak + strong scaling on 1 and 2 ranks per precision and transport.
#
#   benchmarks/scaling/run_scaling_gpu.sh OUT [BUDGET_SECONDS] [full|quick]
#
# quick: only the scaling points with the NCCL transport (float32, then float64; each NCCL
# point also times its allocation replaying CUDA graphs), no topology, halo costs or tests.
# Every step runs under `timeout` within what is left of BUDGET (default 400 s), so one hang
# cannot eat the rest; later steps are skipped (and say so) when time runs out. The host
# transport's float32 numbers come before anything optional, so they exist even when NCCL
# fails. Writes OUT/log.txt, OUT/halo_*.json and OUT/scaling/scaling-*.{json,md}; prints a
# summary last. Needs mpirun (Open MPI as root: the OMPI_ALLOW_RUN_AS_ROOT variables below).
set -u
OUT=${1:?usage: run_scaling_gpu.sh OUT [BUDGET_SECONDS] [full|quick]}
BUDGET=${2:-400}
MODE=${3:-full}
case $MODE in full | quick) ;; *) echo "unknown mode $MODE: use full or quick" >&2; exit 2 ;; esac
mkdir -p "$OUT/scaling"
LOG=$OUT/log.txt
: > "$LOG"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the lent machines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
# One node: NCCL's bootstrap over loopback, no InfiniBand probing (P2P/SHM are unaffected).
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1}
MPIRUN=${MPIRUN:-mpirun}
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

scaling() {  # scaling PRECISION: weak + strong, 1 and 2 ranks, every transport in TRANSPORTS
    # shellcheck disable=SC2086  # TRANSPORTS is a list of words
    step "scaling $1" 200 python3 benchmarks/scaling/scaling.py both --ranks 1 2 --backend cupy \
        --precision "$1" --transport $TRANSPORTS --out "$OUT/scaling" --point-timeout 90
}

if [ "$MODE" = quick ]; then
    TRANSPORTS="nccl"
    scaling float32
    scaling float64
else
    step topology 20 nvidia-smi topo -m
    step "halo host" 60 "$MPIRUN" -n 2 python3 benchmarks/scaling/halo_cost.py --transport host \
        --json "$OUT/halo_host.json"
    # Host points first within each case: a failing NCCL point cannot cost the host numbers.
    TRANSPORTS="host nccl"
    if ! step "halo nccl" 60 env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,SHM \
            "$MPIRUN" -n 2 python3 benchmarks/scaling/halo_cost.py --transport nccl \
            --json "$OUT/halo_nccl.json"; then
        echo "=== NCCL failed with P2P: retrying with NCCL_P2P_DISABLE=1 for the rest" | tee -a "$LOG"
        export NCCL_P2P_DISABLE=1
        step "halo nccl, no P2P" 60 env NCCL_DEBUG=INFO "$MPIRUN" -n 2 python3 \
            benchmarks/scaling/halo_cost.py --transport nccl --json "$OUT/halo_nccl.json" ||
            TRANSPORTS="host"
    fi
    scaling float32 nccl host
    step "gpu tests" 200 python3 -m pytest -m gpu -q -p no:cacheprovider \
        tests/solver/test_distributed_gpu.py
    scaling float64 nccl host
fi

echo
echo "===== summary ($((SECONDS - START)) s) ====="
sed -n '/^=== topology (/,/^=== topology: rc/p' "$LOG" | grep -v "^==="  | head -12
grep -E "NCCL INFO (NCCL version|Channel 0[01].* via )" "$LOG" | sed 's/^.*NCCL INFO/NCCL/' |
    sort -u | head -6
grep -E "^=== .*(: rc|skipped|failed)" "$LOG"
grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed)" "$LOG" | head -12
grep -E "^\| (host|nccl) " "$LOG"
for f in "$OUT"/scaling/*.md; do
    [ -e "$f" ] || continue
    echo "--- $(basename "$f")"
    grep -E "^(##|\| [0-9])" "$f"
done
