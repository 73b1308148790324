"""Validation plumbing: reference data, result rows, the report and the CLI."""

import numpy as np
import pytest

from solver.__main__ import build_parser, main
from solver.validation import CASES, CaseResult, run_case, write_report
from solver.validation.cavity import ghia_reference
from solver.validation.objects import sphere_drag_reference, strouhal
from solver.validation.porous import zick_homsy_k
from solver.validation.shapes import equivalent_diameter, sphere_cell


def test_reference_tables_are_packaged():
    ref = ghia_reference(100)
    assert ref["u_vs_y"].shape == (17, 2) and ref["v_vs_x"].shape == (17, 2)
    assert ref["u_vs_y"][-1].tolist() == [1.0, 1.0]
    assert ghia_reference(1000)["u_vs_y"][0].tolist() == [0.0, 0.0]
    # At a tabulated fraction the spline returns the table: k = L^3 / (6 pi a K).
    a = 32 * (3 * 0.216 / (4 * np.pi)) ** (1 / 3)
    assert zick_homsy_k(32, 0.216) == pytest.approx(32**3 / (6 * np.pi * a * 7.442))


def test_sphere_in_pipe_reference_is_the_papers_value():
    assert sphere_drag_reference(1.0, 0.5) == pytest.approx(144.48, abs=0.02)


def test_shapes_hit_their_targets():
    cell = sphere_cell(32, 0.216)
    assert cell.mean() == pytest.approx(0.216, abs=2e-3)
    assert equivalent_diameter(int(np.pi * 100), 2) == pytest.approx(20.0, abs=0.01)


def test_strouhal_from_a_sine():
    steps = np.arange(4000)
    lift = np.sin(2 * np.pi * steps / 250.0 + 0.3)
    assert strouhal(lift, 2, 10.0, 0.1) == pytest.approx(10.0 / (500 * 0.1), rel=1e-3)


def test_result_rows_and_report(tmp_path):
    rows = [CaseResult("a", "k |x|", 1.02, 1.0, 0.03, "8^3", 10, 0.1),
            CaseResult("b", "dev", 0.05, 0.0, 0.03, "8x8", 10, 0.1, relative=False),
            CaseResult("c", "info", 2.0, 1.0, None, "8x8", 10, 0.1)]
    assert rows[0].passed and rows[0].error == pytest.approx(0.02)
    assert not rows[1].passed and rows[2].passed and not rows[2].checked
    path = write_report(rows, "Test CPU (2 cores)", tmp_path, "ci", "numpy")
    assert path.name.startswith("validation-test-cpu-2-cores-")
    text = path.read_text()
    assert "Passed 1 of 2 checks" in text and "| FAIL |" in text and "| info |" in text
    assert "k \\|x\\|" in text  # pipes escaped inside cells


def test_unknown_case_and_size_are_refused():
    with pytest.raises(ValueError, match="choose from"):
        run_case("nope")
    with pytest.raises(ValueError, match="size"):
        run_case(next(iter(CASES)), "huge")


def test_validate_command(tmp_path, capsys):
    args = build_parser().parse_args(["validate", "--size", "ci", "--backend", "numpy",
                                      "--case", "channel_2d", "--out", str(tmp_path)])
    assert args.case == ["channel_2d"] and args.size == "ci"
    assert main(["validate", "--case", "missing"]) == 2
    assert "unknown case" in capsys.readouterr().err
