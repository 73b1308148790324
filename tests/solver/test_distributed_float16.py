"""float16 storage over ranks (NumPy reference, loopback exchange): the halo moves the stored
binary16 values, so the ranks step what one process steps except for the stochastic rounding's
random bits, which hash the rank's local node numbers: the populations agree to float16
rounding and the mass is conserved as in one process."""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

from solver.backends.cuda.phases import COPY_PER_THREAD, halo_copy_source
from solver.backends.numpy_backend import NumpyBackend
from solver.distributed import LoopbackHub, RankSolver, decompose, step_together

from .kernel_emulator import _SHIM, compiler
from .porous_cases import half_tolerance, make_problem, noisy_start, reference

STEPS = 8


def test_float16_ranks_agree_with_one_process_to_float16_rounding() -> None:
    problem = make_problem("D3Q19", "float32", "TRT", storage="float16")
    assert problem.storage.encoded
    f0 = noisy_start(problem)
    expected = reference(problem, f0, STEPS)
    dec = decompose(problem.tiling, 2, 0)
    hub = LoopbackHub()
    ranks = [RankSolver(problem, dec, r, NumpyBackend(threads=1),
                        lambda plan, s, r=r: hub.exchange(r, plan, s)) for r in range(2)]
    for rank in ranks:
        rank.backend.set_populations(rank.state, f0[rank.layout.global_tiles])
        assert rank.stepper.state.f.dtype == np.float16  # the halo moves stored bits
    step_together(ranks, STEPS)
    got = np.full_like(expected, np.nan)
    for rank in ranks:
        got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
    fluid = np.broadcast_to(~problem.tiling.solid[:, None, :], got.shape)
    assert np.abs(got - expected)[fluid].max() <= half_tolerance(problem, expected, STEPS)
    assert not np.array_equal(got, expected)  # the local keys draw other bits
    mass = [f[fluid].sum() for f in (got, expected, f0)]
    assert abs(mass[0] - mass[2]) / mass[2] < 1e-4 and abs(mass[1] - mass[2]) / mass[2] < 1e-4


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("real, dtype", [("unsigned short", np.float16), ("float", np.float32),
                                         ("double", np.float64)])
def test_halo_copy_kernels_move_stored_values_bit_for_bit(tmp_path, real, dtype) -> None:
    """The GPU halo's gather and scatter (solver.backends.cuda.phases) through the g++
    emulator: float16 storage moves its binary16 bits as 16-bit integers."""
    driver = r"""
extern "C" void run_copy(int scatter, void* f, const index_t* index, void* values,
                         long long n, int grid, int block)
{
    gridDim.x = grid; blockDim.x = block;
    for (unsigned b = 0; b < (unsigned)grid; ++b)
        for (unsigned t = 0; t < (unsigned)block; ++t) {
            blockIdx.x = b; threadIdx.x = t;
            if (scatter) halo_scatter((real*)f, index, (const real*)values, n);
            else halo_gather((const real*)f, index, (real*)values, n);
        }
}
"""
    src = tmp_path / "copy.cpp"
    src.write_text(_SHIM + "static emu_dim3 gridDim;\n" + halo_copy_source(real, "unsigned int")
                   + driver)
    lib = tmp_path / "copy.so"
    subprocess.run([compiler(), "-O1", "-std=c++20", "-shared", "-fPIC", "-w", "-o", str(lib),
                    str(src)], check=True, capture_output=True)
    run = ctypes.CDLL(str(lib)).run_copy
    rng = np.random.default_rng(0)
    f = rng.standard_normal(5000).astype(dtype)
    index = rng.choice(f.size, 777, replace=False).astype(np.uint32)
    out = np.zeros(index.size, dtype)
    threads = 64
    grid = -(-index.size // (threads * COPY_PER_THREAD))

    def call(scatter, target, values):
        run(ctypes.c_int(scatter), target.ctypes.data_as(ctypes.c_void_p),
            index.ctypes.data_as(ctypes.c_void_p), values.ctypes.data_as(ctypes.c_void_p),
            ctypes.c_longlong(index.size), ctypes.c_int(grid), ctypes.c_int(threads))

    call(0, f, out)
    assert np.array_equal(out.view(np.uint8), f[index].view(np.uint8))
    g = np.zeros_like(f)
    call(1, g, out)
    assert np.array_equal(g[index].view(np.uint8), f[index].view(np.uint8))
    assert not g[np.setdiff1d(np.arange(f.size), index)].any()


@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
def test_mpirun_float16_runs_and_agrees_to_float16_rounding(tmp_path) -> None:
    """``mpirun -n 2 python -m solver.distributed`` with float16 storage: the host halo moves
    binary16 values (as 16-bit patterns) and the result is one process's to float16 rounding."""
    import os
    import shutil
    import sys
    from pathlib import Path

    pytest.importorskip("mpi4py")
    mpirun = Path(sys.executable).parent / "mpirun"
    mpirun = str(mpirun) if mpirun.exists() else shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("MPI test skipped: no mpirun on PATH")
    problem = make_problem("D3Q19", "float32", "TRT", storage="float16", offset=(0, 0, 0))
    solid = ~problem.tiling.scatter(~problem.tiling.solid[..., None], fill=False)[..., 0]
    f0 = noisy_start(problem)
    np.save(tmp_path / "solid.npy", solid)
    np.save(tmp_path / "f0.npy", f0)
    settings = ["precision=float32", "storage=float16", "collision=TRT", "tau=0.7",
                "fluid_model=incompressible", "body_force=[2e-5,-1e-5,5e-6]", "y_min=wall",
                "y_max=wall", "tile_offset=origin"]
    cmd = [mpirun, "-n", "2", sys.executable, "-m", "solver.distributed", str(tmp_path /
           "solid.npy"), "--steps", str(STEPS), "--initial", str(tmp_path / "f0.npy"),
           "--save", str(tmp_path / "out.npz"), "--transport", "host"]
    for item in settings:
        cmd += ["--set", item]
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo), OMP_NUM_THREADS="1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.load(tmp_path / "out.npz")["populations"]
    expected = reference(problem, f0, STEPS)
    fluid = np.broadcast_to(~problem.tiling.solid[:, None, :], got.shape)
    assert np.abs(got - expected)[fluid].max() <= half_tolerance(problem, expected, STEPS)
