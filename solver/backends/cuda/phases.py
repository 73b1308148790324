"""One distributed rank on the GPU: boundary and interior tile ranges on two CUDA streams.

:class:`CupyPhases` is the CuPy backend's :class:`~solver.distributed.stepper.RankStepper`
(``CupyBackend.phase_stepper``) over a :class:`~.device_run.DeviceRun`, tiled or compact: it
steps tile ranges (``launch_tiles``) and addresses the halo (``value_index``) through that
protocol alone. The rank-local state orders its tiles ``[boundary | interior |
halo]``, so one time step is two launches of the tiled kernel over tile ranges (its
``first_tile`` argument), and the halo tiles are never stepped:

==========  ==================================================  ===========================
stream      work per step, in order                             waits for
==========  ==================================================  ===========================
comm        boundary tiles ``[0, n_b)``; gather the send        the previous step's
            values; ``cudaMemcpyAsync`` into page-locked host   interior (compute stream)
            memory; later the received values back to the
            device
compute     interior tiles ``[n_b, n_owned)``; scatter the      the previous step's
            received values into the halo slots                 boundary tiles (comm)
==========  ==================================================  ===========================

In place (``streaming='in-place'``, one copy, AA pattern) the same launches step the phase's
kernel on the one copy, ``finish()`` flips the phase, and the rank's exchange alternates between
the halo plan and its reverse (:func:`~solver.distributed.halo.in_place_plans`, which also shows
that the hazards below hold unchanged: each slot is read and written by one node's thread per
step, and neither exchange touches a slot of the other tile range).

The two streams share the two copies; per step (reading copy A, writing copy B) the hazards
are: the interior of the next step writes A, which this step's boundary tiles read, and reads
the boundary tiles of B, which they write — so it waits for this step's boundary launch (event
``boundary``), not for the halo work queued behind it on the comm stream; the boundary tiles of
the next step write A, which this step's interior reads, and read B's interior and halo slots —
so they wait for this step's interior and scatter (event ``step_done`` on the compute stream,
the comm stream's own order for the NCCL scatter). Neither the interior nor the boundary launch
touch the halo slots of the copy they write, which the scatter fills.

With the host transport, ``boundary()`` enqueues both launches, so the interior is queued on
the GPU before the host blocks: first in ``synchronize()`` (the comm stream: boundary tiles
packed and copied to the host, then MPI may send them), then in MPI's ``Waitall``. The comm
stream has the highest priority, so its small kernels get the SMs ahead of the interior's
blocks. The host waits for the copy of received values to the device before it returns from
``scatter`` (the page-locked buffer is reused by the next receive); the scatter kernel itself
runs on the compute stream after the interior.

With the NCCL transport (:class:`~solver.distributed.exchange.NcclExchange`) the halo never
leaves the device and the host never waits inside a step: the comm stream runs the boundary
tiles, the gather into a device send buffer (:meth:`CupyPhases.gather_on_device`), the grouped
NCCL ``send``/``recv`` and the scatter of the receive buffer into the halo slots
(:meth:`CupyPhases.scatter_on_device`), in that order, while the compute stream runs the
interior; the halo chain of one step may run on beside the next step's interior. Such steps
can be captured: :meth:`CupyPhases.capture_steps` records the work of several steps on both
streams (the comm stream joins the capture through an event recorded on the capturing compute
stream, and is joined back before the capture ends) into one CUDA graph, and
:meth:`CupyPhases.replay` launches it (:mod:`solver.distributed.replay` decides when).

The module takes CuPy from the backend (``backend.xp``) and does not import it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from .timeline import timeline_from_environment

__all__ = ["CupyPhases", "COPY_PER_THREAD", "halo_copy_source"]

log = logging.getLogger(__name__)


#: Halo values each gather/scatter thread moves: its loads are independent, so one thread
#: keeps several in flight, and the chain launches an eighth of the blocks (2 x H200, weak
#: scaling: with one value per thread, gather and scatter cost 7 us of a 142 us step).
COPY_PER_THREAD = 8


def halo_copy_source(real: str, index: str = "long long") -> str:
    """CUDA source of ``halo_gather`` (out[k] = f[index[k]]) and ``halo_scatter``
    (f[index[k]] = values[k]) for values of C type ``real`` and indices of C type ``index``;
    a grid of ``ceil(n / (threads * COPY_PER_THREAD))`` blocks covers ``n`` values."""
    return f"""
