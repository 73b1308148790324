"""A model of one distributed step: halo bytes, overlap and per-step latency, predicting the
parallel efficiency of slab-decomposed runs at 16 and 64 GPUs (see halo_model.md).

One step of a rank (``solver/backends/cuda/phases.py``): the boundary tiles, then the halo chain
(gather, NCCL send/recv per neighbour, scatter) on one stream, the interior tiles on another;
the step ends when both are done, plus a per-step time that does not shrink with the work
(host launches, the halo chain's fixed cost, waiting for the slowest rank)::

    compute  = N_local / rate                    (fluid-node updates per second of one GPU)
    boundary = compute * min(1, 2 a / L)         (two tile layers of a slab L nodes thick)
    halo     = latency + bytes_per_face / bandwidth   (NVLink in a node, the network between)
    T(n)     = max(compute, boundary + halo) + exposed * halo + fixed + per_peer * peers

``exposed`` is the share of the halo chain that the interior does not hide (its gather,
scatter and NCCL kernels take SMs and memory bandwidth from the interior). Weak efficiency is
``T(1) / T(n)``, strong ``T(1) / (n T(n))``. ``fixed``, ``per_peer`` and ``exposed`` are
fitted (least squares, non-negative) to measured points; ``rate`` is the one-rank point's;
the chain's latency and bandwidth default to ``benchmarks/scaling/halo_cost.py``'s NCCL
measurement on 2 x H200 (1.03 MB: 73 us, 9.4 MB: 144 us). Usage::

    python benchmarks/scaling/halo_model.py                         # the issue's 4 x H100 numbers
    python benchmarks/scaling/halo_model.py RESULTS/scaling-*.json  # fit to scaling.py output
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

__all__ = ["Case", "Machine", "Point", "step_seconds", "efficiency", "fit", "predict_table",
           "ISSUE_POINTS"]

#: D3Q19 directions that cross a slab face.
CROSSING = 5
#: Tile edge (nodes).
TILE = 4


@dataclass(frozen=True)
class Case:
    """A scaling case: ``shape`` (x, y, z) is the whole box (strong) or one rank's (weak, the
    box repeated along z); slabs cut z; ``porosity`` the fluid fraction; ``value_bytes`` 4
    (float32), 2 (float16) or 8; ``periodic``: the slabs wrap (every rank has two faces)."""

    name: str
    shape: tuple[int, int, int]
    porosity: float
    weak: bool
    value_bytes: int = 4
    periodic: bool = True

    def fluid_per_rank(self, n: int) -> float:
        """Fluid nodes one rank steps."""
        nodes = math.prod(self.shape) * self.porosity
        return nodes if self.weak else nodes / n

    def thickness(self, n: int) -> float:
        """Nodes along z of one slab."""
        return self.shape[2] if self.weak else self.shape[2] / n

    def face_bytes(self) -> float:
        """Bytes one rank sends across one slab face per step: the fluid nodes of the face
        layer times the crossing directions."""
        return self.shape[0] * self.shape[1] * self.porosity * CROSSING * self.value_bytes

    def peers(self, n: int) -> int:
        """Distinct neighbours of a rank (2 in a ring of 3 or more, 1 with 2 ranks)."""
        if n == 1:
            return 0
        return 1 if n == 2 or not self.periodic and n == 2 else 2


@dataclass(frozen=True)
class Machine:
    """GPUs and links: ``rate`` fluid-node updates/s of one GPU; ``nvlink`` and ``network``
    bytes/s of one halo transfer inside a node and between nodes; ``latency`` seconds of a
    halo chain (gather, send/recv, scatter) of no bytes, ``network_latency`` extra seconds
    between nodes; fitted: ``fixed`` and ``per_peer`` seconds per step, ``exposed`` share of
    the chain not hidden; ``gpus_per_node``."""

    rate: float
    nvlink: float = 118e9
    network: float = 25e9
    latency: float = 62e-6
    network_latency: float = 10e-6
    fixed: float = 0.0
    per_peer: float = 0.0
    exposed: float = 0.0
    gpus_per_node: int = 8


@dataclass(frozen=True)
class Point:
    """A measured point: ``case`` on ``ranks`` ranks took ``seconds`` per step."""

    case: Case
    ranks: int
    seconds: float


def halo_seconds(case: Case, machine: Machine, n: int) -> float:
    """Seconds of one rank's halo chain per step (0 on one rank)."""
    if n == 1:
        return 0.0
    across_nodes = n > machine.gpus_per_node  # node-boundary ranks send one face over it
    bandwidth = machine.network if across_nodes else machine.nvlink
    return machine.latency + case.face_bytes() / bandwidth + (
        machine.network_latency if across_nodes else 0.0)


