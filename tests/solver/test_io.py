"""Checkpoints (atomic, pickle-free, bitwise resume, refusal of another geometry/config), VTI
export read back by pyvista, CSV history truncation on resume."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import solver.io as sio
from solver.config import SimulationConfig
from solver.io import (
    CheckpointError,
    CsvLog,
    checkpoint_of,
    mask_hash,
    read_checkpoint,
    write_checkpoint,
    write_vti,
)
from solver.simulation import Simulation


def porous_box(seed: int = 0, shape=(10, 9, 8)) -> np.ndarray:
    """Random solid with walls at y = 0 and y = max (periodic elsewhere)."""
    solid = np.random.default_rng(seed).random(shape) < 0.25
    solid[:, 0] = solid[:, -1] = True
    return solid


def config(precision: str = "float64", **kw) -> SimulationConfig:
    values = dict(lattice="D3Q19", collision="TRT", precision=precision, tau=0.7,
                  body_force=(2e-5, 1e-6, 0.0), y_min="wall", y_max="wall")
    values.update(kw)
    return SimulationConfig(**values)


def test_checkpoint_round_trip_keeps_storage_dtype(tmp_path):
    sim = Simulation(porous_box(), config("float32"), backend="numpy")
    sim.step(7)
    path = write_checkpoint(tmp_path / "c.npz", checkpoint_of(sim, {"note": [1, 2]}))
    back = read_checkpoint(path)
    assert back.populations.dtype == np.float32
    np.testing.assert_array_equal(back.populations, sim.populations().astype(np.float32))
    assert back.step == 7 and back.metrics["steps"] == 7 and back.extra == {"note": [1, 2]}
    assert back.shape == sim.solid.shape and back.mask_sha256 == mask_hash(sim.solid)
    assert back.config["tau"] == 0.7 and back.config["body_force"] == [2e-5, 1e-6, 0.0]
    with np.load(path, allow_pickle=False) as data:  # every entry loads without pickle
        assert all(data[k].dtype != object for k in data.files)
    sim.close()


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_resume_is_bitwise_identical(tmp_path, precision):
    n = 15
    solid = porous_box(1)
    straight = Simulation(solid, config(precision), backend="numpy")
    straight.step(2 * n)
    first = Simulation(solid, config(precision), backend="numpy")
    first.step(n)
    first.save(tmp_path / "half.npz")
    first.step(3)  # the saved state must not change afterwards
    resumed = Simulation.load(tmp_path / "half.npz", solid, backend="numpy")
    assert resumed.time_step == n
    resumed.step(n)
    assert resumed.time_step == 2 * n
    assert np.array_equal(resumed.populations(), straight.populations())
    for sim in (straight, first, resumed):
        sim.close()


def test_resume_refuses_other_geometry_and_config(tmp_path):
    solid = porous_box(2)
    sim = Simulation(solid, config(), backend="numpy")
    sim.step(2)
    sim.save(tmp_path / "c.npz")
    other = solid.copy()
    other[3, 4, 5] = ~other[3, 4, 5]
    with pytest.raises(CheckpointError, match="another geometry.*resume with the geometry"):
        Simulation.load(tmp_path / "c.npz", other)
    with pytest.raises(CheckpointError, match="tau: 0.7 -> 0.8"):
        sio.restore(Simulation(solid, config(tau=0.8), backend="numpy"),
                    read_checkpoint(tmp_path / "c.npz"))
    # Execution-only settings may change (e.g. written on the CPU, resumed elsewhere).
    sio.restore(Simulation(solid, config(tiles_per_block=2), backend="numpy"),
                read_checkpoint(tmp_path / "c.npz"))
    sim.close()


def test_unreadable_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="Cannot read checkpoint"):
        read_checkpoint(tmp_path / "junk.npz")


def test_crash_mid_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    sim = Simulation(porous_box(3), config(), backend="numpy")
    sim.step(3)
    path = tmp_path / "checkpoint.npz"
    write_checkpoint(path, checkpoint_of(sim))
    before = path.read_bytes()
    sim.step(3)

    def crash(fh, arrays):
        fh.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(sio, "_write_npz", crash)
    with pytest.raises(OSError, match="disk full"):
        write_checkpoint(path, checkpoint_of(sim))
    assert path.read_bytes() == before
    assert read_checkpoint(path).step == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz"]
    sim.close()


def test_mask_hash_depends_on_values_and_shape_not_memory_order():
    solid = porous_box(4)
    assert mask_hash(solid) == mask_hash(np.asfortranarray(solid))
    flipped = solid.copy()
    flipped[0, 1, 2] = ~flipped[0, 1, 2]
    assert mask_hash(flipped) != mask_hash(solid)
    flat = np.zeros(16, dtype=bool)
    assert mask_hash(flat.reshape(4, 4)) != mask_hash(flat.reshape(2, 8))


@pytest.mark.parametrize("shape", [(7, 5), (6, 5, 4)])
def test_vti_reads_back_with_cells_per_voxel(tmp_path, shape):
    pv = pytest.importorskip("pyvista")
    rng = np.random.default_rng(5)
    d = len(shape)
    fields = {"rho": rng.random(shape), "u": rng.random((d, *shape))}
    fields["rho"][0, 0] = np.nan  # solids are NaN
    origin = (1e-3, 2e-3, 3e-3)[:d]
    path = write_vti(tmp_path / "f.vti", fields, voxel_size=1e-6, origin=origin,
                     extra={"solid": np.zeros(shape, np.uint8)})
    grid = pv.read(path)
    assert grid.n_cells == np.prod(shape)
    assert grid.dimensions == tuple(n + 1 for n in shape) + (1,) * (3 - d)
    np.testing.assert_allclose(grid.spacing, (1e-6,) * 3)
    np.testing.assert_allclose(grid.origin, origin + (0.0,) * (3 - d))
    assert set(grid.cell_data.keys()) == {"rho", "u", "solid"}
    assert grid.cell_data["u"].shape == (np.prod(shape), 3)
    # VTK numbers cells x fastest: voxel (i, j[, k]) is cell i + nx (j + ny k).
    index = (3, 2) if d == 2 else (3, 2, 1)
    cell = index[0] + shape[0] * (index[1] + (shape[1] * index[2] if d == 3 else 0))
    assert grid.cell_data["rho"][cell] == fields["rho"][index]
    np.testing.assert_array_equal(grid.cell_data["u"][cell][:d], fields["u"][(slice(None),
                                                                              *index)])
    assert np.isnan(grid.cell_data["rho"][0])


def test_csv_log_keeps_rows_up_to_the_resumed_step(tmp_path):
    path = tmp_path / "history.csv"
    log = CsvLog(path, ["step", "value"])
    for step in (10, 20, 30):
        log.append({"step": step, "value": step / 10})
    CsvLog(path, ["step", "value"], keep_until=20).append({"step": 30, "value": None})
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["step"], r["value"]) for r in rows] == [("10", "1.0"), ("20", "2.0"), ("30", "")]


def test_config_survives_json_with_its_types():
    original = config("float32", tile_edge=2, body_force=(1e-5, -2e-6, 3e-7))
    back = sio.config_from_values(json.loads(json.dumps(sio.config_values(original))))
    assert back.param.values().keys() == original.param.values().keys()
    for key, value in original.param.values().items():
        if key != "name":
            assert getattr(back, key) == value and type(getattr(back, key)) is type(value), key
