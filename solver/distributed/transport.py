"""Choosing how a distributed run moves its halos: NCCL between GPUs, or MPI via host memory.

The options are :data:`solver.config.HALO_TRANSPORTS`:

- ``nccl`` — device to device (:class:`~solver.distributed.exchange.NcclExchange`): NCCL's
  peer-to-peer transport over NVLink or PCIe within a node, its network transports across
  nodes. Needs the CuPy backend, CuPy's NCCL binding and one GPU per rank (NCCL refuses two
  ranks on one GPU).
- ``host`` — device gather, copy to page-locked host memory, MPI ``Isend``/``Irecv``, copy back,
  scatter (:class:`~solver.distributed.exchange.MpiExchange`); any backend, ranks may share a
  GPU.
- ``auto`` — ``nccl`` where every rank can use it, else ``host``.

The choice is collective: every rank describes what it can do (:func:`local_report`), the
reports are all-gathered, and every rank derives the same answer from the same list
(:func:`choose_transport`), so no rank waits in an NCCL set-up that another rank skips. Two
ranks are on one GPU when they report the same host and PCI bus id, whatever their
``CUDA_VISIBLE_DEVICES`` says.
"""

from __future__ import annotations

import socket
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends import Backend
from ..config import HALO_TRANSPORTS, ConfigError
from .exchange import HaloExchange, MpiExchange, NcclExchange
from .halo import HaloPlan
from .stepper import RankStepper

__all__ = ["TransportReport", "check_transport", "local_report", "choose_transport",
           "exchange_factory"]

ExchangeFactory = Callable[[HaloPlan, RankStepper], HaloExchange]


@dataclass(frozen=True)
class TransportReport:
    """What one rank can do: NCCL usable here (and why not, or its version), and the GPU it
    computes on as ``host/pci-bus-id`` (None without a GPU)."""

    nccl: bool
    why: str
    gpu: str | None = None


def check_transport(name: str) -> str:
    """``name`` if it is one of HALO_TRANSPORTS; ConfigError saying the choices otherwise."""
    if name not in HALO_TRANSPORTS:
        raise ConfigError(f"Unknown halo transport {name!r}; use one of "
                          f"{', '.join(HALO_TRANSPORTS)} (auto: NCCL when every rank has its "
                          "own GPU, else MPI through host memory).")
    return name


def local_report(backend: Backend) -> TransportReport:
    """This rank's :class:`TransportReport` (no communication)."""
    status = backend.nccl_status()
    if status is None:
        return TransportReport(False, f"the {backend.name} backend keeps its populations in "
                                      "host memory")
    ok, why = status
    return TransportReport(ok, why, f"{socket.gethostname()}/{backend.gpu_id()}")


def _shared_gpus(reports: Sequence[TransportReport]) -> list[str]:
    ranks_of: dict[str, list[int]] = defaultdict(list)
    for rank, report in enumerate(reports):
        if report.gpu is not None:
            ranks_of[report.gpu].append(rank)
    return [f"ranks {', '.join(map(str, ranks))} share GPU {gpu}"
            for gpu, ranks in ranks_of.items() if len(ranks) > 1]


def choose_transport(requested: str, reports: Sequence[TransportReport]) -> tuple[str, str]:
    """The transport every rank uses, and why, from all ranks' reports (rank order).

    ``auto`` falls back to ``host`` when any rank cannot use NCCL; an explicit ``nccl`` that
    cannot run is a ConfigError that names the ranks and the reason.
    """
    check_transport(requested)
    if requested == "host":
        return "host", "requested"
    problems = [f"rank {rank}: {r.why}" for rank, r in enumerate(reports) if not r.nccl]
    problems += _shared_gpus(reports)
    if not problems:
        return "nccl", reports[0].why if reports else "no ranks"
    if requested == "nccl":
        raise ConfigError("The NCCL halo transport cannot run here: " + "; ".join(problems)
                          + ". It needs the CuPy backend, CuPy's NCCL binding and one GPU per "
                            "rank (start at most as many ranks per node as it has GPUs); or "
                            "use transport 'host' (MPI through page-locked host memory).")
    return "host", "; ".join(problems)


def exchange_factory(transport: str, comm: Any, link: Any = None) -> ExchangeFactory:
    """Builds each rank's HaloExchange: NCCL over ``link`` (a
    :class:`~solver.backends.cuda.nccl.NcclLink`) or MPI over ``comm``."""
    if check_transport(transport) == "nccl":
        if link is None:
            raise ValueError("The NCCL transport needs the rank's NcclLink.")
        return lambda plan, stepper: NcclExchange(link, plan, stepper)
    if transport != "host":
        raise ValueError(f"Resolve {transport!r} with choose_transport() first.")
    return lambda plan, stepper: MpiExchange(comm, plan, stepper)
