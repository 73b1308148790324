"""The fused CUDA conduction solve (solver.backends.cuda.conduction) against the NumPy one.

On the CPU its kernel text runs under g++ (:mod:`.grid_stride_emulator`) through ``cg_solve``'s
own host loop; on a GPU
machine the same solve runs on CuPy (``-m gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

from solver.backends.cuda.conduction import SOURCE, cg_solve
from solver.rock.conduction import formation_factor

from .grid_stride_emulator import compiler, launch_args, load, run_template

_WRAPPERS = "".join([
    run_template("cg_residual", "const double* x, const int* links, const double* diag, "
                 "const double* inv, const double* rhs, double* r, double* z, double* p, "
                 "double* scal, long long n, int dirs",
                 "x, links, diag, inv, rhs, r, z, p, scal, n, dirs"),
    run_template("cg_matvec", "const double* p, const int* links, const double* diag, "
                 "double* q, double* scal, const int* state, long long n, int dirs",
                 "p, links, diag, q, scal, state, n, dirs"),
    run_template("cg_update", "double* x, double* r, double* z, const double* p, "
                 "const double* q, const double* inv, double* scal, const int* state, "
                 "long long n", "x, r, z, p, q, inv, scal, state, n"),
    run_template("cg_scalars", "double* scal, int* state, double limit, int cap",
                 "scal, state, limit, cap"),
    run_template("cg_direction", "double* p, const double* z, const double* scal, "
                 "const int* state, long long n", "p, z, scal, state, n"),
])


def _emulated_launch(name: str, blocks: int, threads: int, args: tuple) -> None:
    if compiler() is None:
        pytest.skip("no g++ to run the CUDA kernel text on the CPU")
    lib = load(SOURCE, _WRAPPERS, "conduction")
    getattr(lib, "run_" + name)(blocks, threads, *launch_args(args))


def _system(solid: np.ndarray, axis: int):
    from solver.rock.conduction import _connected, _neighbours

    pore = _connected(~solid, axis, "wall")
    along, table = _neighbours(pore, axis, "wall")
    count, length = table.shape[1], solid.shape[axis]
    first = (along == 0).astype(float)
    last = (along == length - 1).astype(float)
    diagonal = 2.0 * (first + last) + (table != count).sum(axis=0)
    return diagonal, table, 2.0 * first, 1.0 - (along + 0.5) / length


def _pack(n: int = 12) -> np.ndarray:
    rng = np.random.default_rng(4)
    solid = rng.random((n, n, n)) < 0.3
    solid[:, n // 2, n // 2] = False  # one straight path at least
    return solid


def test_emulated_kernels_solve_as_the_numpy_conjugate_gradients():
    """Same iterations and iterate as the NumPy form (dot products summed in another order),
    on 2 blocks of 64 threads (two warps each: the block sums cross warps)."""
    from solver.rock.conduction import _solve

    diagonal, table, b, start = _system(_pack(), 0)
    x, iterations, residual = cg_solve(diagonal, table, b, start, 1e-8, 10_000, xp=np,
                                       launch=_emulated_launch, max_blocks=2, threads=64)
    ref, ref_iterations, ref_residual = _solve(np, diagonal, table, b, start, 1e-8, 10_000)
    assert abs(iterations - ref_iterations) <= 1 and residual < 1e-8
    np.testing.assert_allclose(x, ref, rtol=1e-7, atol=1e-9)
    capped = cg_solve(diagonal, table, b, start, 1e-8, 5, xp=np, launch=_emulated_launch,
                      max_blocks=2, threads=64)
    assert capped[1] == 5 and capped[2] > 1e-8


def test_emulated_kernels_stop_at_once_on_an_exact_start():
    """A straight channel's linear start is the solution: iteration 0."""
    solid = np.ones((10, 6, 6), bool)
    solid[:, 2:4, 2:4] = False
    diagonal, table, b, start = _system(solid, 0)
    x, iterations, _ = cg_solve(diagonal, table, b, start, 1e-8, 100, xp=np,
                                launch=_emulated_launch, max_blocks=2, threads=64)
    assert iterations == 0
    np.testing.assert_allclose(x, start)


@pytest.mark.gpu
def test_cupy_solve_gives_the_numpy_formation_factor():
    """On the GPU: F of a random pack from the fused kernels equals the NumPy solve's."""
    import importlib

    cupy = importlib.import_module("cupy")
    solid = _pack(24)
    reference = formation_factor(solid, 1)
    device = formation_factor(solid, 1, xp=cupy)
    assert device.formation_factor == pytest.approx(reference.formation_factor, rel=1e-9)
    assert abs(device.iterations - reference.iterations) <= 2
