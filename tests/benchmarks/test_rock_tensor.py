"""``benchmarks/rock_time_to_answer``: the 1000³ path of ``rock_tensor.py`` (``--huge``) and the
start-level check ``start_levels.py`` run on the CPU at a small size and write their reports."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "rock_time_to_answer"))

import rock_tensor  # noqa: E402
import start_levels  # noqa: E402


def test_huge_path_runs_one_axis_in_place_with_a_start_chain(tmp_path):
    """``--sizes --huge --huge-size N``: the mirrored protocol only, no formation factor, one
    population copy, ``--coarse-levels`` start levels; every check logged, the levels' steps
    reported."""
    argv = ["--sizes", "--huge", "--huge-size", "24", "--axes", "z", "--coarse-levels", "2",
            "--huge-streaming", "in-place", "--backend", "numpy", "--precision", "float64",
            "--out", str(tmp_path)]
    assert rock_tensor.main(argv) == 0
    (json_path,) = tmp_path.glob("rock_tensor-*-24.json")
    (row,) = json.loads(json_path.read_text())["rows"]
    assert row["protocol"] == "mirrored" and row["coarse_levels"] == 2
    assert row["streaming"] == "in-place"
    assert not row["study"]["formation_factor"]
    (run,) = row["runs"]
    assert run["axis"] == "z" and run["steps"] > 0 and len(run["start_steps"]) == 2
    assert run["work_steps"] > run["steps"]
    assert "coarse steps (1/2, 1/4, ...)" in json_path.with_suffix(".md").read_text()
    # every check's (step, k): what deep_compare.py replays a remainder estimate on
    assert [s for s, _ in run["history"]][-1] == run["steps"] - 1 and run["history"][-1][1] > 0


def test_a_deep_reference_runs_to_the_tolerance_asked_and_says_so(tmp_path):
    """``--tolerance``: the settings changed are in the report, its name and its head."""
    common = ["--sizes", "--huge", "--huge-size", "16", "--axes", "x", "--coarse-levels", "1",
              "--backend", "numpy", "--precision", "float64"]
    assert rock_tensor.main([*common, "--out", str(tmp_path / "default")]) == 0
    assert rock_tensor.main([*common, "--tolerance", "1e-5", "--max-steps", "6000",
                             "--out", str(tmp_path / "deep")]) == 0
    (default,) = (tmp_path / "default").glob("rock_tensor-*-16.json")
    (deep,) = (tmp_path / "deep").glob("rock_tensor-*-16-tolerance1e-05-maxsteps6000.json")
    assert json.loads(default.read_text())["image"] == {}  # the image
    report = json.loads(deep.read_text())
    assert report["settings_overrides"] == {"tolerance": 1e-5, "max_steps": 6000}
    assert "Settings changed from the defaults: tolerance 1e-05" in deep.with_suffix(
        ".md").read_text()
    (run,) = report["rows"][0]["runs"]
    (first,) = json.loads(default.read_text())["rows"][0]["runs"]
    assert run["steps"] > first["steps"]  # it ran on to the tighter tolerance


def test_another_image_of_the_same_kind_is_named_and_generated_as_asked(tmp_path):
    """``--porosity``, ``--grain``, ``--seed``: another generated image, in the report's name,
    head and porosity."""
    argv = ["--sizes", "--huge", "--huge-size", "16", "--axes", "x", "--coarse-levels", "1",
            "--backend", "numpy", "--precision", "float64", "--porosity", "0.3", "--grain",
            "6", "--seed", "7", "--out", str(tmp_path)]
    assert rock_tensor.main(argv) == 0
    (found,) = tmp_path.glob("rock_tensor-*-16-porosity0.3-grain6-seed7.json")
    report = json.loads(found.read_text())
    assert report["image"] == {"porosity": 0.3, "grain": 6.0, "seed": 7}
    assert report["rows"][0]["porosity"] == pytest.approx(0.3, abs=0.05)
    assert "porosity 0.3, grain 6.0, seed 7" in found.with_suffix(".md").read_text()


def test_start_levels_compares_variants_with_the_first(tmp_path):
    assert start_levels.parse_variant("3:10:tiled-wide") == (3, 10.0, "tiled-wide", "none")
    assert start_levels.parse_variant("3:10:auto-wide") == (3, 10.0, "auto-wide", "none")
    assert start_levels.parse_variant("3:10:compact-wide") == (3, 10.0, "compact-wide", "none")
    assert start_levels.parse_variant("3:10:velocity") == (3, 10.0, "auto", "velocity")
    assert start_levels.parse_variant("3:1:tiled:velocity+density") == (
        3, 1.0, "tiled", "velocity+density")
    assert start_levels.parse_variant("3:10:none@1.15") == (3, 10.0, "auto", "none@1.15")
    assert start_levels.rescale_settings("velocity-richardson@1.2") == {
        "start_rescale": "velocity", "start_estimate": "richardson", "start_density_gain": 1.2}
    for bad in ("3:10:dense", "3:10:velocity:velocity", "3", "3:10:none@3", "3:10:none@x"):
        with pytest.raises(Exception, match="LEVELS:FACTOR"):
            start_levels.parse_variant(bad)
    argv = ["--size", "16", "--grain", "6", "--porosity", "0.3", "--backend", "numpy",
            "--precision", "float64", "--variants", "1:10", "2:10:tiled-wide",
            "2:10:velocity-richardson", "--deep", "1e-4", "--deep-max-steps", "3000",
            "--tag=-rescale", "--out", str(tmp_path)]
    assert start_levels.main(argv) == 0
    (json_path,) = tmp_path.glob("start_levels-*-16-rescale.json")
    report = json.loads(json_path.read_text())
    first, second, rescaled = (row["runs"][0] for row in report["rows"])
    assert first["k_vs_first"] == 0.0 and abs(second["k_vs_first"]) < 1e-3
    # the rescaled start: its factor into the fine run from the two levels' k, recorded
    assert report["rows"][2]["start_rescale"] == "velocity-richardson"
    k_half, k_quarter = rescaled["start_k_voxel2"]
    richardson = 1.0 - (k_quarter / k_half - 1.0) / 4.0
    assert rescaled["start_scales"] == [pytest.approx(min(1.0, max(0.5, richardson))), 1.0]
    assert abs(rescaled["k_vs_first"]) < 1e-3
    # the deep run: the first variant to 1e-4 per 1000 steps, every k against it
    deep = report["deep"]
    assert deep["tolerance"] == 1e-4 and deep["runs"][0]["k_vs_deep"] == 0.0
    assert deep["runs"][0]["steps"] >= first["steps"]
    assert abs(first["k_vs_deep"]) < 2e-3 and first["history_vs_deep"][-1][1] == pytest.approx(
        first["k_vs_deep"])
    # k: the mean of the last check's k and the next step's, as is every check's history
    # entry (solver.rock.uncertainty)
    pair = first["k_pair"]
    assert first["history"] and first["history"][-1] == [
        pair["step"], pytest.approx((pair["k_first"] + pair["k_next"]) / 2, rel=1e-15)]
    assert first["k_voxel2"] == pytest.approx((pair["k_first"] + pair["k_next"]) / 2)
    text = json_path.with_suffix(".md").read_text()
    assert "| 2 | 10 | tiled-wide | none |" in text
    assert "| 2 | 10 | auto | velocity-richardson |" in text
    assert "Against a deep run" in text


def test_setup_only_reports_each_part_of_the_huge_set_up(tmp_path):
    """``--setup-only``: the set-up of the mirrored runs part by part without their steps; with
    ``--host-too`` the host's labels and tiles are the study's; ``--profile-start`` times the
    first axis's allocation and two chunks of steps."""
    argv = ["--sizes", "--setup-only", "--huge-size", "24", "--axes", "x", "y",
            "--host-too", "--profile-start", "--backend", "numpy", "--out", str(tmp_path)]
    assert rock_tensor.main(argv) == 0
    (json_path,) = tmp_path.glob("rock_tensor-*-24-setup.json")
    (row,) = json.loads(json_path.read_text())["rows"]
    x, y = row["axes"]["x"], row["axes"]["y"]
    assert x["host_labels_identical"] and x["host_tiles_identical"]
    assert x["second_chunk_seconds"] > 0 and "allocate_profile" in x
    assert y["tiles"] > 0 and "host_labels_seconds" not in y
    assert "host set-up only" in json_path.with_suffix(".md").read_text()


