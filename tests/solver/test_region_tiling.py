"""The whole tiling built by ranks from their own slabs (solver.distributed.region_tiling)
equals one process's Tiling.build of the whole image, bit for bit; the ranks agree on the
offset, axis and slab bounds that decompose() cuts from that tiling; the survey's pore size is
the stability check's. Ranks are simulated in one process (the MPI run is
tests/solver/test_distributed.py's)."""

from __future__ import annotations

import numpy as np
import pytest

from geometries.regions import ArrayRegions, ImageRegions
from solver.config import ConfigError
from solver.distributed.decomposition import decompose
from solver.distributed.region_tiling import (
    agree,
    assemble,
    combine,
    slab_tiles,
    survey,
    tile_regions,
)
from solver.stability import pore_size
from solver.tiling import Tiling


def _pack(shape, seed=0, porosity=0.55):
    rng = np.random.default_rng(seed)
    smooth = rng.random(shape)
    for axis in range(len(shape)):  # a little correlation: tiles of mixed occupancy
        smooth = (smooth + np.roll(smooth, 1, axis) + np.roll(smooth, -1, axis)) / 3
    return smooth > np.quantile(smooth, porosity)


def _by_ranks(source, a, n, periodic, force, axis="longest", search=True, chunk=2):
    """Every simulated rank's survey and slab, combined as the MPI path combines them."""
    flow = int(np.argmax(np.abs(force)))
    parts = [survey(source, a, flow, periodic, r, n, search, chunk=chunk) for r in range(n)]
    agreed = agree(combine(parts), n, axis, force, search)
    slabs = [slab_tiles(source, agreed, r, chunk=chunk) for r in range(n)]
    tiles = [np.concatenate([t for t, _ in chunks]) for chunks in slabs]
    blocks = (s[lo:lo + 3] for chunks in slabs for _, s in chunks for lo in range(0, len(s), 3))
    return assemble(tuple(source.shape), agreed, tiles, blocks), agreed


@pytest.mark.parametrize("shape,a,n,force,search", [
    ((30, 21, 17), 4, 3, (1e-6, 0, 0), True),   # edges not multiples of a; read along x
    ((19, 26, 33), 4, 4, (0, 0, 1e-6), True),   # read along z, slabs along z
    ((26, 19, 14), 4, 2, (0, 1e-6, 0), False),  # the origin grid alone
    ((37, 29), 8, 3, (0, 1e-6), True),          # 2D, tile edge 8
])
def test_ranks_tile_their_slabs_into_one_process_tiling(shape, a, n, force, search):
    solid = _pack(shape)
    periodic = (True,) + (False,) * (len(shape) - 1)
    got, agreed = _by_ranks(ArrayRegions(solid), a, n, periodic, force, search=search)
    want = Tiling.build(solid, a, "best" if search else (0,) * len(shape))
    assert got.offset == want.offset and got.shape == want.shape
    assert got.searched == want.searched  # the same floats: eta_t of every offset
    for name in ("tiles", "solid", "tile_map"):
        a_, b_ = getattr(got, name), getattr(want, name)
        assert a_.dtype == b_.dtype and np.array_equal(a_, b_), name
    dec = decompose(want, n, "longest", np.asarray(force))
    assert agreed.axis == dec.axis and tuple(agreed.bounds) == dec.bounds
    assert agreed.survey.n_fluid == int((~solid).sum())
    flow = int(np.argmax(np.abs(force)))
    assert agreed.survey.pore_size(flow) == pore_size(solid, flow, periodic)


