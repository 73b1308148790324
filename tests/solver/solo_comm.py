"""The collectives of one MPI rank that :func:`solver.distributed.mirrored.run_mirrored` calls,
without MPI: a multi-rank code path run in one process by the tests."""

from __future__ import annotations


class SoloComm:
    """mpi4py's communicator methods the mirrored run uses, for a world of one rank."""

    def Get_rank(self) -> int:  # noqa: N802 (mpi4py's names)
        return 0

    def Get_size(self) -> int:  # noqa: N802
        return 1

    def allgather(self, value):
        return [value]

    def gather(self, value, root=0):
        return [value]

    def bcast(self, value, root=0):
        return value

    def Barrier(self) -> None:  # noqa: N802
        pass