def test_huge_streaming_takes_two_copies_where_they_fit_in_the_storage_asked_for():
    """``--huge-streaming auto`` (the default): two copies where the device holds the run
    with two copies in the ``--huge-storage`` asked for, by the plan's estimate (the state,
    and beside it the plan's headroom or the start's finest level with its moments), else in
    place. At 1000³ compact (also what 'auto' takes there) fits an 80 GB H100 (85.0e9 bytes;
    the run's pool peaked at 81.5 GB under an 85.5 GB cap) and an H200, tiled fits neither
    (on an H200 it ran out of memory asking 127.6 GB beside 25.6 GB held); a 1600³ image, a
    70 GB device: in place; an explicit choice is kept; no device memory (NumPy): in place."""
    from solver.backends.numpy_backend import NumpyBackend

    class Device:
        def __init__(self, capacity):
            self.capacity = capacity

        def memory_capacity(self):
            return self.capacity

    h100, h200, small = Device(85_017_493_504), Device(150_109_880_320), Device(70 * 10**9)
    for storage in ("auto", "compact"):
        assert rock_tensor.huge_streaming(1000, h200, "auto", storage) == "two-copy"
        assert rock_tensor.huge_streaming(1000, h100, "auto", storage) == "two-copy"
        assert rock_tensor.huge_streaming(1000, small, "auto", storage) == "in-place"
        assert rock_tensor.huge_streaming(1600, h200, "auto", storage) == "in-place"
    assert rock_tensor.huge_streaming(1000, h200, "auto", "tiled") == "in-place"
    assert rock_tensor.huge_streaming(1000, h100, "auto", "tiled") == "in-place"
    assert rock_tensor.huge_streaming(400, h200, "auto", "tiled") == "two-copy"
    assert rock_tensor.huge_streaming(1000, small, "two-copy", "tiled") == "two-copy"
    assert rock_tensor.huge_streaming(1000, NumpyBackend(threads=1)) == "in-place"
    # the estimates against the 1000³ measurements (H200, acb1c4a)
    compact = rock_tensor.two_copy_bytes(1000, h200.capacity, "compact")
    assert 81.5e9 * 0.97 < compact < h100.capacity
    tiled = rock_tensor.two_copy_bytes(1000, h200.capacity, "tiled")
    assert tiled > (127.6 + 25.6) * 1e9 > h200.capacity


def test_the_counted_boxes_are_the_generated_image_as_tiled():
    """:data:`rock_tensor.MIRRORED_BOX` and ``HALF_BOX`` (porosity, eta_t) are those of a
    generated mirrored image and of it coarsened by 2, within 0.02 (an 80³ sample here;
    the constants from 160³)."""
    import numpy as np

    from geometries.preprocess import downsample
    from solver.tiling import Tiling

    solid = rock_tensor.image(80, 1e-6).solid
    box = np.concatenate([solid, solid[::-1]], axis=0)
    half = downsample(rock_tensor.VoxelGeometry(box), 2).solid
    for mask, (porosity, eta) in ((box, rock_tensor.MIRRORED_BOX), (half, rock_tensor.HALF_BOX)):
        tiling = Tiling.build(mask, 4, (0, 0, 0))
        assert abs(1.0 - mask.mean() - porosity) < 0.02
        assert abs(tiling.eta_t - eta) < 0.02, tiling.eta_t
