"""Access to MPI (mpi4py), with messages that say what to install when it is missing.

mpi4py is optional: the decomposition, halo plan and in-process loopback runs need only NumPy.
``world()`` is the one place that imports it for a run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from ..config import ConfigError

__all__ = ["find_mpirun", "mpi_available", "world", "launched_size", "local_rank", "bind_local_gpu",
           "visible_gpus", "rotated_gpus"]

#: Environment variables in which MPI launchers announce the job size (MPICH/Hydra and PMIx,
#: Open MPI, Slurm's srun).
_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_NTASKS")

#: One entry per NVIDIA GPU the driver sees (Linux); read without initialising CUDA.
_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")

#: Set by bind_local_gpu to the GPU id it chose, so that a second call does not rotate again.
_BOUND = "LBM_LOCAL_GPU"


def find_mpirun() -> str | None:
    """$MPIRUN, else the mpirun next to this Python (PyPI mpich's), else the one on PATH."""
    local = Path(sys.executable).parent / "mpirun"
    return os.environ.get("MPIRUN") or (str(local) if local.exists() else shutil.which("mpirun"))


def mpi_available() -> tuple[bool, str]:
    """Whether mpi4py is installed, and why not; does not initialise MPI in this process."""
    try:
        if importlib.util.find_spec("mpi4py") is not None:
            return True, "mpi4py is installed"
    except (ImportError, ValueError) as exc:
        return False, f"mpi4py is not usable ({exc.__class__.__name__}: {exc})"
    return False, "mpi4py is not installed"


def world() -> Any:
    """``MPI.COMM_WORLD``; ConfigError saying what to install if mpi4py is missing."""
    try:
        from mpi4py import MPI
    except Exception as exc:  # ImportError, or the MPI shared library failing to load
        raise ConfigError(f"Distributed runs need MPI but mpi4py is not usable "
                          f"({exc.__class__.__name__}: {exc}); install it with `pip install "
                          "mpi4py mpich` (or mpi4py built against the cluster's MPI).") from exc
    return MPI.COMM_WORLD


def launched_size(environ: dict[str, str] | None = None) -> int:
    """Ranks of the MPI job this process was started in (1 without a launcher); no MPI import.

    Lets a command line choose the distributed path only under ``mpirun`` without
    initialising MPI in every ordinary run.
    """
    env = os.environ if environ is None else environ
    for name in _SIZE_VARIABLES:
        value = env.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def local_rank(comm: Any) -> tuple[int, int]:
    """This rank's index among the ranks on its node, and their number."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank(), node.Get_size()
    finally:
        node.Free()


def visible_gpus(environ: dict[str, str] | None = None) -> list[str]:
    """GPU ids this process may use: the entries of CUDA_VISIBLE_DEVICES, else one index per
    NVIDIA GPU the driver lists; no CUDA initialisation."""
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    listed = sorted(_NVIDIA_GPUS.iterdir()) if _NVIDIA_GPUS.is_dir() else []
    return [str(k) for k in range(len(listed))]


def rotated_gpus(devices: list[str], index: int) -> list[str]:
    """``devices`` starting at the GPU of local rank ``index`` (ranks beyond the GPU count
    share them round-robin), the others following in order."""
    k = index % len(devices)
    return devices[k:] + devices[:k]


def bind_local_gpu(comm: Any) -> str | None:
    """Make this rank's own GPU CUDA device 0 by rotating CUDA_VISIBLE_DEVICES; the chosen id.

    Every GPU of the node stays visible, so NCCL can map its peers' memory (CUDA IPC over
    NVLink/PCIe needs the peer GPU visible; one GPU per process would force NCCL through host
    memory), while code that uses the current device (device 0) runs on the rank's own GPU.
    Must run before CUDA is initialised in this process (before the first CuPy call); binds
    once per process (``LBM_LOCAL_GPU`` records the choice). Leaves the environment alone with
    one rank per node or when at most one GPU is visible.
    """
    index, ranks = local_rank(comm)
    if os.environ.get(_BOUND):
        return os.environ[_BOUND]
    devices = visible_gpus()
    if ranks <= 1 or len(devices) <= 1:
        return None
    order = rotated_gpus(devices, index)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(order)
    os.environ[_BOUND] = order[0]
    return order[0]
