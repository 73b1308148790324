"""``python -m solver run`` with a permeability study; the example cases report SI units."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from solver.__main__ import EXIT_OUTPUT, main
from solver.case import load_case, load_geometry
from solver.distributed.comm import find_mpirun

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CASE = """
name: slab
geometry:
  generator: random_sphere_pack
  parameters: {shape: [14, 14, 14], porosity: 0.4, diameter: 7, seed: 4}
  voxel_size: 1.0e-5
config: {precision: float64}
permeability: {protocol: mirrored, axes: x, check_interval: 100}
"""


def test_cli_runs_the_tensor_and_writes_units(tmp_path, capsys):
    path = tmp_path / "slab.yaml"
    path.write_text(CASE)
    code = main(["run", str(path), "--axes", "all", "--output", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["converged"] and summary["units"]["k_m2"] == "m^2"
    k = summary["tensor_mD"]["mirrored"]
    assert set(k) == {"x", "y", "z"} and all(v > 0 for v in k.values())
    ratio = summary["anisotropy_max_over_min"]["mirrored"]
    assert ratio == pytest.approx(max(k.values()) / min(k.values()))
    assert summary["runs"][0]["pores"]["percolating_fraction"] > 0.9
    assert "voxel²" in printed and " mD" in printed and "anisotropy" in printed
    assert (tmp_path / "out" / "k_history.csv").read_text().startswith("protocol,axis,step")


def test_cli_refuses_bad_axes_and_unconverged_runs_exit_6(tmp_path, capsys):
    # Issue 31 item 14: 4 means "writing the outputs failed"; not converged has its own code.
    path = tmp_path / "slab.yaml"
    path.write_text(CASE)
    assert main(["run", str(path), "--axes", "w", "--output", str(tmp_path / "a")]) == 2
    assert "axes" in capsys.readouterr().err
    code = main(["run", str(path), "--max-steps", "100", "--output", str(tmp_path / "b")])
    assert code == 6 != EXIT_OUTPUT
    err = capsys.readouterr().err
    assert "did not converge" in err
    # accelerate is already on (the default): the advice is the limit that stopped the run
    assert "accelerate: true" not in err and "max_steps (100)" in err


def test_cli_without_voxel_size_says_how_to_get_si_units(tmp_path, capsys):
    path = tmp_path / "novox.yaml"
    path.write_text(CASE.replace("  voxel_size: 1.0e-5\n", ""))
    main(["run", str(path), "--max-steps", "20", "--output", str(tmp_path / "o"), "--quiet"])
    printed = capsys.readouterr().out
    assert "voxel²" in printed and "add geometry.voxel_size (metres" in printed


def test_axes_all_of_a_2d_image_are_its_two_axes():
    """`axes: all` on a 2D image was refused: "['x', 'y', 'z'] must name axes of a 2D"."""
    from solver.rock import PermeabilitySettings

    settings = PermeabilitySettings(**PermeabilitySettings.from_mapping({"axes": "all"}))
    assert settings.axis_indices(2) == [0, 1] and settings.axis_indices(3) == [0, 1, 2]
    with pytest.raises(ValueError, match="must name axes of a 2D sample"):
        PermeabilitySettings(axes=["z"]).axis_indices(2)



def test_a_2d_image_with_the_default_3d_lattice_is_refused_with_the_fix(tmp_path, capsys):
    """It failed inside the pore check: "connectivity needs a velocity set of shape (q, 2)"."""
    solid = np.zeros((12, 8), np.uint8)
    solid[:, 0] = solid[:, -1] = 1
    np.save(tmp_path / "slit.npy", solid)
    path = tmp_path / "slit.yaml"
    path.write_text("geometry: {file: slit.npy, voxel_size: 1.0e-6}\npermeability: {axes: all}\n")
    assert main(["run", str(path), "--output", str(tmp_path / "o"), "--quiet"]) == 2
    assert "D3Q19 is 3D but the geometry is 2D; choose D2Q9" in capsys.readouterr().err


def test_case_permeability_section_is_validated(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(CASE.replace("protocol: mirrored", "protocol: darcy"))
    with pytest.raises(ValueError, match="permeability.protocol.*mirrored"):
        load_case(path)


def test_examples_state_the_voxel_size():
    pack = load_case(EXAMPLES / "sphere_pack_48.yaml")
    assert load_geometry(pack.geometry).voxel_size == 1e-5  # so k comes out in m² and mD
    rock = load_case(EXAMPLES / "rock_sandstone.yaml")
    assert rock.permeability.axes == ["x", "y", "z"] and rock.permeability.protocol == "both"


def test_sphere_pack_example_summary_has_k_in_si(tmp_path):
    out = tmp_path / "pack"
    code = main(["run", str(EXAMPLES / "sphere_pack_48.yaml"), "--max-steps", "40", "--quiet",
                 "--backend", "numpy", "--output", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["voxel_size_m"] == 1e-5
    assert summary["permeability_m2"] == pytest.approx(summary["permeability"] * 1e-10)
    assert summary["permeability_mD"] == pytest.approx(
        summary["permeability_m2"] / 9.869233e-13 * 1e3)


@pytest.mark.skipif(find_mpirun() is None, reason="no mpirun next to the Python or on PATH")
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
@pytest.mark.parametrize("ranks,per_rank", [(3, [1, 1, 1]), (2, [3, 3])])
def test_tensor_under_mpirun_one_axis_per_rank_or_each_split_over_ranks(tmp_path, ranks,
                                                                        per_rank):
    """``mpirun -n 3 ... --axes all`` runs x, y, z one per rank; other counts split each run's
    sample over all ranks (slabs); either way the tensor equals the one-process run: bit for
    bit one run per rank, to rel 1e-12 split over ranks (its k checks are reduced on the ranks,
    sums added in rank order: measured 7e-15 on the health and check numbers)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("mpi4py")
    path = tmp_path / "slab.yaml"
    path.write_text(CASE)
    assert main(["run", str(path), "--axes", "all", "--output", str(tmp_path / "one")]) == 0
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent), OMP_NUM_THREADS="1")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [find_mpirun(), "-n", str(ranks), sys.executable, "-m", "solver", "run", str(path),
           "--axes", "all", "--output", str(tmp_path / "mpi")]
    done = subprocess.run(cmd, cwd=EXAMPLES.parent, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    mpi = json.loads((tmp_path / "mpi" / "summary.json").read_text())
    one = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert mpi["mpi"]["ranks"] == ranks and mpi["mpi"]["runs_per_rank"] == per_rank
    assert mpi["mpi"]["decomposition"].startswith("one run" if ranks == 3 else "each run")
    if ranks == 3:
        assert mpi["tensor_mD"] == one["tensor_mD"]
    else:
        assert mpi["tensor_mD"].keys() == one["tensor_mD"].keys()
        for protocol, k in one["tensor_mD"].items():
            assert mpi["tensor_mD"][protocol] == pytest.approx(k, rel=1e-12, abs=0), protocol
    assert mpi["converged"]
    assert [r["axis"] for r in mpi["runs"]] == ["x", "y", "z"]


@pytest.mark.skipif(find_mpirun() is None, reason="no mpirun next to the Python or on PATH")
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
def test_a_rank_that_fails_under_mpirun_is_reported_and_no_rank_hangs(tmp_path):
    """z has no connected path: its rank fails, rank 0 says so, every rank exits 2."""
    import os
    import subprocess
    import sys

    import numpy as np

    from geometries import VoxelGeometry

    pytest.importorskip("mpi4py")
    solid = np.ones((8, 8, 8), bool)
    solid[:, :, 2:6] = False  # an open slab: flow along x and y only
    VoxelGeometry(solid, voxel_size=1e-6).save(tmp_path / "slab.npz")
    path = tmp_path / "slab.yaml"
    path.write_text(f"name: slab\ngeometry: {{file: {tmp_path / 'slab.npz'}}}\n"
                    "config: {precision: float64}\n"
                    "permeability: {axes: all, check_interval: 100, sides: periodic}\n")
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent), OMP_NUM_THREADS="1")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run([find_mpirun(), "-n", "3", sys.executable, "-m", "solver", "run",
                           str(path), "--output", str(tmp_path / "out")],
                          cwd=EXAMPLES.parent, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "rank 2: No connected pore path joins the two faces along z" in done.stderr
    assert not (tmp_path / "out" / "summary.json").exists()
