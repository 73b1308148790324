"""Issue 16 items 8-10: every CLI failure is a documented exit code with a message saying what
to do: output paths, backends, invalid numbers, alias bombs, damaged checkpoints, orphans."""

from __future__ import annotations

import errno
import os
import random
import time
from pathlib import Path

import pytest
import yaml

from solver.__main__ import EXIT_BACKEND, EXIT_OUTPUT, main
from solver.backends import gpu_available
from solver.run import EXIT_INVALID, EXIT_OK, HeadlessRun

from .test_run_cli import channel_case

pytest.importorskip("geometries.loaders", reason="case files load geometries via geometries")

_QUICK = {"max_steps": 20, "output_interval": 10, "checkpoint_interval": 10, "vti": False}


def _run(capsys, *argv: str) -> tuple[int, str]:
    """Run the CLI in-process; return (exit code, stderr)."""
    code = main(["run", *argv, "--quiet"])
    return code, capsys.readouterr().err


def test_output_that_is_a_file_exits_2(tmp_path, capsys):
    case = channel_case(tmp_path, run=_QUICK)
    (tmp_path / "taken").write_text("x")
    code, err = _run(capsys, str(case), "--output", str(tmp_path / "taken"))
    assert code == EXIT_INVALID and "is a file" in err and "Traceback" not in err
    code, err = _run(capsys, str(case), "--output", str(tmp_path / "taken" / "sub"))
    assert code == EXIT_INVALID and "lies under the file" in err


def test_output_under_proc_exits_2(tmp_path, capsys):
    code, err = _run(capsys, str(channel_case(tmp_path, run=_QUICK)), "--output", "/proc/x/y")
    assert code == EXIT_INVALID and "system folder" in err


def test_output_with_a_nul_byte_exits_2(tmp_path, capsys):
    case = channel_case(tmp_path, run={**_QUICK, "output": "out\x00put"})
    code, err = _run(capsys, str(case))
    assert code == EXIT_INVALID and "NUL byte" in err


def test_unwritable_output_exits_2(tmp_path, capsys, monkeypatch):
    # Tests run as root here, where chmod cannot deny writing; os.access is what is asked.
    monkeypatch.setattr("solver.case.os.access", lambda path, mode: False)
    code, err = _run(capsys, str(channel_case(tmp_path, run=_QUICK)), "--output",
                     str(tmp_path / "o"))
    assert code == EXIT_INVALID and "permission denied" in err and "--output" in err


def test_write_failure_during_the_run_exits_4(tmp_path, capsys, monkeypatch):
    def full(self, progress=True):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(HeadlessRun, "execute", full)
    code, err = _run(capsys, str(channel_case(tmp_path, run=_QUICK)), "--output",
                     str(tmp_path / "o"))
    assert code == EXIT_OUTPUT and "No space left" in err and "--resume" in err


@pytest.mark.skipif(gpu_available()[0], reason="needs a machine without a usable GPU")
def test_cupy_backend_without_a_gpu_exits_5(tmp_path, capsys):
    case = channel_case(tmp_path, config={"backend": "cupy"}, run=_QUICK)
    code, err = _run(capsys, str(case), "--output", str(tmp_path / "o"))
    assert code == EXIT_BACKEND and "backend='numpy'" in err
    assert _run(capsys, str(case), "--backend", "cupy")[0] == EXIT_BACKEND


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"tau": True}, "tau must be a number"),
        ({"tau": float("inf")}, "not a finite number"),
        ({"tau": float("nan")}, "not a finite number"),
        ({"body_force": [float("nan"), 0]}, "not finite"),
        ({"body_force": [float("inf"), 0]}, "not finite"),
    ],
    ids=["tau-true", "tau-inf", "tau-nan", "force-nan", "force-inf"],
)
def test_non_numbers_are_refused_before_running(tmp_path, capsys, config, message):
    case = channel_case(tmp_path, config=config, run=_QUICK)
    code, err = _run(capsys, str(case), "--output", str(tmp_path / "o"))
    assert code == EXIT_INVALID and message in err and "diverged" not in err
    assert not (tmp_path / "o").exists()


def test_yaml_alias_bomb_is_refused_at_once(tmp_path, capsys):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\nname: *a8\ngeometry: {sample: x}\n")
    start = time.monotonic()
    code, err = _run(capsys, str(path), "--output", str(tmp_path / "o"))
    assert code == EXIT_INVALID and "aliases" in err and "line 2" in err
    assert time.monotonic() - start < 5 and not (tmp_path / "o").exists()


def test_oversized_case_file_and_name_are_refused(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text("name: x\n" + "# padding\n" * 120_000)
    code, err = _run(capsys, str(path))
    assert code == EXIT_INVALID and "larger than 1024 KiB" in err
    path = channel_case(tmp_path, run=_QUICK)
    case = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**case, "name": "n" * 1000}))
    code, err = _run(capsys, str(path))
    assert code == EXIT_INVALID and "`name` must be a short text" in err


def test_damaged_checkpoints_exit_2_never_a_traceback(tmp_path, capsys):
    case = channel_case(tmp_path, run=_QUICK)
    assert _run(capsys, str(case), "--output", str(tmp_path / "a"))[0] == EXIT_OK
    good = (tmp_path / "a" / "checkpoint.npz").read_bytes()
    rng = random.Random(16)
    damaged = [good[:n] for n in (0, 10, len(good) // 2, len(good) - 1)]
    for _ in range(12):
        flipped = bytearray(good)
        flipped[rng.randrange(len(good))] ^= 1 << rng.randrange(8)
        damaged.append(bytes(flipped))
    refused = 0
    for k, data in enumerate(damaged):
        path = tmp_path / f"bad{k}.npz"
        path.write_bytes(data)
        code, err = _run(capsys, str(case), "--resume", str(path), "--output",
                         str(tmp_path / f"r{k}"))
        assert code in (EXIT_OK, EXIT_INVALID), err  # a flip in an unused zip field is harmless
        if code == EXIT_INVALID:
            refused += 1
            assert "checkpoint" in err and "--resume" in err, err
    assert refused >= len(damaged) - 3


def test_orphaned_checkpoint_temporaries_are_removed(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    dead = out / ".checkpoint.npz.4999999.tmp"  # above Linux's pid_max: no such process
    alive = out / f".checkpoint.npz.{os.getppid()}.tmp"  # a live writer's file stays
    dead.write_bytes(bytes(1000))
    alive.write_bytes(bytes(10))
    code, _ = _run(capsys, str(channel_case(tmp_path, run=_QUICK)), "--output", str(out))
    assert code == EXIT_OK and not dead.exists() and alive.exists()
    assert (out / "checkpoint.npz").exists()
    assert [p.name for p in out.glob(".*.tmp")] == [alive.name]


def test_output_path_checks_leave_paths_of_good_runs_alone(tmp_path, capsys):
    code, _ = _run(capsys, str(channel_case(tmp_path, run=_QUICK)), "--output",
                   str(Path(tmp_path, "new", "deep")))
    assert code == EXIT_OK and (tmp_path / "new" / "deep" / "summary.json").exists()


def test_a_failed_checkpoint_write_leaves_no_temporary(tmp_path):
    from solver.io import atomic_write

    def disk_full(fh):
        fh.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(tmp_path / "checkpoint.npz", disk_full)
    assert list(tmp_path.iterdir()) == []
