"""The Windkessel outlets' kernels (:mod:`solver.backends.cuda.windkessel`) on the CPU: the
CUDA text compiled by g++ and run thread after thread against the NumPy reference
:func:`solver.windkessel.windkessel_update` (bit for bit: the fixed-point sums are integers,
the same in any order, so the emulator's thread-by-thread additions stand for the device's warp
sums and atomics), and compiled by nvcc when present."""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from solver.backends.cuda.iolets import NVCC_OPTIONS
from solver.backends.cuda.windkessel import WARP, windkessel_links, windkessel_source
from solver.windkessel import (
    DENSITY,
    TRACE,
    Windkessel,
    WindkesselTable,
    initial_state,
    windkessel_update,
)

from .gxx_cache import compile_once
from .iolet_emulator import _SHIM

NVCC = shutil.which("nvcc")

_RUN = r"""
extern "C" void emu_windkessel(const wk_real* flux, const long long* link, const int* outlet,
    unsigned long long* acc, double* state, const double* rp, const double* rd,
    const double* pd, const double* decay, double rho_ref, double rho0, double* trace,
    wk_real* value, const long long* step, long long every, int links, int n)
{
    blockDim.x = 1;
    for (int t = 0; t < links; ++t) {
        blockIdx.x = t;
        wk_sum(flux, link, outlet, acc, step, every, links);
    }
    for (int t = 0; t < n; ++t) {
        blockIdx.x = t;
        wk_update(acc, state, rp, rd, pd, decay, rho_ref, rho0, trace, step, every, n);
    }
    for (int t = 0; t < links; ++t) {
        blockIdx.x = t;
        wk_values(value, link, outlet, state, step, every, links, n);
    }
}
"""


def _library(precision: str):
    src = _SHIM + "#define WK_HOST 1\nusing std::llrint;\n" + windkessel_source(precision) + _RUN
    key = hashlib.sha1(src.encode()).hexdigest()[:16]
    lib = Path(tempfile.gettempdir()) / "lbm_windkessel_emulator" / f"wk_{key}.so"
    compile_once(src, lib, ["-O1", "-std=c++20", "-ffp-contract=off", "-shared", "-fPIC", "-w"])
    return ctypes.CDLL(str(lib)).emu_windkessel


def _table(every: int) -> tuple[WindkesselTable, np.ndarray]:
    """Two outlets of 300 and 57 links among 400 (neither a multiple of a warp)."""
    models = {2: Windkessel(0.01, 5e3, 0.2, 0.001, 0.002), 3: Windkessel(0.0, 2e4, 0.05)}
    table = WindkesselTable((2, 3), np.array([20, 330]), np.array([320, 387]),
                            np.array([0.01, 0.0]), np.array([0.2, 0.05]),
                            np.array([0.001, 0.0]),
                            np.exp(-every / np.array([0.2 * 5e3, 0.05 * 2e4])), 1.0, 1.0, every)
    return table, initial_state(models, table)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_windkessel_kernels_equal_the_numpy_update_bit_for_bit(precision):
    real = np.dtype(precision)
    every = 3
    table, state = _table(every)
    run = _library(precision)
    rng = np.random.default_rng(7)
    dev_state, dev_trace = state.copy(), np.zeros((TRACE, 2, table.n))
    ref_state, ref_trace = state.copy(), np.zeros((TRACE, 2, table.n))
    value = np.full(400, 1.0, dtype=real)
    links, outlet = windkessel_links(table)
    assert links.size % WARP == 0 and (links == -1).sum() == 2 * WARP - 300 % WARP - 57 % WARP
    acc = np.zeros(table.n, dtype=np.uint64)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    consts = [np.ascontiguousarray(a, dtype=np.float64)
              for a in (table.rp, table.rd, table.pd, table.decay)]
    updates = 0
    for step in range(1, 13):
        flux = (rng.normal(size=400) * 1e-3 + 2e-4).astype(real)
        counter = np.array([step], dtype=np.int64)
        run(ptr(flux), ptr(links), ptr(outlet), ptr(acc), ptr(dev_state),
            *(ptr(a) for a in consts), ctypes.c_double(1.0), ctypes.c_double(1.0),
            ptr(dev_trace), ptr(value), ptr(counter), ctypes.c_longlong(every),
            ctypes.c_int(links.size), ctypes.c_int(table.n))
        updated = windkessel_update(table, ref_state, flux, step, ref_trace)
        updates += updated
        assert np.array_equal(dev_state, ref_state)  # bit for bit, updated or not
        assert np.array_equal(dev_trace, ref_trace)
        assert not acc.any()  # cleared by the update that read it
        real_links = links >= 0
        expected = ref_state[DENSITY][outlet[real_links]].astype(real)
        assert np.array_equal(value[links[real_links]], expected) or not updates
    assert updates == 4
    # The flow out is minus the summed flux, the capacitor moved towards P_d + R_d Q.
    assert ref_state[2, 0] == pytest.approx(-float(flux[20:320].astype(np.float64).sum()),
                                            rel=1e-8)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_windkessel_kernels_compile_with_nvcc(tmp_path, precision):
    path = tmp_path / "wk.cu"
    path.write_text(windkessel_source(precision))
    done = subprocess.run([NVCC, *NVCC_OPTIONS, "-arch=sm_90", "-c", "-o",
                           str(tmp_path / "wk.o"), str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