typedef {real} real;
typedef {index} index_t;
constexpr int PER_THREAD = {COPY_PER_THREAD};

extern "C" __global__ void halo_gather(const real* __restrict__ f,
    const index_t* __restrict__ index, real* __restrict__ out, const long long n)
{{
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long k0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    index_t at[PER_THREAD];
    real v[PER_THREAD];
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) at[j] = k0 + j * stride < n ? index[k0 + j * stride] : 0;
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) v[j] = f[at[j]];  // f[0] for k >= n: never stored
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j)
        if (k0 + j * stride < n) out[k0 + j * stride] = v[j];
}}

extern "C" __global__ void halo_scatter(real* __restrict__ f,
    const index_t* __restrict__ index, const real* __restrict__ values, const long long n)
{{
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long k0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    index_t at[PER_THREAD];
    real v[PER_THREAD];
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) {{
        const bool in = k0 + j * stride < n;
        at[j] = in ? index[k0 + j * stride] : 0;
        v[j] = in ? values[k0 + j * stride] : (real)0;
    }}
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j)
        if (k0 + j * stride < n) f[at[j]] = v[j];
}}
"""


@cache
def _copy_kernels(cp: Any, dtype: str, index: str, device: int) -> tuple:
    # float16 storage moves binary16 bits: no arithmetic, so an integer of the same width
    real = {"float64": "double", "float32": "float", "float16": "unsigned short"}[dtype]
    module = cp.RawModule(code=halo_copy_source(real, index), options=("-std=c++17",))
    return module.get_function("halo_gather"), module.get_function("halo_scatter")


#: Requested priority of the comm stream; CUDA clamps it to the device's greatest (most
#: urgent) priority, e.g. -5 on Hopper. CuPy 14 has no cudaDeviceGetStreamPriorityRange.
_URGENT = -100


def _comm_stream(cp: Any):
    """A non-blocking stream of the device's highest priority (plain one if unsupported)."""
    try:
        return cp.cuda.Stream(non_blocking=True, priority=_URGENT)
    except TypeError as exc:  # a CuPy before 13.1 has no stream priorities
        log.info("No stream priorities (%s); the halo stream has default priority.", exc)
        return cp.cuda.Stream(non_blocking=True)


