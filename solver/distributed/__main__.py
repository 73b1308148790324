"""``mpirun -n N python -m solver.distributed GEOMETRY.npy`` — a distributed run from the shell.

The entry point until the headless ``python -m solver run CASE`` drives MPI itself. The geometry
is a boolean ``.npy`` mask (True = solid, axes (x, y[, z])); configuration fields are set with
``--set key=value`` (values parsed as JSON, lists become tuples), e.g. ``--set tau=0.7
--set body_force=[1e-5,0,0] --set y_min=wall --set y_max=wall``. Rank 0 logs the decomposition
and MFLUPS and, with ``--save``, writes the gathered populations (float64, global tile order,
the layout of ``Simulation.populations()``), the fields ``rho`` and ``u`` (NaN in solids), the
step count, the health numbers (``health_*``, reduced on the ranks) and how many steps rank 0
ran as CUDA-graph replays to an ``.npz``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

from ..config import BACKENDS, HALO_TRANSPORTS

__all__ = ["main", "build_parser", "parse_settings"]

log = logging.getLogger("solver.distributed")


def parse_settings(items: list[str]) -> dict:
    """``key=value`` strings as SimulationConfig keyword arguments (JSON values)."""
    settings = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep:
            raise SystemExit(f"error: --set expects key=value, got {item!r}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text  # bare words such as wall or D3Q19
        settings[key.strip()] = tuple(value) if isinstance(value, list) else value
    return settings


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of ``python -m solver.distributed``."""
    parser = argparse.ArgumentParser(prog="python -m solver.distributed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("geometry", type=Path, help="boolean .npy solid mask (True = solid)")
    parser.add_argument("--steps", type=int, nargs="+", default=[100],
                        help="time steps; several numbers run as that many step() calls")
    parser.add_argument("--backend", default="numpy", choices=list(BACKENDS))
    parser.add_argument("--transport", default="auto", choices=list(HALO_TRANSPORTS),
                        help="halo transport: nccl (GPU to GPU), host (MPI through host "
                             "memory) or auto (nccl when every rank has its own GPU)")
    parser.add_argument("--graphs", action="store_true",
                        help="with the NCCL transport, replay captured CUDA graphs of 16 steps "
                             "(off by default: slower on 2 x H200, see "
                             "benchmarks/scaling/README.md)")
    parser.add_argument("--axis", default="longest",
                        help="decomposition axis: longest, flow or 0/1/2")
    parser.add_argument("--set", dest="settings", action="append", default=[],
                        metavar="KEY=VALUE", help="SimulationConfig field (repeatable)")
    parser.add_argument("--initial", type=Path, default=None,
                        help=".npy of start populations (n_tiles, q, a**d), global tile order")
    parser.add_argument("--save", type=Path, default=None, help="write populations to .npz")
    return parser


def _run(args: argparse.Namespace, backend) -> int:
    from ..simulation import Simulation, SimulationConfig

    config = SimulationConfig(**parse_settings(args.settings))
    solid = np.load(args.geometry, allow_pickle=False)
    sim = Simulation(solid, config, backend=backend)
    sim.allocate()
    if args.initial is not None:
        sim.backend.set_populations(sim.state, np.load(args.initial, allow_pickle=False))
    decomposition = sim.state.counts
    log.info("%d ranks, tiles per rank %s, axis %s, halo transport %s", backend.size,
             decomposition.tolist(), backend.axis, backend.transport_used)
    for n in args.steps:
        sim.step(n)
    graphs = sim.state.solver.graphs  # rank 0's: how many steps ran as CUDA-graph replays
    replayed = graphs.counts["replayed"] if graphs is not None else 0
    m = sim.metrics
    log.info("%d steps, %d fluid nodes: %.2f MFLUPS", m.steps, m.fluid_nodes, m.mflups_mean)
    if args.save is not None:
        fields, health = sim.fields(), sim.health()
        np.savez(args.save, populations=sim.populations(), rho=fields["rho"], u=fields["u"],
                 health_finite=np.array(health["finite"]),
                 health_max_speed=np.array(health["max_speed"]),
                 health_mean_velocity=health["mean_velocity"],
                 health_mean_momentum=health["mean_momentum"],
                 health_layer_density=np.array(health["layer_density"] or (), np.float64),
                 step=np.array(sim.time_step), mflups=np.array(m.mflups_mean),
                 ranks=np.array(backend.size), tiles_per_rank=decomposition,
                 transport=np.array(backend.transport_used),
                 replayed_steps=np.array(replayed))
    sim.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code on rank 0 (0 on the serving ranks)."""
    from ..config import ConfigError
    from .launch import launch

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    axis = int(args.axis) if args.axis.isdigit() else args.axis
    try:
        code = launch(lambda backend: _run(args, backend), inner=args.backend, axis=axis,
                      transport=args.transport, graphs=args.graphs)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
