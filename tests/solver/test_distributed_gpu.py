"""Distributed runs on the CuPy backend equal one GPU bit for bit (``pytest -m gpu``).

The case has a velocity inlet and a pressure outlet on x (Zou-He), walls in y, periodic z, a
random porous solid with empty tiles and sizes that are no multiple of the tile edge, and a
noisy start. Every rank steps its boundary and interior tile ranges on two streams and
exchanges halos through page-locked host buffers (transport ``host``) or GPU to GPU through
NCCL (transport ``nccl``, one GPU per rank, so only with two GPUs or more); populations after
the run must equal one ordinary CuPy process's with ``np.array_equal``. In one process the
ranks talk through the loopback hub; under ``mpirun`` through MPI or NCCL (with the host
transport several ranks share GPU 0 when there is only one). A three-rank split along x
leaves the middle rank without inlet or outlet nodes. With NCCL most steps run as replays of a
captured CUDA graph (both streams and the NCCL calls) when asked (``--graphs``); the runs
check that they did.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from solver.config import SimulationConfig
from solver.distributed import (
    LoopbackHub,
    RankSolver,
    decompose,
    mpi_available,
    step_together,
    visible_gpus,
)
from solver.distributed.comm import find_mpirun
from solver.problem import Problem

from .porous_cases import noisy_start

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
SHAPE = (26, 15, 23)
STEPS = 20
#: step() calls of the NCCL runs (solver.distributed.replay, 16 steps per graph): 1 plain step
#: (the peers connect); a 16-step graph captured and replayed once, 3 plain; 1 plain step back
#: to the graph's copy, a replay, 3 plain.
NCCL_CALLS = (1, 19, 20)
SETTINGS = {"lattice": "D3Q19", "collision": "TRT", "tau": 0.7, "body_force": (0.0, 0.0, 3e-6),
            "x_min": "velocity", "x_min_value": 0.02, "x_max": "pressure",
            "y_min": "wall", "y_max": "wall"}


def porous(shape=SHAPE, seed=0) -> np.ndarray:
    """Random solid mask (~35 % solid) with a solid block, so some tiles are empty."""
    solid = np.random.default_rng(seed).random(shape) < 0.35
    solid[:9, :9, :9] = True
    return solid


def config(**kw) -> SimulationConfig:
    """The case above on the CuPy backend; ``kw`` overrides."""
    return SimulationConfig(**{**SETTINGS, "backend": "cupy", **kw})


@pytest.fixture(scope="module")
def backend():
    from solver.backends import get_backend

    return get_backend("cupy")


def one_gpu(backend, problem: Problem, f0: np.ndarray, steps: int) -> np.ndarray:
    """Populations of one ordinary CuPy state after ``steps`` steps from ``f0``."""
    state = backend.allocate(problem)
    backend.set_populations(state, f0)
    backend.step(state, steps)
    out = backend.populations(state)
    backend.release(state)
    return out


@pytest.mark.parametrize("precision,layout,tpb", [("float64", "paper", 2),
                                                  ("float32", "xyz", 1)])
def test_loopback_cupy_ranks_match_one_gpu_bitwise(backend, precision, layout, tpb):
    problem = Problem.from_config(porous(), config(precision=precision, gpu_layout=layout,
                                                   tiles_per_block=tpb))
    f0 = noisy_start(problem)
    expected = one_gpu(backend, problem, f0, STEPS)
    for n, axis in ((2, 0), (3, 0), (2, 1), (3, 2)):
        dec = decompose(problem.tiling, n, axis)
        hub = LoopbackHub()
        ranks = [RankSolver(problem, dec, r, backend,
                            lambda plan, s, r=r, hub=hub: hub.exchange(r, plan, s))
                 for r in range(n)]
        for rank in ranks:
            backend.set_populations(rank.state, f0[rank.layout.global_tiles])
            rank.stepper.idle()
        step_together(ranks, STEPS)
        got = np.full_like(expected, np.nan)
        for rank in ranks:
            got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
            rank.release()
        assert np.array_equal(got, expected), (n, axis, np.nanmax(np.abs(got - expected)))


def test_allocate_refuses_a_rank_local_problem(backend):
    problem = Problem.from_config(porous(), config(precision="float32"))
    owned = np.arange(problem.tiling.n_tiles) < 5
    from dataclasses import replace

    with pytest.raises(ValueError, match="phase_stepper"):
        backend.allocate(replace(problem, owned=owned))
    with pytest.raises(ValueError, match="owned tiles first"):
        backend.phase_stepper(replace(problem, owned=owned), 2, 7)


MPI_OK, MPI_WHY = mpi_available()


needs_mpi = pytest.mark.skipif(
    not MPI_OK or find_mpirun() is None,
    reason=f"MPI test skipped: {MPI_WHY if not MPI_OK else 'no mpirun on PATH'}")
#: Open MPI refuses to start as root unless told to (the lent GPU machines run tests as root).
_ROOT_MPIRUN = ({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
                if os.geteuid() == 0 else {})

def opening_cases_on_one_gpu_and_two_ranks(tmp_path, *flags: str):
    """Run tests/solver/opening_cases.py on one CuPy process and under ``mpirun -n 2`` (split
    along y) with the same flags; return the two .npz archives (one, ranks)."""
    pytest.importorskip("geometries.openings")
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", **_ROOT_MPIRUN)
    script = [sys.executable, "-m", "tests.solver.opening_cases"]
    for cmd in ([*script, str(tmp_path / "one.npz"), "--single", "--backend", "cupy", *flags],
                [find_mpirun(), "-n", "2", *script, str(tmp_path / "mpi.npz"), "--axis", "1",
                 "--backend", "cupy", *flags]):
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    return np.load(tmp_path / "one.npz"), np.load(tmp_path / "mpi.npz")


def assert_ranks_match_one_gpu(one, ranks) -> None:
    """Every array equal bit for bit, except densities and wall shear stress, which are reduced
    on the GPU on one process and on the host over ranks (last bits of near-zero stresses)."""
    for key in one.files:
        if key.endswith(("/density", "/wss")):
            scale = np.nanmax(np.abs(one[key]))
            np.testing.assert_allclose(ranks[key], one[key], rtol=1e-12, atol=1e-12 * scale)
        else:
            assert np.array_equal(one[key], ranks[key], equal_nan=True), key


#: NCCL needs one GPU per rank.
GPUS = len(visible_gpus())
needs_two_gpus = pytest.mark.skipif(GPUS < 2, reason=f"NCCL halo test skipped: {GPUS} GPU(s) "
                                                     "visible, two ranks need two")


def _mpirun_distributed(tmp_path, n_ranks: int, settings: dict, *extra: str,
                        steps: tuple[int, ...] = (STEPS,)):
    """``mpirun -n N python -m solver.distributed`` on the porous case (one step() call per
    entry of ``steps``); the finished process."""
    cmd = [find_mpirun(), "-n", str(n_ranks), sys.executable, "-m", "solver.distributed",
           str(tmp_path / "solid.npy"), "--backend", "cupy", "--steps", *map(str, steps),
           "--initial", str(tmp_path / "f0.npy"), "--save", str(tmp_path / "out.npz"), *extra]
    for key, value in settings.items():
        text = list(value) if isinstance(value, tuple) else value
        cmd += ["--set", f"{key}={text}".replace("'", '"').replace(" ", "")]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", **_ROOT_MPIRUN)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@needs_mpi
@pytest.mark.parametrize("n_ranks,axis,transport,precision,layout", [
    (2, "longest", "host", "float64", "paper"),
    (3, "0", "auto", "float64", "paper"),
    pytest.param(2, "longest", "nccl", "float64", "paper", marks=needs_two_gpus),
    pytest.param(2, "2", "nccl", "float32", "xyz", marks=needs_two_gpus),
])
def test_mpirun_cupy_matches_one_gpu_bitwise(backend, tmp_path, n_ranks, axis, transport,
                                             precision, layout):
    settings = {**SETTINGS, "precision": precision, "gpu_layout": layout}
    solid = porous()
    problem = Problem.from_config(solid, config(precision=precision, gpu_layout=layout))
    f0 = noisy_start(problem)
    np.save(tmp_path / "solid.npy", solid)
    np.save(tmp_path / "f0.npy", f0)
    steps = (STEPS,) if transport == "host" else NCCL_CALLS
    done = _mpirun_distributed(tmp_path, n_ranks, settings, "--axis", axis,
                               "--transport", transport, "--graphs", steps=steps)
    assert done.returncode == 0, done.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")
    assert int(out["ranks"]) == n_ranks
    if transport != "auto":
        assert str(out["transport"]) == transport
    elif n_ranks > GPUS:  # ranks share a GPU: auto must not pick NCCL
        assert str(out["transport"]) == "host"
    expected = one_gpu(backend, problem, f0, sum(steps))
    assert np.array_equal(out["populations"], expected)
    if str(out["transport"]) == "nccl":  # the bitwise check above covered graph replays
        assert int(out["replayed_steps"]) == 32, done.stderr[-3000:]


@needs_mpi
@needs_two_gpus
def test_nccl_with_more_ranks_than_gpus_is_refused(tmp_path):
    np.save(tmp_path / "solid.npy", porous())
    problem = Problem.from_config(porous(), config(precision="float64"))
    np.save(tmp_path / "f0.npy", noisy_start(problem))
    done = _mpirun_distributed(tmp_path, GPUS + 1, {**SETTINGS, "precision": "float64"},
                               "--axis", "0", "--transport", "nccl")
    assert done.returncode != 0, done.stderr[-3000:]  # rank 0 exits with 2
    assert "NCCL halo transport cannot run here" in done.stderr
    assert "share GPU" in done.stderr and "one GPU per rank" in done.stderr
    assert not (tmp_path / "out.npz").exists()


@needs_mpi
def test_solver_run_under_mpirun_on_cupy_matches_one_process(tmp_path):
    """``mpirun -n 2 python -m solver run CASE`` with backend cupy: the checkpoint the ranks
    write as parts equals one ordinary CuPy process's bit for bit. The CSV history agrees to
    1e-12: one process reduces the moments on the GPU, each rank on the host (its readout
    chunks copied from its GPU)."""
    pytest.importorskip("geometries.loaders", reason="case files load geometries via geometries")
    yaml = pytest.importorskip("yaml")

    np.save(tmp_path / "pack.npy", porous())
    config_ = {k: list(v) if isinstance(v, tuple) else v for k, v in SETTINGS.items()}
    case = {"name": "pack", "geometry": {"file": "pack.npy"},
            "config": {**config_, "precision": "float64", "backend": "cupy"},
            "run": {"max_steps": 40, "output_interval": 20, "check_interval": 10,
                    "checkpoint_interval": 20, "convergence": 0, "vti": False}}
    path = tmp_path / "pack.yaml"
    path.write_text(yaml.safe_dump(case))
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=python_path, OMP_NUM_THREADS="1", **_ROOT_MPIRUN)
    for launcher, out in (([], "one"), ([find_mpirun(), "-n", "2"], "mpi")):
        cmd = [*launcher, sys.executable, "-m", "solver", "run", str(path),
               "--output", str(tmp_path / out), "--quiet"]
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    from solver.io import read_checkpoint

    one, mpi = (read_checkpoint(tmp_path / d / "checkpoint.npz") for d in ("one", "mpi"))
    assert mpi.step == 40 and mpi.parts.n_parts == 2  # each rank wrote its own part
    assert np.array_equal(one.populations, mpi.parts.assemble())
    rows = [np.genfromtxt(tmp_path / d / "history.csv", delimiter=",", names=True)
            for d in ("one", "mpi")]
    assert np.array_equal(rows[0]["step"], rows[1]["step"])
    for column in ("u_mean_x", "u_mean_y", "u_mean_z"):
        np.testing.assert_allclose(rows[1][column], rows[0][column], rtol=1e-12, atol=0)