def step_seconds(case: Case, machine: Machine, n: int) -> float:
    """Modelled seconds of one step on ``n`` ranks (the slowest rank's)."""
    compute = case.fluid_per_rank(n) / machine.rate
    if n == 1:
        return compute
    boundary = compute * min(1.0, 2 * TILE / case.thickness(n))
    halo = halo_seconds(case, machine, n)
    return max(compute, boundary + halo) + machine.exposed * halo + machine.fixed \
        + machine.per_peer * case.peers(n)


def efficiency(case: Case, machine: Machine, n: int) -> float:
    """Parallel efficiency on ``n`` ranks against one (weak: T1/Tn; strong: T1/(n Tn))."""
    ratio = step_seconds(case, machine, 1) / step_seconds(case, machine, n)
    return ratio if case.weak else ratio / n


def fit(points: list[Point], machine: Machine) -> Machine:
    """``machine`` with ``fixed``, ``per_peer`` and ``exposed`` fitted to the multi-rank
    ``points``: non-negative least squares on the seconds the overlap model leaves over (each
    column dropped in turn while its coefficient comes out negative)."""
    rows, rest = [], []
    bare = replace(machine, fixed=0.0, per_peer=0.0, exposed=0.0)
    for p in points:
        if p.ranks > 1:
            rows.append([1.0, p.case.peers(p.ranks), halo_seconds(p.case, bare, p.ranks)])
            rest.append(p.seconds - step_seconds(p.case, bare, p.ranks))
    if not rows:
        return machine
    a, b = np.array(rows), np.array(rest)
    keep = [0, 1, 2]
    coef = np.zeros(3)
    while keep:
        sol = np.linalg.lstsq(a[:, keep], b, rcond=None)[0]
        if (sol >= 0).all():
            coef[keep] = sol
            break
        keep.pop(int(np.argmin(sol)))
    return replace(machine, fixed=float(coef[0]), per_peer=float(coef[1]),
                   exposed=float(coef[2]))