class CupyPhases:
    """Boundary / interior launches of one rank on two CUDA streams (see the module doc)."""

    overlaps = True

    def __init__(self, backend: Any, state: Any, n_boundary: int, n_owned: int) -> None:
        cp = backend.xp
        self._timeline = timeline_from_environment(cp)
        self._cp, self.backend, self.state = cp, backend, state
        self._ranges = ((0, n_boundary), (n_boundary, n_owned))
        self._compute = state.stream
        self._comm = _comm_stream(cp)
        self._step_done = cp.cuda.Event(disable_timing=True)  # compute: last write of a step
        self._boundary = cp.cuda.Event(disable_timing=True)  # comm: boundary tiles written
        self._joined = cp.cuda.Event(disable_timing=True)  # comm: everything queued so far
        self._uploaded = cp.cuda.Event(disable_timing=True)  # comm: received values on device
        self._passed = cp.cuda.Event(disable_timing=True)  # comm: opening links rewritten
        problem = state.problem
        # Gather/scatter blocks as large as the tile kernel's: while the interior runs, a block
        # of the halo chain fits into the room one retired tile block leaves on an SM.
        self._copy_threads = problem.tiles_per_block * problem.tiling.nodes_per_tile
        # 32-bit indices where one copy has fewer than 2^32 values: half the index traffic
        self._index_dtype = np.uint32 if state.f[0].size < 2**32 else np.int64
        index = "unsigned int" if self._index_dtype == np.uint32 else "long long"
        self._gather, self._scatter = _copy_kernels(cp, problem.storage_dtype.name, index,
                                                    cp.cuda.Device().id)
        # Flat views of the copies: two, or the one copy of in-place streaming (AA pattern)
        self._flat = tuple(state.f[c].reshape(-1) for c in range(len(state.f)))
        self._device_buffers: dict[int, Any] = {}
        self.idle()  # the rest state was written on the default stream

    # -- copies and indices ------------------------------------------------------------------
    @property
    def in_place(self) -> bool:
        """Whether the rank steps one copy in place (AA pattern: ``state.current`` is the
        phase, and the exchange alternates, :func:`~solver.distributed.halo.in_place_plans`)."""
        return len(self._flat) == 1

    def target(self) -> Any:
        """Flat device view of the copy the running step writes (in place: the copy)."""
        return self._flat[0 if self.in_place else 1 - self.state.current]

    def current(self) -> Any:
        """Flat device view of the latest copy (in place: the copy, in its phase's layout)."""
        return self._flat[0 if self.in_place else self.state.current]

    def device_index(self, index: np.ndarray) -> Any:
        """XYZ flat indices ``(tile q + i) a^d + node`` as device indices into the flat copies
        in the storage's own addressing (the run's ``value_index``: the in-tile layout's slots
        of a tiled run, popcount slots of a compact one), uploaded once: uint32, or int64 for
        a copy of 2^32 values or more."""
        return self._cp.asarray(self.state.value_index(index).astype(self._index_dtype))

    def host_buffer(self, n: int) -> np.ndarray:
        """Page-locked host array of ``n`` values of the storage dtype."""
        dtype = self.state.problem.storage_dtype
        memory = self._cp.cuda.alloc_pinned_memory(max(n, 1) * dtype.itemsize)
        return np.ndarray((n,), dtype=dtype, buffer=memory)

    def _device_buffer(self, host: np.ndarray) -> Any:
        key = host.ctypes.data
        if key not in self._device_buffers:  # one device twin per host buffer
            self._device_buffers[key] = self._cp.empty(host.shape, dtype=host.dtype)
        return self._device_buffers[key]

    def _copy_launch(self, kernel, n: int, args: tuple) -> None:
        threads = self._copy_threads
        kernel((max(1, -(-n // (threads * COPY_PER_THREAD))),), (threads,), (*args, np.int64(n)))

    def gather(self, f: Any, index: Any, out: np.ndarray) -> None:
        """Enqueue ``out[:] = f[index]`` on the comm stream (device gather, then a copy to the
        page-locked ``out``); complete after :meth:`synchronize`."""
        runtime = self._cp.cuda.runtime
        staged = self._device_buffer(out)
        with self._comm:
            self._copy_launch(self._gather, out.size, (f, index, staged))
            runtime.memcpyAsync(out.ctypes.data, staged.data.ptr, out.nbytes,
                                runtime.memcpyDeviceToHost, self._comm.ptr)

    def scatter(self, f: Any, index: Any, values: np.ndarray) -> None:
        """Copy the page-locked ``values`` to the device (the host waits for that copy only),
        then enqueue ``f[index] = values`` on the compute stream."""
        runtime = self._cp.cuda.runtime
        staged = self._device_buffer(values)
        runtime.memcpyAsync(staged.data.ptr, values.ctypes.data, values.nbytes,
                            runtime.memcpyHostToDevice, self._comm.ptr)
        self._uploaded.record(self._comm)
        self._uploaded.synchronize()  # ``values`` may take the next message from now on
        with self._compute:
            self._copy_launch(self._scatter, values.size, (f, index, staged))

    # -- device-to-device halos (NCCL) ---------------------------------------------------------
    @property
    def halo_stream(self) -> Any:
        """The comm stream: boundary tiles, gather, transfers and scatter run on it in order."""
        return self._comm

    def device_buffer(self, n: int) -> Any:
        """Device array of ``n`` values of the storage dtype for device-to-device messages."""
        return self._cp.empty(n, dtype=self.state.problem.storage_dtype)

    def gather_on_device(self, f: Any, index: Any, out: Any) -> None:
        """Enqueue ``out[:] = f[index]`` on the comm stream (``out`` a device array)."""
        with self._comm:
            self._copy_launch(self._gather, out.size, (f, index, out))
        self._mark(self._comm, "gathered")

    def scatter_on_device(self, f: Any, index: Any, values: Any) -> None:
        """Enqueue ``f[index] = values`` on the comm stream, after the transfers queued there
        (``values`` a device array); it writes halo slots, which the interior launch neither
        reads nor writes."""
        self._mark(self._comm, "received")
        with self._comm:
            self._copy_launch(self._scatter, values.size, (f, index, values))
        self._mark(self._comm, "scattered")

    # -- the step ----------------------------------------------------------------------------
    def boundary(self) -> None:
        """Enqueue the boundary tiles (comm stream) and the interior tiles (compute stream)."""
        self._comm.wait_event(self._step_done)
        iolets = self.state.iolets
        if iolets is not None:  # the rank's opening links, before either range reads them
            with self._comm:
                iolets.launch(self.current(), self.state.current)  # in place: the phase
            self._passed.record(self._comm)
            self._compute.wait_event(self._passed)
        self._mark(self._comm, "boundary queued")
        with self._comm:
            self.state.launch_tiles(*self._ranges[0])
        self._boundary.record(self._comm)
        self._mark(self._comm, "boundary done")
        self._mark(self._compute, "interior queued")
        with self._compute:
            self.state.launch_tiles(*self._ranges[1])
        self._mark(self._compute, "interior done")

    def interior(self, progress: Callable[[], None]) -> None:
        """The interior runs already (queued by :meth:`boundary`); let MPI move the messages."""
        progress()

    def synchronize(self) -> None:
        """Block until the boundary tiles are written and the gathered values are on the
        host."""
        self._comm.synchronize()

    def idle(self) -> None:
        """Block until all work on the device has finished."""
        self._cp.cuda.Device().synchronize()

    def finish(self) -> None:
        """Order the next step after this one on both streams (see the module docstring);
        swap the copies (in place: flip the phase)."""
        self._compute.wait_event(self._boundary)
        self.state.current = 1 - self.state.current
        self._step_done.record(self._compute)
        if self._timeline is not None:
            self._timeline.end_step()

    def set_step(self, step: int) -> None:
        """Set the run's step counter (the openings' soft start and waveforms)."""
        self.idle()
        self.backend.set_step(self.state, step)

    def _mark(self, stream: Any, edge: str) -> None:
        if self._timeline is not None:
            self._timeline.mark(stream, edge)

    def _join(self) -> None:
        """Order the compute stream after everything queued on the comm stream so far."""
        self._joined.record(self._comm)
        self._compute.wait_event(self._joined)

    # -- CUDA graphs of whole steps (NCCL transport) -------------------------------------------
    def capture_steps(self, run: Callable[[], None]) -> Any:
        """An instantiated CUDA graph of the work ``run`` enqueues on both streams (whole
        steps, an even number, so the copies end where they began); nothing runs. Raises if
        the capture fails; the streams are then out of capture and the copies unchanged."""
        current, compute = self.state.current, self._compute
        if self.in_place:
            self._load_phase_kernels()
        self._join()  # nothing captured may overtake the plain steps queued before
        compute.begin_capture()
        try:
            self._step_done.record(compute)  # the comm stream joins the capture here
            run()
            even = self.state.current == current
            self._join()  # every forked stream must rejoin the origin before the end
        except BaseException:
            try:
                compute.end_capture()
            except Exception as exc:  # an invalidated capture also ends with an error
                log.debug("Ending the failed capture: %s", exc)
            raise
        finally:
            self.state.current = current  # capturing ran nothing
            if not compute.is_capturing():
                self._rearm()
        graph = compute.end_capture()
        self._rearm()
        if not even:
            raise RuntimeError("A captured graph must hold an even number of steps.")
        graph.upload(compute)  # instantiate now: a failure here still means "no graphs"
        return graph

    def _load_phase_kernels(self) -> None:
        """Compile and load both phases' kernels (in place) before a capture, which cannot
        load a module: the plain steps before it may have run one phase only."""
        self.state.load_range_kernels(self._ranges)

    def _rearm(self) -> None:
        """Record the step events outside any capture: events last recorded inside one stand
        for graph nodes, and a plain stream must not wait on them."""
        self._step_done.record(self._compute)
        self._boundary.record(self._comm)
        self._joined.record(self._comm)

    def replay(self, graph: Any) -> None:
        """Enqueue one replay of ``graph`` (from :meth:`capture_steps`, captured for the
        current copy) after everything queued on both streams; later steps follow it."""
        self._join()
        graph.launch(self._compute)
        self._step_done.record(self._compute)  # the next plain step's comm work follows it

    def release(self) -> None:
        """Free the device arrays (and write the step timeline, if one is recorded)."""
        self.idle()
        if self._timeline is not None:
            rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
            log.info("Step timeline: %s", self._timeline.write(rank))
        self._device_buffers.clear()
        self._flat = ()
        self.backend.release(self.state)
