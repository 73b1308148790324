"""Halo messages between GPUs through NCCL: device buffers, no host round trip.

:class:`NcclLink` is an NCCL communicator over the ranks of an MPI communicator, one GPU per
rank (NCCL refuses two ranks on one GPU). Rank 0 draws the unique id and MPI broadcasts it;
``ncclCommInitRank`` is then collective over all ranks. :meth:`NcclLink.exchange` enqueues one
``ncclGroupStart`` ... ``ncclGroupEnd`` of point-to-point ``send``/``recv`` calls, one pair per
peer, on a given CUDA stream: the transfers are ordered after the work already queued on that
stream (the gather of the send values) and before the work queued after them (the scatter of
the received values), and the host never waits. Within one group NCCL matches every send with
the peer's receive, so two ranks that send to each other cannot deadlock.

The NCCL module (``cupy.cuda.nccl``) comes from the CuPy backend; this module does not import
CuPy.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

__all__ = ["NcclLink", "P2P_DEFAULTS", "nccl_version", "nccl_status"]

#: NCCL settings applied unless the environment sets them. Point-to-point channels: each is a
#: CTA that shares the SMs with the interior tiles while the halo travels; on 2 x H200 (NVLink,
#: 1 MB per step, benchmarks/scaling/results/scaling-*) 4 channels gave weak-scaling steps of 0.142
#: ms against 0.144 ms with NCCL's default and 0.152 ms with 2 (the transfer then came late).
P2P_DEFAULTS = {"NCCL_MAX_P2P_NCHANNELS": "4"}

log = logging.getLogger(__name__)


def nccl_version(code: int) -> str:
    """``ncclGetVersion``'s integer (e.g. 22805, NCCL >= 2.9) as ``major.minor.patch``."""
    major, rest = divmod(int(code), 10000)
    return f"{major}.{rest // 100}.{rest % 100}"


class NcclLink:
    """An NCCL communicator over the ranks of ``comm`` (an mpi4py communicator); collective."""

    def __init__(self, nccl: Any, comm: Any) -> None:
        self._nccl = nccl
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        for name, value in P2P_DEFAULTS.items():  # NCCL reads its settings at first use
            os.environ.setdefault(name, value)
        unique_id = nccl.get_unique_id() if self.rank == 0 else None
        unique_id = comm.bcast(unique_id, root=0)
        self._comm = nccl.NcclCommunicator(self.size, unique_id, self.rank)
        self._types = {np.dtype(np.float32): nccl.NCCL_FLOAT32,
                       np.dtype(np.float64): nccl.NCCL_FLOAT64,
                       # binary16 storage bits; ncclFloat16 is 6 in every NCCL 2 header
                       np.dtype(np.float16): getattr(nccl, "NCCL_FLOAT16", 6)}
        log.debug("Rank %d: NCCL communicator of %d ranks on CUDA device %d", self.rank,
                  self.size, self._comm.device_id())

    def exchange(self, send: dict[int, Any], recv: dict[int, Any], stream: Any) -> None:
        """Enqueue ``send[peer]`` to and ``recv[peer]`` from every peer on ``stream``.

        ``send`` and ``recv`` map peer ranks to contiguous device arrays (float32 or float64)
        whose sizes match the peer's counterparts; nothing waits on the host.
        """
        nccl, stream_ptr = self._nccl, stream.ptr
        nccl.groupStart()
        try:
            for peer, buffer in send.items():
                self._comm.send(buffer.data.ptr, buffer.size, self._type(buffer), peer,
                                stream_ptr)
            for peer, buffer in recv.items():
                self._comm.recv(buffer.data.ptr, buffer.size, self._type(buffer), peer,
                                stream_ptr)
        finally:
            nccl.groupEnd()

    def _type(self, buffer: Any) -> int:
        try:
            return self._types[np.dtype(buffer.dtype)]
        except KeyError:
            raise TypeError(f"NCCL halo buffers hold float32 or float64, not "
                            f"{buffer.dtype}.") from None

    def close(self) -> None:
        """Free the communicator (every rank, at about the same time)."""
        if self._comm is not None:
            self._comm.destroy()
            self._comm = None


def nccl_status() -> tuple[bool, str]:
    """Whether CuPy's NCCL binding is usable, and its version or what is missing."""
    try:
        from cupy.cuda import nccl
    except Exception as exc:  # a broken binding fails with several error types
        return False, f"cupy.cuda.nccl does not import ({exc.__class__.__name__}: {exc})"
    if not getattr(nccl, "available", False):
        return False, ("CuPy found no NCCL library; install the NCCL package of the CUDA "
                       "version (e.g. nvidia-nccl-cu13) or use transport='host'")
    return True, f"NCCL {nccl_version(nccl.get_version())}"
