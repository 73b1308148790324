"""Checkpoints of per-rank parts (solver.checkpoint_parts) in one process: a manifest and its
parts resume bit for bit; every damaged, mixed or foreign part set is a clear CheckpointError.

The parts here are cut by hand (tiles shuffled over three parts, as ranks of any slabbing would
hold them) with the functions the ranks use; tests/solver/test_distributed.py writes them over
MPI ranks and resumes them on other rank counts.
"""

from __future__ import annotations

import numpy as np
import pytest

from solver.backends.numpy_backend import NumpyBackend
from solver.checkpoint_parts import PartSet, new_token, parts_folder
from solver.config import SimulationConfig
from solver.io import CheckpointError, checkpoint_of, read_checkpoint, restore, write_checkpoint
from solver.simulation import Simulation

SHAPE = (14, 9, 11)


def solid(seed: int = 0) -> np.ndarray:
    mask = np.random.default_rng(seed).random(SHAPE) < 0.3
    mask[:4, :4, :4] = True
    return mask


def config(**kw) -> SimulationConfig:
    base = dict(precision="float32", tau=0.7, body_force=(1e-5, 0, 0), backend="numpy")
    return SimulationConfig(**{**base, **kw})


def run(steps: int = 6, **kw) -> Simulation:
    sim = Simulation(solid(), config(**kw), backend=NumpyBackend(threads=1))
    sim.step(steps)
    return sim


def write_parts(sim: Simulation, path, n_parts: int = 3, seed: int = 2) -> PartSet:
    """``sim``'s checkpoint as a manifest at ``path`` and ``n_parts`` parts of shuffled tiles."""
    pops = sim.populations().astype(sim.problem.storage.checkpoint_dtype)
    tiles = np.random.default_rng(seed).permutation(sim.tiling.n_tiles)
    split = np.array_split(tiles, n_parts)
    parts = PartSet(folder=parts_folder(path), token=new_token(sim.time_step),
                    tiles_per_part=np.array([len(s) for s in split], dtype=np.int64),
                    shape=pops.shape, dtype=pops.dtype, axis=0,
                    bounds=np.arange(n_parts + 1, dtype=np.int64))
    parts.folder.mkdir(parents=True, exist_ok=True)
    for rank, mine in enumerate(split):
        tiles_path, rows_path = parts.paths(rank)
        np.save(tiles_path, mine.astype(np.int64))
        np.save(rows_path, pops[mine])
    checkpoint = checkpoint_of(sim, populations=False)
    checkpoint.parts = parts
    write_checkpoint(path, checkpoint)
    return parts


def test_parts_resume_in_one_process_bit_for_bit(tmp_path):
    sim = run()
    write_parts(sim, tmp_path / "checkpoint.npz")
    read = read_checkpoint(tmp_path / "checkpoint.npz")
    assert read.populations is None and read.parts.n_parts == 3 and read.step == 6
    resumed = Simulation.load(tmp_path / "checkpoint.npz", solid(),
                              backend=NumpyBackend(threads=1))
    assert resumed.time_step == 6
    assert np.array_equal(resumed.populations(), sim.populations())
    sim.step(5)
    resumed.step(5)
    assert np.array_equal(resumed.populations(), sim.populations())


def test_rows_of_any_tiles_are_read_from_whichever_part_holds_them(tmp_path):
    sim = run(steps=2)
    parts = write_parts(sim, tmp_path / "c.npz", n_parts=4)
    want = np.array([5, 0, sim.tiling.n_tiles - 1, 17])
    assert np.array_equal(parts.read_rows(want),
                          sim.populations().astype(np.float32)[want])
    assert parts.read_rows(np.zeros(0, np.int64)).shape == (0, *parts.shape[1:])


def test_a_single_process_save_replaces_the_parts(tmp_path):
    sim = run(steps=1)
    parts = write_parts(sim, tmp_path / "checkpoint.npz")
    sim.save(tmp_path / "checkpoint.npz")
    assert read_checkpoint(tmp_path / "checkpoint.npz").parts is None
    assert not parts.folder.exists()


def test_a_manifest_of_another_case_is_refused_clearly(tmp_path):
    write_parts(run(steps=1), tmp_path / "checkpoint.npz")
    with pytest.raises(CheckpointError, match="another geometry"):
        Simulation.load(tmp_path / "checkpoint.npz", solid(seed=5))
    write_parts(run(steps=1, tau=0.8), tmp_path / "other.npz")
    with pytest.raises(CheckpointError, match=r"another configuration \(tau: 0.8 -> 0.7"):
        restore(Simulation(solid(), config()), read_checkpoint(tmp_path / "other.npz"))


def _damage(tmp_path, how: str):
    sim = run(steps=1)
    path = tmp_path / "checkpoint.npz"
    parts = write_parts(sim, path)
    tiles_path, rows_path = parts.paths(1)
    if how == "duplicate":  # part 1 claims a tile of part 0
        tiles = np.load(tiles_path)
        tiles[0] = np.load(parts.paths(0)[0])[0]
        np.save(tiles_path, tiles)
    elif how == "missing":
        rows_path.unlink()
    elif how == "pickled":
        np.save(rows_path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif how == "foreign":  # another write's part under this write's name
        np.save(rows_path, np.load(rows_path)[:-1])
    elif how == "out of range":
        tiles = np.load(tiles_path)
        tiles[0] = parts.shape[0] + 7
        np.save(tiles_path, tiles)
    return path


@pytest.mark.parametrize("how,message", [("duplicate", "not once"), ("missing", "is missing"),
                                         ("pickled", "damaged"), ("foreign", "damaged"),
                                         ("out of range", "damaged")])
def test_damaged_or_mixed_parts_are_refused(tmp_path, how, message):
    path = _damage(tmp_path, how)
    with pytest.raises(CheckpointError, match=message):
        Simulation.load(path, solid(), backend=NumpyBackend(threads=1))


@pytest.mark.parametrize("field,value,message", [
    ("parts_token", np.array("../../etc/x"), "token"),
    ("parts_tiles", np.array([1, 2], dtype=np.int64), "tiles"),
    ("parts_tiles", np.array([[1]], dtype=np.int64), "tiles per part"),
    ("parts_dtype", np.array("object"), "float32 or float64"),
])
def test_a_damaged_manifest_is_refused(tmp_path, field, value, message):
    path = tmp_path / "checkpoint.npz"
    write_parts(run(steps=1), path)
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    arrays[field] = value
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(path)
