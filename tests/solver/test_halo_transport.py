"""Halo transports: the option set, the collective choice, GPU binding, and the NCCL exchange's
ordering checked on the CPU.

The NCCL exchange is driven here through a loopback link that completes a send when the peer
has posted the matching receive (as an NCCL group does) and a NumPy stepper whose "device"
buffers are host arrays, so the gather -> send/recv -> scatter sequence of
:class:`~solver.distributed.exchange.NcclExchange` must reproduce one process bit for bit. The
real NCCL path runs in ``tests/solver/test_distributed_gpu.py`` (two GPUs).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from solver.__main__ import build_parser as solver_parser
from solver.backends.numpy_backend import NumpyBackend
from solver.config import HALO_TRANSPORTS, ConfigError
from solver.distributed import (
    DistributedBackend,
    MpiExchange,
    NcclExchange,
    RankSolver,
    TransportReport,
    check_transport,
    choose_transport,
    decompose,
    launch,
    rotated_gpus,
    step_together,
    visible_gpus,
)
from solver.distributed.__main__ import build_parser as distributed_parser
from solver.distributed.transport import exchange_factory, local_report
from solver.problem import Problem

from .test_distributed import config, noisy_start, porous, reference

GPU_A, GPU_B = "node1/0000:18:00.0", "node1/0000:2A:00.0"


# -- the option set and its validation --------------------------------------------------------
def test_transport_names_are_a_closed_set():
    assert HALO_TRANSPORTS == ("auto", "nccl", "host")
    for name in HALO_TRANSPORTS:
        assert check_transport(name) == name
    for bad in ("NCCL", "mpi", "", "device"):
        with pytest.raises(ConfigError, match="Unknown halo transport .*auto, nccl, host"):
            check_transport(bad)


def test_unknown_transport_is_refused_before_mpi_starts():
    # The check comes first: no communicator is needed (comm=None would import mpi4py).
    with pytest.raises(ConfigError, match="Unknown halo transport 'gpu'"):
        DistributedBackend("numpy", transport="gpu")
    with pytest.raises(ConfigError, match="Unknown halo transport"):
        launch(lambda backend: 0, inner="numpy", transport="ncl")


def test_command_lines_offer_exactly_the_transports(capsys):
    for parser, head in ((distributed_parser(), ["solid.npy"]),
                         (solver_parser(), ["run", "case.yaml"])):
        for name in HALO_TRANSPORTS:
            assert parser.parse_args([*head, "--transport", name]).transport == name
        assert parser.parse_args(head).transport == "auto"
        with pytest.raises(SystemExit):
            parser.parse_args([*head, "--transport", "mpi"])
        assert "invalid choice: 'mpi'" in capsys.readouterr().err


# -- the collective choice ---------------------------------------------------------------------
def test_auto_picks_nccl_only_when_every_rank_has_its_own_gpu():
    ok = [TransportReport(True, "NCCL 2.28.3", GPU_A), TransportReport(True, "NCCL 2.28.3", GPU_B)]
    assert choose_transport("auto", ok) == ("nccl", "NCCL 2.28.3")
    assert choose_transport("nccl", ok)[0] == "nccl"
    assert choose_transport("host", ok) == ("host", "requested")
    shared = [ok[0], TransportReport(True, "NCCL 2.28.3", GPU_A), ok[1]]
    transport, why = choose_transport("auto", shared)
    assert transport == "host" and why == f"ranks 0, 1 share GPU {GPU_A}"
    # The same bus id on two hosts is two GPUs.
    other_host = [ok[0], TransportReport(True, "NCCL 2.28.3", "node2/0000:18:00.0")]
    assert choose_transport("auto", other_host)[0] == "nccl"


def test_explicit_nccl_that_cannot_run_names_the_ranks_and_the_way_out():
    shared = [TransportReport(True, "NCCL 2.28.3", GPU_A)] * 2
    with pytest.raises(ConfigError, match=r"ranks 0, 1 share GPU .*one GPU per rank.*'host'"):
        choose_transport("nccl", shared)
    no_lib = [TransportReport(True, "NCCL 2.28.3", GPU_A),
              TransportReport(False, "CuPy found no NCCL library", GPU_B)]
    with pytest.raises(ConfigError, match="rank 1: CuPy found no NCCL library"):
        choose_transport("nccl", no_lib)
    assert choose_transport("auto", no_lib) == ("host", "rank 1: CuPy found no NCCL library")
    with pytest.raises(ConfigError, match="Unknown halo transport"):
        choose_transport("fast", no_lib)


def test_a_host_backend_reports_no_nccl():
    report = local_report(NumpyBackend(threads=1))
    assert report == TransportReport(False, "the numpy backend keeps its populations in host "
                                            "memory")
    transport, why = choose_transport("auto", [report, report])
    assert transport == "host" and why.startswith("rank 0: the numpy backend")


def test_exchange_factory_needs_a_resolved_transport():
    with pytest.raises(ValueError, match="choose_transport"):
        exchange_factory("auto", comm=None)
    with pytest.raises(ValueError, match="NcclLink"):
        exchange_factory("nccl", comm=None)
    problem = Problem.from_config(porous(), config())
    rank = RankSolver(problem, decompose(problem.tiling, 2, 0), 0, NumpyBackend(threads=1),
                      exchange_factory("host", comm="world"))
    assert isinstance(rank.exchange, MpiExchange) and rank.exchange.comm == "world"


# -- GPU binding -------------------------------------------------------------------------------
def test_each_rank_sees_every_gpu_with_its_own_first():
    assert rotated_gpus(["0", "1"], 0) == ["0", "1"]
    assert rotated_gpus(["0", "1"], 1) == ["1", "0"]
    assert rotated_gpus(["0", "1", "2", "3"], 2) == ["2", "3", "0", "1"]
    assert rotated_gpus(["0", "1"], 3) == ["1", "0"]  # more ranks than GPUs: shared
    assert rotated_gpus(["GPU-a", "GPU-b"], 1) == ["GPU-b", "GPU-a"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3,"}) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


# -- the NCCL exchange's ordering, on the CPU ----------------------------------------------------
class _LoopbackNccl:
    """Completes a send once the peer has posted its receive (either order), like a group."""

    def __init__(self) -> None:
        self.sent: dict[tuple[int, int], np.ndarray] = {}
        self.waiting: dict[tuple[int, int], np.ndarray] = {}
        self.streams: set = set()

    def link(self, rank: int):
        hub = self

        class Link:
            def exchange(self, send, recv, stream):
                hub.streams.add(stream)
                for peer, buffer in send.items():
                    hub._deliver((rank, peer), buffer.copy())
                for peer, buffer in recv.items():
                    hub._expect((peer, rank), buffer)

        return Link()

    def _deliver(self, key, values) -> None:
        if key in self.waiting:
            self.waiting.pop(key)[...] = values
        else:
            self.sent[key] = values

    def _expect(self, key, buffer) -> None:
        if key in self.sent:
            buffer[...] = self.sent.pop(key)
        else:
            self.waiting[key] = buffer


class _HostAsDevice:
    """A NumPy stepper seen through the device-side interface NcclExchange uses."""

    halo_stream = "halo stream"

    def __init__(self, stepper) -> None:
        self._stepper = stepper

    def device_index(self, index):
        return self._stepper.device_index(index)

    def device_buffer(self, n):
        return self._stepper.host_buffer(n)

    def gather_on_device(self, f, index, out):
        self._stepper.gather(f, index, out)

    def scatter_on_device(self, f, index, values):
        self._stepper.scatter(f, index, values)


@pytest.mark.parametrize("n_ranks,axis", [(2, 0), (3, 2)])
def test_nccl_exchange_sequence_matches_one_process_bitwise(n_ranks, axis):
    solid, cfg = porous(), config()
    problem = Problem.from_config(solid, cfg)
    f0 = noisy_start(problem)
    expected = reference(solid, cfg, f0, 8)
    hub, dec = _LoopbackNccl(), decompose(problem.tiling, n_ranks, axis)
    ranks = [RankSolver(problem, dec, r, NumpyBackend(threads=1),
                        lambda plan, s, r=r: NcclExchange(hub.link(r), plan, _HostAsDevice(s)))
             for r in range(n_ranks)]
    for rank in ranks:
        assert isinstance(rank.exchange, NcclExchange) and rank.exchange.buffers.device
        rank.backend.set_populations(rank.state, f0[rank.layout.global_tiles])
    step_together(ranks, 8)
    assert not hub.sent and not hub.waiting and hub.streams == {"halo stream"}
    got = np.full_like(expected, np.nan)
    for rank in ranks:
        got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
    assert np.array_equal(got, expected)


def test_step_timeline_writes_microseconds_per_edge_of_the_last_steps(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from solver.backends.cuda import timeline as gpu_timeline

    clock = iter(range(1000))

    class Event:  # a timed CUDA event stand-in: records a tick of a fake clock (ms)
        def record(self, stream):
            self.ms = next(clock)

    cuda = SimpleNamespace(Event=Event, Device=lambda: SimpleNamespace(synchronize=lambda: None),
                           get_elapsed_time=lambda a, b: b.ms - a.ms)
    stream = SimpleNamespace(is_capturing=lambda: False)
    monkeypatch.setenv(gpu_timeline.TIMELINE_VARIABLE, str(tmp_path))
    timeline = gpu_timeline.timeline_from_environment(SimpleNamespace(cuda=cuda))
    for _ in range(gpu_timeline.KEEP + 3):
        timeline.mark(stream, "boundary queued")
        timeline.mark(stream, "interior done")
        timeline.end_step()
    rows = json.loads(timeline.write(1).read_text())
    assert len(rows) == gpu_timeline.KEEP
    assert rows[0] == {"boundary queued": 0.0, "interior done": 1000.0}  # 1 ms apart
    assert rows[-1] == {**rows[0], "since previous step": 2000.0}
    monkeypatch.delenv(gpu_timeline.TIMELINE_VARIABLE)
    assert gpu_timeline.timeline_from_environment(SimpleNamespace(cuda=cuda)) is None


def test_nccl_link_limits_p2p_channels_unless_the_environment_says_otherwise(monkeypatch):
    from types import SimpleNamespace

    from solver.backends.cuda.nccl import P2P_DEFAULTS, NcclLink

    seen = []
    nccl = SimpleNamespace(
        get_unique_id=lambda: b"id", NCCL_FLOAT32=7, NCCL_FLOAT64=8,
        NcclCommunicator=lambda size, uid, rank: seen.append(dict(os.environ)) or
        SimpleNamespace(device_id=lambda: 0))
    comm = SimpleNamespace(Get_rank=lambda: 0, Get_size=lambda: 1, bcast=lambda x, root: x)
    (name, value), = P2P_DEFAULTS.items()
    monkeypatch.delenv(name, raising=False)
    NcclLink(nccl, comm)
    assert seen[-1][name] == value  # set before the communicator exists
    monkeypatch.setenv(name, "16")
    NcclLink(nccl, comm)
    assert seen[-1][name] == "16"
