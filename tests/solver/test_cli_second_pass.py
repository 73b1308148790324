"""Issue 31 items 6-11: CLI tracebacks, hangs and unbounded reads, empty or misleading messages,
crafted checkpoints that resumed with exit 0, orphaned .vti temporaries and a followed symlink.
Every input is built here and is tiny."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from solver.__main__ import main
from solver.run import EXIT_INVALID, EXIT_OK, HeadlessRun

from .test_run_cli import channel_case

pytestmark = pytest.mark.timeout(120)

_QUICK = {"max_steps": 20, "output_interval": 10, "checkpoint_interval": 10, "vti": False}


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(["run", *argv, "--quiet"])
    return code, capsys.readouterr().err


def _refused(code: int, err: str, *words: str) -> None:
    assert code == EXIT_INVALID, err
    assert "Traceback" not in err and all(w in err for w in words), err


# --- item 6: tracebacks ----------------------------------------------------------------------


def test_a_bool_tile_edge_exits_2(tmp_path, capsys):
    case = channel_case(tmp_path, config={"tile_edge": True}, run=_QUICK)
    _refused(*_run(capsys, str(case), "--output", str(tmp_path / "o")), "tile_edge", "yes/no")


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_deeply_nested_case_files_exit_2(tmp_path, capsys, suffix):
    path = tmp_path / f"deep{suffix}"
    path.write_text("[" * 20000 + "]" * 20000)
    _refused(*_run(capsys, str(path)), "too deeply")


@pytest.mark.parametrize("argv", [["--size", "-1"], ["--size", "0"], ["--size", "3000"],
                                  ["--steps", "-5"], ["--out", __file__]])
def test_bench_arguments_are_checked_before_anything_runs(capsys, argv):
    code = main(["bench", "--backend", "numpy", "--suite", "cpu", *argv])
    err = capsys.readouterr().err
    assert code == 2 and argv[0] in err and "Traceback" not in err, err


# --- item 7: hangs and unbounded reads -------------------------------------------------------


def test_a_case_file_that_is_a_fifo_exits_2_at_once(tmp_path, capsys):
    fifo = tmp_path / "case.yaml"
    os.mkfifo(fifo)
    _refused(*_run(capsys, str(fifo)), "not a regular file")


def test_a_case_file_linked_to_dev_zero_exits_2_at_once(tmp_path, capsys):
    link = tmp_path / "case.yaml"
    link.symlink_to("/dev/zero")
    _refused(*_run(capsys, str(link)), "not a regular file")


def test_a_resume_checkpoint_that_is_a_fifo_exits_2(tmp_path, capsys):
    case = channel_case(tmp_path, run=_QUICK)
    fifo = tmp_path / "checkpoint.npz"
    os.mkfifo(fifo)
    code, err = _run(capsys, str(case), "--output", str(tmp_path / "o"), "--resume", str(fifo))
    _refused(code, err, "not a regular file")


# --- item 8: messages ------------------------------------------------------------------------


def test_memory_error_says_out_of_memory(tmp_path, capsys, monkeypatch):
    def exhausted(self, progress=True):
        raise MemoryError

    monkeypatch.setattr(HeadlessRun, "execute", exhausted)
    code, err = _run(capsys, str(channel_case(tmp_path, run=_QUICK)), "--output",
                     str(tmp_path / "o"))
    _refused(code, err, "out of memory")
    assert "error: \n" not in err


@pytest.mark.parametrize(("config", "word"), [
    ({"tau": 1.0e308}, "tau"), ({"initial_density": float("inf")}, "initial_density"),
    ({"trt_magic": float("inf")}, "trt_magic"),
    ({"body_force": [1.0e308, 0, 0]}, "body force below 0.0001"),
])
def test_absurd_numbers_are_refused_by_name(tmp_path, capsys, config, word):
    case = channel_case(tmp_path, config=config, run=_QUICK)
    code, err = _run(capsys, str(case), "--output", str(tmp_path / "o"))
    _refused(code, err, word)
    assert "nan" not in err


# --- item 9: crafted checkpoints -------------------------------------------------------------


@pytest.fixture
def written(tmp_path, capsys):
    """A finished tiny run: (case path, its checkpoint's arrays)."""
    case = channel_case(tmp_path, run=_QUICK)
    assert _run(capsys, str(case), "--output", str(tmp_path / "first"))[0] == EXIT_OK
    with np.load(tmp_path / "first" / "checkpoint.npz") as data:
        return case, {k: data[k] for k in data.files}


@pytest.mark.parametrize(("field", "value"), [
    ("populations", lambda p: p.astype(bool)), ("populations", lambda p: p.astype(np.int64)),
    ("populations", lambda p: p.astype(np.complex128)),
    ("populations", lambda p: p.astype(np.float32)),
    ("step", lambda s: np.array(-5)), ("step", lambda s: np.array(2**62)),
    ("metrics", lambda m: np.array(json.dumps([1, 2]))),
    ("metrics", lambda m: np.array(json.dumps({"steps": [1]}))),
    ("shape", lambda s: np.array([8, 13], dtype=np.int64)),
])
def test_crafted_checkpoints_are_refused(tmp_path, capsys, written, field, value):
    case, arrays = written
    arrays[field] = value(arrays[field])
    crafted = tmp_path / "crafted.npz"
    np.savez(crafted, **arrays)
    code, err = _run(capsys, str(case), "--output", str(tmp_path / "again"), "--resume",
                     str(crafted), "--max-steps", "30")
    _refused(code, err, "checkpoint")


# --- items 10 and 11: orphaned .vti temporaries, planted symlinks ----------------------------


def test_orphaned_vti_temporaries_are_removed(tmp_path, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    out = tmp_path / "o"
    out.mkdir()
    orphan = out / f".fields_000010.{dead.stdout.strip()}.tmp.vti"
    orphan.write_bytes(b"half a file")
    case = channel_case(tmp_path, run=_QUICK)
    assert _run(capsys, str(case), "--output", str(out))[0] == EXIT_OK
    assert not orphan.exists()


def test_history_csv_symlink_is_replaced_not_followed(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "o"
    out.mkdir()
    (out / "history.csv").symlink_to(victim)
    case = channel_case(tmp_path, run=_QUICK)
    assert _run(capsys, str(case), "--output", str(out))[0] == EXIT_OK
    assert victim.read_text() == "precious"
    history = out / "history.csv"
    assert not history.is_symlink() and history.read_text().startswith("step")
