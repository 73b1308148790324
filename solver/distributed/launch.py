"""Running a function on rank 0 of an MPI job while the other ranks serve it.

``launch(main)`` builds one :class:`~solver.distributed.backend.DistributedBackend` per rank,
calls ``main(backend)`` on rank 0 (which builds its Simulation on that backend) and keeps the
other ranks in :meth:`~solver.distributed.backend.DistributedBackend.serve` until ``main``
returns or raises; then every rank returns, so ``mpirun`` ends with rank 0's outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..backends import Backend
from .backend import DistributedBackend

__all__ = ["launch"]

T = TypeVar("T")


def launch(main: Callable[[DistributedBackend], T], inner: str | Backend = "auto",
           comm: Any = None, axis: int | str = "longest", transport: str = "auto",
           graphs: bool = False) -> T | None:
    """``main(backend)``'s result on rank 0, None on the serving ranks; ``transport`` is the
    halo transport (solver.config.HALO_TRANSPORTS), ``graphs`` whether NCCL runs replay
    captured CUDA graphs."""
    backend = DistributedBackend(inner, comm=comm, axis=axis, transport=transport,
                                 graphs=graphs)
    with backend:
        if backend.is_root:
            return main(backend)
        backend.serve()
    return None