def test_one_process_tile_regions_in_default_chunks_is_tiling_build(monkeypatch):
    """tile_regions without ranks (comm None), chunks and message pieces of a few rows."""
    import solver.distributed.region_tiling as rt

    monkeypatch.setattr(rt, "CHUNK_VOXELS", 700)
    monkeypatch.setattr(rt, "SEND_ROWS", 5)
    solid = _pack((22, 17, 30), 7)
    got, agreed = tile_regions(ArrayRegions(solid), 4, (False,) * 3, (0, 0, 0))
    want = Tiling.build(solid, 4, "best")
    assert got.offset == want.offset and agreed.axis == 2
    for name in ("tiles", "solid", "tile_map"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    # What rank 0 receives: pieces of exactly SEND_ROWS rows across chunks, the last fewer.
    chunks = rt.slab_tiles(ArrayRegions(solid), agreed, 0)
    rows = np.concatenate([s for _, s in chunks])
    assert len(chunks) > 2 and any(len(s) % 5 for _, s in chunks)
    pieces = list(rt._blocks(chunks))
    assert [len(p) for p in pieces[:-1]] == [5] * (len(pieces) - 1) and 0 < len(pieces[-1]) <= 5
    assert np.array_equal(np.concatenate(pieces), rows) and chunks == []


def test_image_file_regions_read_and_travel_as_their_path(tmp_path):
    """A .npy and a Fortran-ordered .raw label image, segmented slab by slab with the loader's
    options, give the loader's mask; pickled, only the path travels."""
    import pickle

    import geometries

    labels = np.where(_pack((12, 9, 7), 3), 2, 0).astype(np.uint8)
    labels[0, 0, 0] = 5
    np.save(tmp_path / "img.npy", labels)
    (tmp_path / "img.raw").write_bytes(np.asfortranarray(labels).tobytes(order="F"))
    sources = [ImageRegions(tmp_path / "img.npy", pore_value=0),
               ImageRegions(tmp_path / "img.raw", shape=labels.shape, pore_value=0)]
    want = geometries.load(tmp_path / "img.npy", pore_value=0).solid
    for source in sources:
        source = pickle.loads(pickle.dumps(source))
        assert source.shape == labels.shape
        slabs = [source.slab(1, lo, min(lo + 4, 9)) for lo in range(0, 9, 4)]
        assert np.array_equal(np.concatenate(slabs, axis=1), want)
    assert len(pickle.dumps(sources[0])) < 2000
    with pytest.raises(Exception, match="needs"):
        ImageRegions(tmp_path / "img.raw", shape=(12, 9, 8))


def test_agreement_refuses_a_rank_without_fluid_tiles():
    solid = np.ones((8, 8, 40), bool)
    solid[:, :, 4:8] = False  # fluid in one tile layer of ten along z
    source = ArrayRegions(solid)
    parts = [survey(source, 4, 0, (False,) * 3, r, 2) for r in range(2)]
    with pytest.raises(ConfigError, match="no fluid tile"):
        agree(combine(parts), 2, 2, np.zeros(3), True)


def test_case_geometry_read_by_slabs_or_whole_with_the_reason(tmp_path):
    """solver.case.region_source: .npy, .raw and TIFF stacks are read by slabs (the loader's
    mask and frame); a generator, another format, a loader option only the whole image
    allows, or a single TIFF page keep the whole-image path, with the reason."""
    import geometries
    from solver.case import GeometrySpec, load_geometry, region_source

    tifffile = pytest.importorskip("tifffile")
    labels = np.where(_pack((10, 8, 6), 5), 3, 0).astype(np.uint8)
    np.save(tmp_path / "img.npy", labels)
    (tmp_path / "img.raw").write_bytes(labels.tobytes(order="F"))
    tifffile.imwrite(tmp_path / "img.tif", labels.transpose(2, 1, 0))  # (z, y, x) pages
    tifffile.imwrite(tmp_path / "page.tif", labels[:, :, 0].T)
    tifffile.imwrite(tmp_path / "fiji.tif", labels.transpose(2, 1, 0), imagej=True,
                     resolution=(0.25, 0.25), metadata={"spacing": 4.0, "unit": "micron"})
    specs = [GeometrySpec("file", str(tmp_path / "fiji.tif")),  # 4 µm from the calibration
             GeometrySpec("file", str(tmp_path / "img.npy"), options={"name": "rock"},
                          voxel_size=2e-6),
             GeometrySpec("file", str(tmp_path / "img.raw"),
                          options={"shape": [10, 8, 6], "flow_axis": 2}),
             GeometrySpec("file", str(tmp_path / "img.tif"), origin=(1.0, 2.0, 3.0))]
    for spec in specs:
        source, frame = region_source(spec)
        whole = load_geometry(spec)
        assert np.array_equal(source.slab(2, 0, 6), whole.solid), spec.target
        got = (frame["voxel_size"], frame["origin"], frame["flow_axis"], frame["name"])
        assert got == (whole.voxel_size, tuple(whole.origin), whole.flow_axis, whole.name)
    assert region_source(specs[0])[1]["voxel_size"] == pytest.approx(4e-6)
    for spec, why in [
            (GeometrySpec("generator", "channel", {"shape": [8, 8, 8]}), "made whole"),
            (GeometrySpec("file", str(tmp_path / "page.tif")), "not a stack"),
            (GeometrySpec("file", str(tmp_path / "img.npy"), options={"format": "npy"}),
             "['format'] read the whole image")]:
        source, reason = region_source(spec)
        assert source is None and why in reason, reason
    assert geometries.load(tmp_path / "page.tif").solid.ndim == 2


def test_a_rank_that_cannot_read_its_share_stops_every_rank_with_the_reason():
    """A read failing on a rank (a file gone, a bad voxel) is raised on every rank after the
    survey, as ConfigError naming the rank (a user's error), not left in a collective."""
    mpi = pytest.importorskip("mpi4py.MPI")

    class Broken(ArrayRegions):
        def slab(self, axis, start, stop):
            raise OSError("the file went away")

    with pytest.raises(ConfigError, match="rank 0: OSError: the file went away"):
        tile_regions(Broken(_pack((12, 12, 12))), 4, (False,) * 3, (0, 0, 0),
                     comm=mpi.COMM_SELF)


@pytest.mark.parametrize("periodic", [False, True])
def test_a_rank_tiles_its_own_part_as_rank_0_cuts_it(periodic):
    """own_part (slabs along z): the same tiles in the same order, global numbers, owners and
    layer counts as rank_part cuts from the whole tiling, so the same rank solver."""
    from solver.config import SimulationConfig
    from solver.distributed.region_tiling import own_part
    from solver.distributed.slab_parts import rank_part
    from solver.problem import Problem

    solid = _pack((13, 11, 34), 2)
    config = SimulationConfig(precision="float64", tau=0.8, body_force=(0, 0, 1e-6),
                              **({} if periodic else {"z_min": "wall", "z_max": "wall"}))
    flags = config.periodic_axes()
    source = ArrayRegions(solid)
    got, agreed = _by_ranks(source, 4, 3, flags, (0, 0, 1e-6))
    problem = Problem.from_tiling(got, config)
    dec = decompose(problem.tiling, 3, "longest", problem.force)
    assert dec.axis == agreed.axis == 2 and tuple(agreed.bounds) == dec.bounds
    for r in range(3):
        want, mine = rank_part(problem, dec, r), own_part(source, agreed, problem, r)
        assert np.array_equal(mine.tiles, want.tiles) and mine.links.size == 0
        for name in ("tiles", "solid", "tile_map"):
            assert np.array_equal(getattr(mine.problem.tiling, name),
                                  getattr(want.problem.tiling, name)), (r, name)
        assert np.array_equal(mine.decomposition.owner, want.decomposition.owner)
        assert np.array_equal(mine.decomposition.counts, want.decomposition.counts)
        assert mine.decomposition.bounds == want.decomposition.bounds