def predict_table(cases: list[Case], machine: Machine, ranks=(2, 4, 16, 64),
                  measured: list[Point] = ()) -> str:
    """Markdown: modelled (and measured, where given) efficiency per case and rank count."""
    lines = ["| case | " + " | ".join(f"{n} GPUs" for n in ranks) + " |",
             "| --- | " + " | ".join("---:" for _ in ranks) + " |"]
    for case in cases:
        cells = []
        for n in ranks:
            cell = f"{efficiency(case, machine, n):.2f}"
            got = [p for p in measured if p.case == case and p.ranks == n]
            if got:
                base = [p for p in measured if p.case == case and p.ranks == 1]
                if base:
                    e = base[0].seconds / got[0].seconds / (1 if case.weak else n)
                    cell += f" (measured {e:.2f})"
            cells.append(cell)
        lines.append(f"| {case.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The issue's measurement (4 x H100, NVLink between every pair, float32 BGK, NCCL, sphere
#: pack porosity 0.8; commit ccff6fb): 1-GPU rates 17.2 (weak) and 17.7 (strong) G/s,
#: efficiencies 0.91 / 0.71 (weak) and 0.97 / 0.85 (strong) on 2 / 4 GPUs.
ISSUE_WEAK = Case("weak 192x192x96 per rank, phi 0.8", (192, 192, 96), 0.763, True)
ISSUE_STRONG = Case("strong 384^3, phi 0.8", (384, 384, 384), 0.7675, False)


def _issue_points() -> list[Point]:
    points = []
    for case, rate, effs in ((ISSUE_WEAK, 17.2e9, (1.0, 0.91, 0.71)),
                             (ISSUE_STRONG, 17.7e9, (1.0, 0.97, 0.85))):
        t1 = case.fluid_per_rank(1) / rate
        for n, e in zip((1, 2, 4), effs, strict=True):
            points.append(Point(case, n, t1 / e / (1 if case.weak else n)))
    return points


ISSUE_POINTS = _issue_points()

#: The cases this issue asks for: weak 384^3 per rank and strong 768^3 rock-like (phi ~0.2),
#: float32 and float16 storage.
TARGETS = [Case(f"weak 384^3 per rank, phi 0.2, {b * 8} bit", (384, 384, 384), 0.2, True, b)
           for b in (4, 2)] + \
          [Case(f"strong 768^3, phi 0.2, {b * 8} bit", (768, 768, 768), 0.2, False, b)
           for b in (4, 2)]


def _points_of(paths: list[Path]) -> tuple[list[Point], float]:
    """Measured points of scaling JSON files (NCCL or one-rank) and the one-rank rate."""
    points, rates = [], []
    for path in paths:
        data = json.loads(path.read_text())
        for r in data["results"]:
            if "error" in r or r["ranks"] > 1 and r.get("transport") != "nccl":
                continue
            shape = tuple(r["shape"])
            per_rank = (shape[0], shape[1], shape[2] // r["ranks"]) if r["case"] == "weak" \
                else shape
            bytes_ = 2 if r.get("storage") == "float16" else (8 if r["precision"] == "float64"
                                                              else 4)
            case = Case(f"{r['case']} {'x'.join(map(str, shape))} ({path.stem})", per_rank,
                        r["fluid_nodes"] / math.prod(shape), r["case"] == "weak", bytes_)
            points.append(Point(case, r["ranks"], r["ms_per_step"] / 1e3))
            if r["ranks"] == 1:
                rates.append(r["fluid_nodes"] / (r["ms_per_step"] / 1e3))
    return points, (float(np.median(rates)) if rates else 17.2e9)


def main(argv: list[str] | None = None) -> int:
    """Fit the model to measured points (the issue's, or scaling JSON files) and print the
    predictions at 2, 4, 16 and 64 GPUs."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="*", type=Path,
                        help="benchmarks/scaling/scaling.py JSON files")
    parser.add_argument("--network", type=float, default=25e9,
                        help="bytes/s between nodes per GPU (25e9: HDR 200 Gb/s)")
    args = parser.parse_args(argv)
    points, rate = _points_of(args.results) if args.results else (ISSUE_POINTS, 17.2e9)
    machine = fit(points, Machine(rate=rate, network=args.network))
    cases = list(dict.fromkeys(p.case for p in points))
    print(f"rate {machine.rate / 1e9:.1f} G/s per GPU; halo chain {machine.latency * 1e6:.0f} "
          f"us + bytes at NVLink {machine.nvlink / 1e9:.0f} GB/s (network "
          f"{machine.network / 1e9:.0f} GB/s + {machine.network_latency * 1e6:.0f} us), "
          f"{machine.gpus_per_node} GPUs per node; fitted: fixed {machine.fixed * 1e6:.1f} us "
          f"+ {machine.per_peer * 1e6:.1f} us per neighbour + {machine.exposed:.2f} of the "
          "chain exposed\n")
    print(predict_table(cases, machine, measured=points))
    print()
    print(predict_table(TARGETS, machine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
