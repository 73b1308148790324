"""Halo exchange behind a four-call interface, so transports can be swapped per backend.

Per time step a rank calls ``post()`` (receives for this step), ``start(f)`` after its boundary
tiles are computed (pack the values of :class:`~solver.distributed.halo.HaloPlan` ``send`` from
the flat copy ``f`` into one contiguous buffer per peer and send it), ``progress()`` between
interior pieces, and ``finish(f)`` (wait, then unpack every buffer into the halo slots ``recv``
of ``f``). One message per peer and step; MPI keeps messages between two ranks in order, so a
fixed tag suffices.

Implementations:

- :class:`MpiExchange` — non-blocking ``Isend``/``Irecv`` of contiguous buffers. Written
  against the array interface only (``np.take(..., out=)``, ``np.empty_like``, fancy-index
  assignment dispatch to CuPy through ``__array_function__``), so with CuPy copies and a
  CUDA-aware MPI the same class sends device buffers directly (mpi4py reads
  ``__cuda_array_interface__``); the stepper's ``synchronize`` orders packing before sending.
- GPU alternatives (to be added next to the CuPy backend, same interface): pinned host staging
  (``cudaMemcpyAsync`` of the packed buffer into page-locked host memory on the communication
  stream, then the same ``Isend``/``Irecv``, for MPI builds that are not CUDA-aware — the
  ``mpich`` wheel from PyPI is not) and NCCL through CuPy within a node
  (``ncclGroupStart``/``send``/``recv``/``ncclGroupEnd`` on the communication stream; no host
  round trip, ordering by stream events instead of ``Waitall``; the NCCL unique id travels
  once over MPI).
- :class:`LoopbackHub` — every rank in one process, for tests and debugging without MPI.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .halo import HaloPlan
from .stepper import RankStepper

__all__ = ["HaloExchange", "MpiExchange", "LoopbackHub", "HALO_TAG"]

#: Message tag of halo messages.
HALO_TAG = 17


class HaloExchange(Protocol):
    """One rank's side of the per-step halo exchange."""

    def post(self) -> None:
        """Post the receives of the coming exchange."""

    def start(self, f: Any) -> None:
        """Pack the owned values peers read from flat copy ``f`` and send them."""

    def progress(self) -> None:
        """Let the transport move data while the interior is computed."""

    def finish(self, f: Any) -> None:
        """Wait for every message and unpack it into the halo slots of flat copy ``f``."""


class MpiExchange:
    """Non-blocking point-to-point exchange of contiguous buffers over an MPI communicator."""

    def __init__(self, comm: Any, plan: HaloPlan, stepper: RankStepper) -> None:
        self.comm, self.stepper = comm, stepper
        self.send = {p: stepper.device_index(i) for p, i in plan.send.items() if i.size}
        self.recv = {p: stepper.device_index(i) for p, i in plan.recv.items() if i.size}
        self._buffers: dict[tuple[str, int], Any] = {}
        self._receives: list = []
        self._sends: list = []

    def _buffer(self, kind: str, peer: int, like: Any, n: int) -> Any:
        key = (kind, peer)
        if key not in self._buffers:  # allocated once, on the device of ``like``
            self._buffers[key] = np.empty_like(like, shape=(n,))
        return self._buffers[key]

    def post(self) -> None:
        """Irecv one buffer per peer."""
        like = self.stepper.current()
        self._receives = [self.comm.Irecv(self._buffer("recv", p, like, idx.size), source=p,
                                          tag=HALO_TAG) for p, idx in self.recv.items()]

    def start(self, f: Any) -> None:
        """Pack (gather) every peer's values, then Isend the buffers."""
        for p, idx in self.send.items():
            np.take(f, idx, out=self._buffer("send", p, f, idx.size))
        self.stepper.synchronize()
        self._sends = [self.comm.Isend(self._buffers[("send", p)], dest=p, tag=HALO_TAG)
                       for p in self.send]

    def progress(self) -> None:
        """Test the open requests (MPI moves data only inside MPI calls without a helper
        thread)."""
        if self._receives or self._sends:
            from mpi4py import MPI

            MPI.Request.Testall(self._receives + self._sends)

    def finish(self, f: Any) -> None:
        """Wait for all requests, then scatter the received buffers into ``f``."""
        from mpi4py import MPI

        MPI.Request.Waitall(self._receives + self._sends)
        for p, idx in self.recv.items():
            f[idx] = self._buffers[("recv", p)]
        self._receives, self._sends = [], []


class LoopbackHub:
    """In-process stand-in for MPI: ranks deposit packed buffers, peers collect them."""

    def __init__(self) -> None:
        self.mail: dict[tuple[int, int], np.ndarray] = {}

    def exchange(self, rank: int, plan: HaloPlan, stepper: RankStepper) -> _LoopbackExchange:
        """The HaloExchange of ``rank``."""
        return _LoopbackExchange(self, rank, plan)


class _LoopbackExchange:
    def __init__(self, hub: LoopbackHub, rank: int, plan: HaloPlan) -> None:
        self.hub, self.rank, self.plan = hub, rank, plan

    def post(self) -> None:
        pass

    def start(self, f: np.ndarray) -> None:
        for p, idx in self.plan.send.items():
            self.hub.mail[(self.rank, p)] = f[idx]

    def progress(self) -> None:
        pass

    def finish(self, f: np.ndarray) -> None:
        for p, idx in self.plan.recv.items():
            f[idx] = self.hub.mail.pop((p, self.rank))
