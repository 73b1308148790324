"""The rock study's set-up on the GPU (issue 29, 1000³ target): the tiling searched and gathered
with CuPy as its array module, and the pores labelled with cupyx, give the host's tiles and
components. The array-module path itself runs on the CPU too, through an array module whose
arrays live "elsewhere" (they must be fetched with ``.get()``, as CuPy's)."""

from __future__ import annotations

import numpy as np
import pytest

from geometries.generators import random_sphere_pack
from geometries.pores import connectivity, pore_labels
from geometries.preprocess import mirror
from solver.config import SimulationConfig
from solver.lattice import get_lattice
from solver.rock import PermeabilitySettings, setup_protocol
from solver.tiling import Tiling


class _Elsewhere(np.ndarray):
    """A NumPy array standing for a device array: the tiling must fetch it with ``get``."""

    def get(self) -> np.ndarray:
        return np.array(self)


class _ArrayModule:
    """The part of an array module (CuPy's) the tiling uses, returning :class:`_Elsewhere`."""

    @staticmethod
    def asarray(a, dtype=None):
        return np.asarray(a, dtype=dtype).view(_Elsewhere)

    @staticmethod
    def zeros(shape, dtype=float):
        return np.zeros(shape, dtype=dtype).view(_Elsewhere)

    @staticmethod
    def ones(shape, dtype=float):
        return np.ones(shape, dtype=dtype).view(_Elsewhere)

    @staticmethod
    def pad(array, pads, constant_values=0):
        return np.pad(np.asarray(array), pads, constant_values=constant_values).view(_Elsewhere)


def _rock_box(axis: int = 0) -> np.ndarray:
    """The mirrored box of a small rock-like pack (odd sizes: tiles cross the box's edges)."""
    pack = random_sphere_pack((22, 19, 17), 0.3, diameter=6, seed=5)
    return mirror(pack, axis).solid


def _same(a: Tiling, b: Tiling) -> None:
    assert a.offset == b.offset and a.searched == b.searched
    for name in ("tile_map", "tiles", "solid"):
        got, want = getattr(a, name), getattr(b, name)
        assert type(got) is np.ndarray and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [0, 2])
@pytest.mark.parametrize("offset", ["best", (1, 2, 3)])
def test_tiling_through_an_array_module_gives_the_host_tiles(axis, offset):
    """Tiling.build(xp=...) searches and gathers with that module and hands back NumPy tables
    equal to the host's (offset, eta_t of every offset, tile map, tiles, solid masks)."""
    solid = _rock_box(axis)
    _same(Tiling.build(solid, 4, offset, xp=_ArrayModule), Tiling.build(solid, 4, offset))


@pytest.mark.gpu
@pytest.mark.parametrize("offset", ["best", (0, 0, 0)])
def test_device_tiling_gives_the_host_tiles(offset):
    from solver.backends.cuda.rock_setup import device_tiling

    solid = _rock_box(1)
    _same(device_tiling(solid, 4, offset), Tiling.build(solid, 4, offset))


def _partition(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered by first appearance in memory order (0 stays 0): equal for two
    labellings exactly when they group the same voxels."""
    flat = labels.ravel()
    ids, first = np.unique(flat, return_index=True)
    rank = np.zeros(int(ids.max()) + 1, dtype=np.int64)
    order = np.argsort(first)
    rank[ids[order]] = np.arange(len(ids))
    if ids[0] == 0:
        rank -= rank[0]
    return rank[flat].reshape(labels.shape)


@pytest.mark.gpu
def test_device_pore_labels_are_the_host_components():
    from solver.backends.cuda.rock_setup import device_pore_labels

    pack = random_sphere_pack((40, 36, 30), 0.2, diameter=8, seed=3)
    links = get_lattice("D3Q19").c
    host = pore_labels(pack, links)
    device, sizes = device_pore_labels(~pack.solid, connectivity(links, 3))
    assert device.dtype == np.int32 and host.max() > 5  # several components to tell apart
    np.testing.assert_array_equal(_partition(device), _partition(host))
    np.testing.assert_array_equal(sizes, np.bincount(device.ravel()))


@pytest.mark.gpu
def test_a_cupy_study_prepares_the_host_studys_tiles_and_pores():
    """prepare_axis and the pore check on CuPy give the NumPy backend's geometry and tiles
    (fine run and every start level)."""
    from solver.backends import get_backend
    from solver.rock.measure import prepare_axis
    from solver.rock.protocol import checked_sample, sample_labels

    pack = random_sphere_pack((40, 40, 40), 0.25, diameter=8, seed=3)
    config = SimulationConfig(precision="float32", collision="TRT")
    settings = PermeabilitySettings(coarse_levels=2, formation_factor=False)
    prepared = {}
    for name in ("numpy", "cupy"):
        backend = get_backend(name)
        labels = sample_labels(pack, config, backend)
        checked = checked_sample(pack, config, 1, labels)
        setup = setup_protocol(pack, config, 1, "mirrored", settings, checked)
        prepared[name] = (checked[0], prepare_axis(setup, settings, backend, on_device=True))
    (report_h, host), (report_d, device) = prepared["numpy"], prepared["cupy"]
    assert report_h == report_d
    sims = [(host.sim, device.sim)] + [(h, d) for (_, h), (_, d) in
                                       zip(host.levels, device.levels, strict=True)]
    assert len(sims) == 3
    for h, d in sims:
        np.testing.assert_array_equal(h.solid, d.solid)
        _same(d.tiling, h.tiling)
