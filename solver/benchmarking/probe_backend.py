"""What only the benchmarks ask of the CuPy backend, kept out of the backend package.

:class:`ProbeBackend` is :class:`~solver.backends.cuda.backend.CupyBackend` plus the paper's
probe kernels (section 4.1: read/write only, propagation only) timed on a run's state, and
re-laid views of one allocation under changed settings (layout, tiles per block, collision), so
that a benchmark times every kernel variant on one allocation. ``python -m solver bench``,
:mod:`solver.benchmarking` and the scripts under ``benchmarks/`` use it; simulations and the app
never do. CuPy is the backend's array module (``self.xp``): only the backend package imports it.
"""

from __future__ import annotations

from dataclasses import replace

from ..backends.cuda.backend import CupyBackend
from ..backends.cuda.boundary import boundary_values
from ..backends.cuda.compact_run import CompactRun
from ..backends.cuda.iolet_launch import device_iolets
from ..backends.cuda.kernels import KernelVariant, kernel_source
from ..backends.cuda.tables import check_tile_shape, physics_args, slot_table
from ..backends.cuda.tiled_run import TiledRun

__all__ = ["PROBE_MODES", "ProbeBackend"]

#: Kernel modes a probe launches: the full step and the paper's two probes.
PROBE_MODES = ("full", "propagate", "readwrite")


class ProbeBackend(CupyBackend):
    """The CuPy backend with the benchmarks' probes and re-laid views (never a run's backend)."""

    def probe(self, state: TiledRun | CompactRun, mode: str, n: int = 1,
              tiles_per_block: int | None = None) -> float:
        """Run ``n`` launches of a probe ('readwrite', 'propagate') or 'full'; event seconds.

        The probes move the same bytes as a step but skip collision ('propagate') or also the
        neighbour access ('readwrite'); they change the state, so use them for timing only.
        """
        if mode not in PROBE_MODES:
            raise ValueError(f"Unknown kernel mode {mode!r}; use 'full', 'propagate' or "
                             "'readwrite'.")
        if isinstance(state, CompactRun):
            if mode != "full":  # the compact probes are benchmarks/compact/compact_probe.py's
                raise ValueError(f"probe {mode!r} runs on the tiled storage; allocate with "
                                 "tile_storage='tiled' (compact probes: "
                                 "benchmarks/compact/compact_probe.py).")
            return state.step(n)
        return state.timed(n, mode, tiles_per_block or state.problem.tiles_per_block)

    def reconfigure(self, state: TiledRun, **changes) -> TiledRun:
        """The same device populations under changed problem settings (a new state view).

        ``changes`` are :class:`~solver.problem.Problem` fields other than the geometry, its
        boundary conditions and the dtype, e.g. ``layout``, ``tiles_per_block``, ``collision``,
        ``incompressible``, ``rates`` (MRT needs ``solver.mrt.MRTRates``); the data are re-laid
        on the device when the layout changes. The new state shares the device arrays, so keep
        using only the new one. The benchmarks time every kernel variant on one allocation
        this way.
        """
        fixed = {"tiling", "dtype", "storage_kind", "lattice", "faces", "objects", "labels",
                 "periodic", "rho0", "streaming", "tile_storage"}
        if fixed & changes.keys() or isinstance(state, CompactRun):
            raise ValueError(f"reconfigure() keeps {', '.join(sorted(fixed))} and runs on the "
                             "tiled storage; allocate anew.")
        problem = replace(state.problem, **changes)
        cached = state.problem.__dict__.get("boundary")  # functools.cached_property storage
        if cached is not None:  # same geometry and faces: only Ladd's density may change
            problem.__dict__["boundary"] = replace(
                cached, rho_wall=1.0 if problem.incompressible else problem.rho0)
        check_tile_shape(problem.lattice.name, problem.tiling.a, problem.tiles_per_block)
        kernel_source(KernelVariant.for_problem(problem))  # refuses what the kernel lacks
        cp = self.xp
        state.latest()  # in place: decode with the old kernels before anything changes
        slots = cp.asarray(slot_table(problem.lattice.name, problem.layout, problem.tiling.a))
        tables = dict(state.tables)
        if tables["bc"].size > 1:
            tables["bc"] = cp.asarray(boundary_values(problem).astype(problem.dtype))
        new = replace(state, problem=problem, slots=slots, launches={}, graphs=None,
                      real_args=physics_args(problem), identity_slots=None, tables=tables,
                      iolets=device_iolets(problem, cp.asnumpy(slots)))
        if new.iolets is not None and state.iolets is not None:  # the soft start goes on
            new.iolets.step[...] = state.iolets.step
            wk = state.iolets.windkessel  # and the Windkessel outlets' state
            if wk is not None:
                new.iolets.attach_windkessel(wk.table, cp.asnumpy(wk.state))
        if not bool((slots == state.slots).all()):
            q = cp.arange(problem.lattice.q)[:, None]
            for c in range(state.f.shape[0]):
                new.f[c][:, q, slots] = state.f[c][:, q, state.slots]
        if problem.rho0 != state.problem.rho0:  # solid nodes hold the rest state of rho0
            self.set_populations(new, self.populations(new))
        return new
