"""Halo exchange behind a four-call interface, so transports can be swapped per backend.

Per time step a rank calls ``post()`` (receives for this step), ``start(f)`` after its boundary
tiles are computed (pack the values of :class:`~solver.distributed.halo.HaloPlan` ``send`` from
the flat copy ``f`` into one contiguous buffer per peer and send it), ``progress()`` between
interior pieces, and ``finish(f)`` (wait, then unpack every buffer into the halo slots ``recv``
of ``f``). One message per peer and step; MPI keeps messages between two ranks in order, so a
fixed tag suffices.

:class:`HaloBuffers` does the packing for every transport, through the stepper
(:class:`~solver.distributed.stepper.RankStepper`): all peers' values go into one buffer each
way (one gather and one scatter per step, whatever the number of peers), and each peer's
message is a contiguous slice of it. The stepper decides what the buffers are: plain NumPy
arrays on the CPU; page-locked host memory filled by ``cudaMemcpyAsync`` on the communication
stream for the CuPy backend with the host transport (the image's Open MPI and the ``mpich``
wheel from PyPI are not CUDA-aware, so MPI must never see a device pointer); device arrays
with the NCCL transport.

Implementations (chosen by :mod:`solver.distributed.transport`):

- :class:`MpiExchange` (``host``) — non-blocking ``Isend``/``Irecv`` of the host buffers.
- :class:`NcclExchange` (``nccl``) — device buffers sent and received by NCCL
  (:class:`~solver.backends.cuda.nccl.NcclLink`) on the stepper's halo stream: gather, grouped
  ``send``/``recv`` and scatter are queued in stream order behind the boundary tiles, so no
  call waits on the host and the interior launch runs meanwhile on the compute stream; whole
  steps can therefore be captured in a CUDA graph and replayed (``capturable``).
- :class:`LoopbackHub` — every rank in one process, for tests and debugging without MPI.

With in-place streaming (one copy, AA pattern) a rank holds two exchanges of one transport,
the plan and its reverse, and :class:`PhasedExchange` runs the one the step's phase needs
(:func:`~solver.distributed.halo.in_place_plans` derives which values are where).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .halo import HaloPlan
from .stepper import RankStepper

__all__ = ["HaloExchange", "HaloBuffers", "MpiExchange", "NcclExchange", "LoopbackHub",
           "PhasedExchange", "HALO_TAG"]

#: Message tag of halo messages.
HALO_TAG = 17


class HaloExchange(Protocol):
    """One rank's side of the per-step halo exchange."""

    #: Whether whole steps with this exchange can be captured in a CUDA graph (no host wait
    #: or host-side transfer inside a step; see :mod:`solver.distributed.replay`).
    capturable: bool

    def post(self) -> None:
        """Post the receives of the coming exchange."""

    def start(self, f: Any) -> None:
        """Pack the owned values peers read from flat copy ``f`` and send them."""

    def progress(self) -> None:
        """Let the transport move data while the interior is computed."""

    def finish(self, f: Any) -> None:
        """Wait for every message and unpack it into the halo slots of flat copy ``f``."""


class HaloBuffers:
    """One rank's send and receive buffers: ``send[peer]`` / ``recv[peer]`` are contiguous
    slices of one buffer each way, in ascending peer order, element for element the plan's;
    host buffers, or device buffers with ``device=True`` (steppers with ``device_buffer``,
    ``gather_on_device`` and ``scatter_on_device``)."""

    def __init__(self, plan: HaloPlan, stepper: RankStepper, device: bool = False) -> None:
        self.stepper, self.device = stepper, device
        self._send_index, self._send_buffer, self.send = self._side(plan.send)
        self._recv_index, self._recv_buffer, self.recv = self._side(plan.recv)

    def _side(self, per_peer: dict[int, np.ndarray]):
        peers = [p for p in sorted(per_peer) if per_peer[p].size]
        flat = np.concatenate([np.empty(0, np.int64)] + [per_peer[p] for p in peers])
        allocate = self.stepper.device_buffer if self.device else self.stepper.host_buffer
        buffer = allocate(flat.size)
        edges = np.cumsum([0] + [per_peer[p].size for p in peers])
        views = {p: buffer[lo:hi] for p, lo, hi in zip(peers, edges[:-1], edges[1:], strict=True)}
        index = self.stepper.device_index(flat) if flat.size else None
        return index, buffer, views

    def pack(self, f: Any) -> None:
        """Start gathering every peer's values from flat copy ``f`` (see ``synchronize``)."""
        if self._send_index is not None:
            gather = self.stepper.gather_on_device if self.device else self.stepper.gather
            gather(f, self._send_index, self._send_buffer)

    def unpack(self, f: Any) -> None:
        """Scatter every received value into the halo slots of flat copy ``f``."""
        if self._recv_index is not None:
            scatter = self.stepper.scatter_on_device if self.device else self.stepper.scatter
            scatter(f, self._recv_index, self._recv_buffer)


