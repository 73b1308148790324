"""One rank's share of a distributed run: its local problem, state, stepper and exchange.

:class:`RankSolver` composes a rank-local :class:`~solver.problem.Problem` — the global one
with the rank's local tiling (owned + halo tiles, global coordinates) and the ``owned`` mask —
allocates it on an ordinary backend and steps it with the halo exchange overlapped::

    post receives -> boundary tiles -> pack + send -> interior tiles (polling) -> wait + unpack
    -> swap copies

In place (one copy, AA pattern: the GPU stepper's ``in_place``) the copy is not swapped but
its phase flips, and the exchange after a step alternates between the halo plan and its reverse
(:class:`~solver.distributed.exchange.PhasedExchange`).

:attr:`RankSolver.host_seconds` adds up the host's wall time per phase ('launch': post,
boundary and the swap; 'pack': packing and waiting until the packed values can be sent, then
the sends; 'interior'; 'halo': waiting for the messages and unpacking; with graphs also
'capture' and 'replay', the launches of captured steps), so a benchmark can see where a step
waits.

When the exchange is ``capturable`` (NCCL) and the stepper can capture steps
(``capture_steps``/``replay``, the CuPy one), :attr:`RankSolver.graphs` holds a
:class:`~solver.distributed.replay.StepGraphs`; enabled (``graphs=True``), :meth:`RankSolver.step`
runs long runs as replays of a captured multi-step CUDA graph. Otherwise, and for the few plain
steps a plan needs, it calls the phases from Python as above.

:func:`step_together` drives several ranks in one process (with a
:class:`~solver.distributed.exchange.LoopbackHub`), phase by phase, which is how the
decomposition is tested without MPI.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..backends import Backend
from ..backends.plan import plan_for
from ..problem import Problem
from .decomposition import SlabDecomposition
from .exchange import HaloExchange, PhasedExchange
from .halo import HaloPlan, build_rank, check_plan_covers, in_place_plans
from .openings import pass_reads, rank_tables
from .replay import StepGraphs
from .stepper import RankStepper, stepper_for

__all__ = ["RankSolver", "step_together"]

ExchangeFactory = Callable[[HaloPlan, RankStepper], HaloExchange]


class RankSolver:
    """Owned tiles of ``rank`` on ``backend``, stepped with a halo exchange."""

    def __init__(self, problem: Problem, decomposition: SlabDecomposition, rank: int,
                 backend: Backend, exchange: ExchangeFactory, graphs: bool = False,
                 link_numbers: np.ndarray | None = None) -> None:
        tables = problem.iolets  # the global openings' links, built once from the whole box
        q, npt = problem.lattice.q, problem.tiling.nodes_per_tile
        # One copy (AA pattern) on a GPU backend's stepper: the pass reads either phase's
        # layout, and the exchange after a phase-0 step carries the phase-1 reads.
        in_place = problem.population_copies == 1 and backend.phase_stepper is not None
        self.layout, self.plan = build_rank(
            problem.tiling, decomposition, problem.lattice, problem.periodic, rank,
            pass_reads(tables, decomposition, q, npt),
            pass_reads(tables, decomposition, q, npt, parity=1) if in_place else None)
        local, links = rank_tables(tables, self.layout.global_tiles, self.layout.n_owned,
                                   problem.tiling.n_tiles, in_place)
        #: Global numbers of this rank's opening links (int64), the order of its flux
        #: (``link_numbers``: the global numbers of ``problem.iolets``' links when ``problem``
        #: is a part of the whole, :mod:`~solver.distributed.slab_parts`).
        self.links: np.ndarray = links if link_numbers is None else link_numbers[links]
        # A GPU backend's tile storage is decided once, on the whole problem as a rank sees
        # it: the ranks' own tile utilisations differ, and tiled and compact storage agree to
        # rounding only.
        storage = problem.tile_storage
        if backend.phase_stepper is not None:
            as_rank = dataclasses.replace(problem, owned=np.ones(problem.tiling.n_tiles, bool))
            storage = plan_for(as_rank.use_iolets(tables)).tile_storage
        self.problem = dataclasses.replace(problem, tiling=self.layout.tiling,
                                           owned=self.layout.owned,
                                           tile_storage=storage).use_iolets(local)
        self.backend = backend
        self.stepper = stepper_for(backend, self.problem, self.layout)
        self.state: Any = self.stepper.state
        for table in getattr(self.stepper, "pull_tables", ()):  # exactly what a step reads
            check_plan_covers(table, self.plan, self.layout, problem.lattice.q)
        #: The per-step exchange; in place (one copy, AA pattern) the plan's or its reverse
        #: by the phase of the step (:func:`~solver.distributed.halo.in_place_plans`).
        self.exchange: HaloExchange = exchange(self.plan, self.stepper)
        if getattr(self.stepper, "in_place", False):
            self.exchange = PhasedExchange(
                (exchange(in_place_plans(self.plan)[0], self.stepper), self.exchange),
                self.stepper)
        #: Host wall time per step phase, seconds (see the module docstring).
        self.host_seconds: Counter[str] = Counter()
        #: Graph replays of whole steps (``graphs.enabled``), or None where steps cannot be
        #: captured.
        self.graphs: StepGraphs | None = None
        if getattr(self.exchange, "capturable", False) and hasattr(self.stepper, "replay"):
            self.graphs = StepGraphs(self.stepper, enabled=graphs)

    @property
    def n_owned(self) -> int:
        """Tiles this rank steps."""
        return self.layout.n_owned

    def begin_step(self) -> None:
        """Post receives, compute the boundary tiles and send them."""
        t0 = time.perf_counter()
        self.exchange.post()
        self.stepper.boundary()
        t1 = time.perf_counter()
        self.exchange.start(self.stepper.target())
        self.host_seconds["launch"] += t1 - t0
        self.host_seconds["pack"] += time.perf_counter() - t1

    def end_step(self) -> None:
        """Compute the interior tiles, receive the halo, swap copies."""
        t0 = time.perf_counter()
        self.stepper.interior(self.exchange.progress)
        t1 = time.perf_counter()
        self.exchange.finish(self.stepper.target())
        t2 = time.perf_counter()
        self.stepper.finish()
        self.host_seconds["interior"] += t1 - t0
        self.host_seconds["halo"] += t2 - t1
        self.host_seconds["launch"] += time.perf_counter() - t2

    def step(self, n: int = 1) -> None:
        """Advance ``n`` time steps (collective over the ranks of the exchange); returns when
        the device has finished them."""
        if self.graphs is not None:
            before = self.graphs.host_seconds.copy()
            self.graphs.run(n, self._one_step)
            self.host_seconds.update(self.graphs.host_seconds - before)
        else:
            for _ in range(n):
                self._one_step()
        self.stepper.idle()

    def _one_step(self) -> None:
        self.begin_step()
        self.end_step()

    def owned_populations(self) -> np.ndarray:
        """Latest populations of the owned tiles, host float64 (n_owned, q, a**d)."""
        self.stepper.idle()
        return self.backend.populations(self.state)[: self.n_owned]

    def owned_readout(self, tiles: slice | np.ndarray) -> np.ndarray:
        """Latest populations of the owned tiles ``tiles`` (a slice or an index array of
        this rank's tile numbers), host, in the arithmetic precision: what a readout of one
        process reads (NumPy: a view when ``tiles`` is a slice; no whole-state copy)."""
        self.stepper.idle()
        return np.asarray(self.backend.to_host(self.backend.device_populations(self.state,
                                                                               tiles)))

    def readout_tiles(self) -> int:
        """Tiles per :meth:`owned_readout` chunk (the backend's readout chunk)."""
        return max(1, int(self.backend.readout_tiles(self.state)))

    def set_owned_populations(self, f: np.ndarray) -> None:
        """Overwrite the owned tiles (n_owned, q, a**d) and refresh the halo (collective)."""
        self.stepper.idle()
        full = self.backend.populations(self.state)
        full[: self.n_owned] = f
        self.backend.set_populations(self.state, full)
        self.refresh_halo()

    def refresh_halo(self) -> None:
        """Fill the halo of the latest copy from the neighbours (collective)."""
        self.stepper.idle()  # whatever wrote the copy (on any stream) comes first
        exchange = self.exchange
        if isinstance(exchange, PhasedExchange):  # in place: what the state's phase needs
            exchange = exchange.refresh()
        exchange.post()
        exchange.start(self.stepper.current())
        exchange.finish(self.stepper.current())
        self.stepper.idle()

    def iolet_flux(self) -> np.ndarray:
        """Mass flux of this rank's opening links (:attr:`links`) in the last step, host
        float64 (empty without links)."""
        self.stepper.idle()
        if not self.links.size:
            return np.empty(0)
        return np.asarray(self.backend.iolet_flux(self.state), dtype=np.float64)

    def set_iolet_flux(self, flux: np.ndarray) -> None:
        """Set this rank's share of the global per-link flux ``flux`` (a resumed run's)."""
        if self.links.size:
            self.stepper.idle()
            self.backend.set_iolet_flux(self.state, np.asarray(flux)[self.links])

    def set_iolet_values(self, values: np.ndarray) -> None:
        """Set this rank's share of the global opening-link target values ``values``."""
        if self.links.size:
            self.stepper.idle()
            self.backend.set_iolet_values(self.state, np.asarray(values)[self.links])

    def set_step(self, step: int) -> None:
        """Set the step counter of every phase (openings' soft start and waveforms)."""
        self.stepper.idle()
        self.stepper.set_step(step)

    def release(self) -> None:
        """Free the backend state (graphs first: they replay on it and hold NCCL work)."""
        if self.graphs is not None:
            self.graphs.clear()
        self.stepper.release()


def step_together(ranks: Sequence[RankSolver], n: int = 1) -> None:
    """Step ranks that share one process (loopback exchange), phase by phase."""
    for _ in range(n):
        for r in ranks:
            r.begin_step()
        for r in ranks:
            r.end_step()
    for r in ranks:
        r.stepper.idle()
