"""One halo exchange, piece by piece: ``mpirun -n 2 python benchmarks/scaling/halo_cost.py``.

The CuPy phase stepper (``solver/backends/cuda/phases.py``) moves each step's halo along a
chain that runs while the interior tiles are computed, so a step cannot be shorter than it:

- ``host`` transport: device gather -> copy to page-locked host memory -> MPI (both ranks send
  and receive at once) -> copy back to the device (-> scatter);
- ``nccl`` transport: device gather -> NCCL grouped send/recv between the GPUs -> device
  scatter, all queued on one stream without a host wait.

This script times the links for given message sizes (default: the halo of the scaling cases,
192^2 and 384^2 faces, float32 and float64), one GPU per rank as in the solver (each rank sees
every GPU, its own first; ``solver.distributed.bind_local_gpu``). Host links are host wall
times with a stream synchronisation after each; the NCCL chain is also timed as the solver
runs it, queued in one go, by CUDA events around it ("chain, queued"). Times are medians over
``--repeats`` exchanges, microseconds; rank 0 prints a markdown table and, with ``--json``,
writes it. Set ``NCCL_DEBUG=INFO`` to see which NCCL transport connects the GPUs (P2P/IPC or
P2P/CUMEM over NVLink, SHM through host memory).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

#: Halo bytes per rank and step of benchmarks/scaling/scaling.py (weak 192^2, strong 384^2
#: faces; both faces to the one peer of a two-rank periodic slab), float32 then float64.
DEFAULT_MB = (1.03, 2.06, 4.70, 9.40)


def _median_us(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats + 3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e6 * float(np.median(times[3:]))  # the first calls warm up


def measure(comm, nbytes: int, repeats: int, chunk_bytes: int = 0, pinned_mpi: bool = True
            ) -> dict:
    """Median microseconds of each link for messages of ``nbytes`` bytes, sent in pieces of
    ``chunk_bytes`` (0: whole), from page-locked or (``pinned_mpi`` False) ordinary memory."""
    import cupy as cp

    n = nbytes // 8
    pinned = [np.ndarray((n,), np.float64, cp.cuda.alloc_pinned_memory(n * 8)) for _ in "sr"]
    host = pinned if pinned_mpi else [np.empty(n) for _ in "sr"]
    step = chunk_bytes // 8 if chunk_bytes else n
    pieces = [slice(lo, min(lo + step, n)) for lo in range(0, n, step)]
    device = cp.ones(n, dtype=np.float64)
    index = cp.asarray(np.random.default_rng(0).permutation(4 * n)[:n])
    source = cp.ones(4 * n, dtype=np.float64)
    stream = cp.cuda.Stream(non_blocking=True)
    peer = 1 - comm.Get_rank()

    def gather():
        with stream:
            cp.take(source, index, out=device)
        stream.synchronize()

    def d2h():
        device.get(stream=stream, out=pinned[0])
        stream.synchronize()

    def h2d():
        device.set(pinned[1], stream=stream)
        stream.synchronize()

    def exchange():
        from mpi4py import MPI

        comm.Barrier()
        requests = [comm.Irecv(host[1][k], source=peer, tag=t) for t, k in enumerate(pieces)]
        requests += [comm.Isend(host[0][k], dest=peer, tag=t) for t, k in enumerate(pieces)]
        MPI.Request.Waitall(requests)

    out = {"transport": "host", "MB": nbytes / 1e6, "chunk_MB": chunk_bytes / 1e6,
           "pinned_mpi": pinned_mpi}
    for name, fn in (("gather", gather), ("d2h", d2h), ("mpi", exchange), ("h2d", h2d)):
        out[name] = _median_us(fn, repeats)
    barrier = _median_us(comm.Barrier, repeats)
    out["mpi"] -= barrier  # the barrier only lines the ranks up
    out["chain"] = out["gather"] + out["d2h"] + out["mpi"] + out["h2d"]
    return out


def measure_nccl(comm, link, nbytes: int, repeats: int) -> dict:
    """Median microseconds of the NCCL chain's links for messages of ``nbytes`` bytes, and of
    the whole chain queued at once (CUDA events on the halo stream)."""
    import cupy as cp

    n = nbytes // 8
    send, recv = cp.ones(n, dtype=np.float64), cp.empty(n, dtype=np.float64)
    index = cp.asarray(np.random.default_rng(0).permutation(4 * n)[:n])
    field = cp.ones(4 * n, dtype=np.float64)
    stream = cp.cuda.Stream(non_blocking=True)
    peer = 1 - comm.Get_rank()

    def gather():
        with stream:
            cp.take(field, index, out=send)

    def transfer():
        link.exchange({peer: send}, {peer: recv}, stream)

    def scatter():
        with stream:
            field[index] = recv

    def synced(fn):
        def run():
            fn()
            stream.synchronize()
        return run

    def lined_up(fn):
        def run():
            comm.Barrier()
            fn()
        return run

    out = {"transport": "nccl", "MB": nbytes / 1e6, "chunk_MB": 0.0, "pinned_mpi": False}
    out["gather"] = _median_us(synced(gather), repeats)
    out["nccl"] = _median_us(lined_up(synced(transfer)), repeats) - _median_us(comm.Barrier,
                                                                                repeats)
    out["scatter"] = _median_us(synced(scatter), repeats)
    out["chain"] = out["gather"] + out["nccl"] + out["scatter"]
    start, end, queued = cp.cuda.Event(), cp.cuda.Event(), []
    for k in range(repeats + 3):
        comm.Barrier()
        start.record(stream)
        gather()
        transfer()
        scatter()
        end.record(stream)
        end.synchronize()
        if k >= 3:
            queued.append(1e3 * cp.cuda.get_elapsed_time(start, end))
    out["chain_queued"] = float(np.median(queued))
    return out


def _table(name: str, rows: list[dict]) -> list[str]:
    lines = [f"Halo exchange links on {name}, two ranks, median microseconds", "",
             "| transport | MB | MPI pieces, MB | MPI buffer | gather | to host | exchange (both "
             "ways) | to device | scatter | chain (sum) | chain, queued |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def cell(row, key):
        return f"{row[key]:.0f}" if key in row else "-"

    for r in rows:
        host = r["transport"] == "host"
        pieces = f"{r['chunk_MB'] or r['MB']:.2f}" if host else "-"
        buffer = ("page-locked" if r["pinned_mpi"] else "pageable") if host else "device"
        lines.append(f"| {r['transport']} | {r['MB']:.2f} | {pieces} | {buffer} | "
                     f"{cell(r, 'gather')} | {cell(r, 'd2h')} | "
                     f"{cell(r, 'mpi' if host else 'nccl')} | {cell(r, 'h2d')} | "
                     f"{cell(r, 'scatter')} | {cell(r, 'chain')} | {cell(r, 'chain_queued')} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Entry point (under mpirun with two ranks)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, nargs="+", default=list(DEFAULT_MB))
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--chunk-mb", type=float, nargs="+", default=[0.0],
                        help="MPI message pieces to try, MB (0: one message per peer)")
    parser.add_argument("--pageable", action="store_true",
                        help="also try MPI from ordinary (not page-locked) host memory")
    parser.add_argument("--transport", nargs="+", default=["host", "nccl"],
                        choices=["host", "nccl"], help="chains to time (default both)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    from solver.distributed import bind_local_gpu, world

    comm = world()
    if comm.Get_size() != 2:
        raise SystemExit("error: run with exactly two ranks (mpirun -n 2).")
    bind_local_gpu(comm)  # one GPU per rank, as the solver does; before CUDA starts
    rows = []
    if "host" in args.transport:
        rows += [measure(comm, int(mb * 1e6), args.repeats, int(chunk * 1e6), pinned)
                 for mb in args.mb for chunk in args.chunk_mb
                 for pinned in ((True, False) if args.pageable else (True,))]
    if "nccl" in args.transport:
        from solver.backends import get_backend

        link = get_backend("cupy").nccl_link(comm)
        rows += [measure_nccl(comm, link, int(mb * 1e6), args.repeats) for mb in args.mb]
        link.close()
    if comm.Get_rank() == 0:
        import cupy as cp

        name = cp.cuda.runtime.getDeviceProperties(0)["name"]
        name = name.decode() if isinstance(name, bytes) else name
        print("\n".join(_table(name, rows)), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"device": name, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
