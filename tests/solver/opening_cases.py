"""A small channel driven through its openings, shared by the distributed-openings tests and
their ``mpirun`` driver (``python -m tests.solver.opening_cases OUT.npz``).

The channel runs along x (29 nodes: the last tile layer holds one node layer, so an outflow
link's inward neighbour lies in the tile layer before it, which another rank may own), with
walls on y and z and a solid block inside; its two x faces are openings 1 and 2. The driver
runs, on a :class:`~solver.distributed.DistributedBackend` when launched under ``mpirun`` (or on
one NumPy process with ``--single``): steps inside the soft start, a checkpoint, more steps, a
changed outlet density (a Windkessel's call), and a resume from the checkpoint on the same
backend; it writes populations, per-link fluxes, flow rates and wall shear stress to an .npz.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["channel", "channel_config", "OPENINGS", "scenario", "windkessel_run"]

#: The driven cases: a Poiseuille velocity inlet with an outflow outlet, two pressures.
OPENINGS = {
    "velocity-outflow": {1: {"kind": "velocity", "value": 0.02, "profile": "poiseuille"},
                         2: "outflow"},
    "pressures": {1: {"kind": "pressure", "value": 1.01}, 2: {"kind": "pressure", "value": 1.0}},
}


def channel():
    """The channel (29, 10, 11) with openings on both x faces (a VoxelGeometry)."""
    from geometries import VoxelGeometry
    from geometries.openings import face_openings

    solid = np.zeros((29, 10, 11), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    solid[:, :, 0] = solid[:, :, -1] = True
    solid[10:14, 3:6, 4:7] = True
    plain = VoxelGeometry(solid, flow_axis=0)
    return VoxelGeometry(solid, flow_axis=0, openings=face_openings(plain, (0,)))


def channel_config(case: str, **extra):
    """float64 TRT with the openings of ``OPENINGS[case]`` and a 12-step soft start."""
    from solver.config import SimulationConfig

    return SimulationConfig(lattice="D3Q19", collision="TRT", tau=0.8, precision="float64",
                            openings=OPENINGS[case], ramp_steps=12, x_min="wall",
                            x_max="wall", backend="numpy", **extra)


def scenario(backend, folder: Path, **extra) -> dict[str, np.ndarray]:
    """The driver's run of both cases on ``backend`` (see the module docstring), ``extra``
    config settings added."""
    from solver.simulation import Simulation

    out = {}
    geometry = channel()
    for case in OPENINGS:
        sim = Simulation(geometry, channel_config(case, **extra), backend=backend)
        sim.step(5)
        path = sim.save(folder / f"{case}.npz")
        sim.step(9)  # past the soft start
        if case == "pressures":
            sim.set_opening_densities({2: 0.995})
            sim.step(3)
        out[f"{case}/populations"] = sim.populations()
        out[f"{case}/flux"] = sim.backend.iolet_flux(sim.state)
        out[f"{case}/flows"] = np.array([f.flow_rate for f in sim.opening_flows()])
        out[f"{case}/density"] = np.array([f.mean_density for f in sim.opening_flows()])
        out[f"{case}/wss"] = sim.wall_shear_stress()
        sim.close()
        resumed = Simulation.load(path, geometry, backend=backend)
        out[f"{case}/resumed_flows_at_load"] = np.array(
            [f.flow_rate for f in resumed.opening_flows()])
        resumed.step(9)
        out[f"{case}/resumed"] = resumed.populations()
        resumed.close()
    return out


def windkessel_run(backend, steps: int = 23) -> dict[str, np.ndarray]:
    """The pressure-driven channel with an RCR outlet on opening 2 (updated every 5 steps):
    its populations, outlet state and trace after ``steps`` steps, read once mid-interval."""
    from solver.simulation import Simulation
    from solver.units import UnitSystem
    from solver.windkessel import Windkessel, WindkesselCoupling

    sim = Simulation(channel(), channel_config("pressures"), backend=backend)
    coupling = WindkesselCoupling({2: Windkessel(1.2e8, 1.0e-9, 1.5e9, distal_pressure=500.0)},
                                  UnitSystem(dx=1e-3, dt=1e-4, density=1000.0), every=5)
    coupling.start(sim)
    sim.step(steps - 4)
    sim.step(4)
    out = {"windkessel/populations": sim.populations(),
           "windkessel/state": sim.windkessel_state(), "windkessel/trace": sim.windkessel_trace()}
    sim.close()
    return out


def main(argv: list[str]) -> int:
    """``OUT.npz [--single] [--axis N] [--backend B] [--streaming S] [--windkessel]``: run
    :func:`scenario` (and with ``--windkessel`` :func:`windkessel_run`) under MPI (split along
    axis N, halos through host memory, each rank on backend B, default numpy) or on one
    process, to OUT."""
    target = Path(argv[0])
    extra = {"streaming": argv[argv.index("--streaming") + 1]} if "--streaming" in argv else {}
    with tempfile.TemporaryDirectory() as tmp:
        inner = argv[argv.index("--backend") + 1] if "--backend" in argv else "numpy"
        if "--single" in argv:
            from solver.backends import get_backend
            from solver.backends.numpy_backend import NumpyBackend

            single = NumpyBackend(threads=1) if inner == "numpy" else get_backend(inner)
            np.savez(target, **scenario(single, Path(tmp), **extra),
                     **(windkessel_run(single) if "--windkessel" in argv else {}))
            return 0
        from solver.distributed import launch

        def run(backend) -> int:
            np.savez(target, ranks=backend.size, **scenario(backend, Path(tmp), **extra),
                     **(windkessel_run(backend) if "--windkessel" in argv else {}))
            return 0

        axis = int(argv[argv.index("--axis") + 1]) if "--axis" in argv else "longest"
        return launch(run, inner=inner, axis=axis, transport="host") or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