def _wire(buffer: np.ndarray) -> np.ndarray:
    """What MPI moves of a host buffer: float16 storage as its 16-bit patterns (MPI has no
    standard half type), other dtypes as they are."""
    return buffer.view(np.uint16) if buffer.dtype == np.float16 else buffer


class MpiExchange:
    """Non-blocking point-to-point exchange of contiguous host buffers over an MPI communicator."""

    capturable = False  # MPI moves host memory while the host waits inside the step

    def __init__(self, comm: Any, plan: HaloPlan, stepper: RankStepper) -> None:
        self.comm, self.stepper = comm, stepper
        self.buffers = HaloBuffers(plan, stepper)
        self._receives: list = []
        self._sends: list = []

    def post(self) -> None:
        """Irecv one buffer per peer."""
        self._receives = [self.comm.Irecv(_wire(buffer), source=p, tag=HALO_TAG)
                          for p, buffer in self.buffers.recv.items()]

    def start(self, f: Any) -> None:
        """Pack every peer's values, wait for them, then Isend the buffers."""
        self.buffers.pack(f)
        self.stepper.synchronize()
        self._sends = [self.comm.Isend(_wire(buffer), dest=p, tag=HALO_TAG)
                       for p, buffer in self.buffers.send.items()]

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
        self.buffers.unpack(f)
        self._receives, self._sends = [], []


class NcclExchange:
    """Device-to-device exchange through NCCL, queued on the stepper's halo stream."""

    capturable = True  # every call only enqueues device work (NCCL >= 2.9 can be captured)

    def __init__(self, link: Any, plan: HaloPlan, stepper: RankStepper) -> None:
        self.link, self.stepper = link, stepper
        self.buffers = HaloBuffers(plan, stepper, device=True)

    def post(self) -> None:
        """Nothing to post: NCCL pairs each send with the peer's receive inside one group."""

    def start(self, f: Any) -> None:
        """Queue the gather into the send buffer and the grouped send/recv to every peer."""
        self.buffers.pack(f)
        if self.buffers.send or self.buffers.recv:
            self.link.exchange(self.buffers.send, self.buffers.recv, self.stepper.halo_stream)

    def progress(self) -> None:
        """NCCL's kernels move the data; nothing to poll."""

    def finish(self, f: Any) -> None:
        """Queue the scatter of the received values into ``f`` behind the receives."""
        self.buffers.unpack(f)


class PhasedExchange:
    """The halo exchange of in-place streaming: the exchange of each step follows the phase
    the step starts from (``stepper.state.current``), ``after[phase]`` (built from
    :func:`~solver.distributed.halo.in_place_plans`); :meth:`refresh` exchanges what the
    phase the state is in needs (the two-copy plan in phase 0, its reverse in phase 1)."""

    def __init__(self, after: tuple[HaloExchange, HaloExchange], stepper: RankStepper) -> None:
        self.after, self.stepper = after, stepper
        self.capturable = all(e.capturable for e in after)
        self._step: HaloExchange = after[0]

    def post(self) -> None:
        """Pick this step's exchange (by the phase it starts from) and post its receives."""
        self._step = self.after[self.stepper.state.current]
        self._step.post()

    def start(self, f: Any) -> None:
        """Pack and send this step's values."""
        self._step.start(f)

    def progress(self) -> None:
        """Let the transport move data."""
        self._step.progress()

    def finish(self, f: Any) -> None:
        """Receive and unpack this step's values."""
        self._step.finish(f)

    def refresh(self) -> HaloExchange:
        """The exchange that refreshes the halo of the state as it is now: phase 0 needs the
        halo slots (the exchange after a phase-1 step), phase 1 the owned slots that other
        ranks' nodes wrote (the exchange after a phase-0 step; moving them again is
        harmless)."""
        return self.after[1 - self.stepper.state.current]


class LoopbackHub:
    """In-process stand-in for MPI: ranks deposit packed buffers, peers collect them."""

    def __init__(self) -> None:
        self.mail: dict[tuple[int, int], np.ndarray] = {}

    def exchange(self, rank: int, plan: HaloPlan, stepper: RankStepper) -> _LoopbackExchange:
        """The HaloExchange of ``rank``."""
        return _LoopbackExchange(self, rank, HaloBuffers(plan, stepper))


class _LoopbackExchange:
    capturable = False

    def __init__(self, hub: LoopbackHub, rank: int, buffers: HaloBuffers) -> None:
        self.hub, self.rank, self.buffers = hub, rank, buffers

    def post(self) -> None:
        pass

    def start(self, f: Any) -> None:
        self.buffers.pack(f)
        self.buffers.stepper.synchronize()
        for p, buffer in self.buffers.send.items():
            self.hub.mail[(self.rank, p)] = buffer.copy()

    def progress(self) -> None:
        pass

    def finish(self, f: Any) -> None:
        for p, buffer in self.buffers.recv.items():
            buffer[...] = self.hub.mail.pop((p, self.rank))
        self.buffers.unpack(f)
