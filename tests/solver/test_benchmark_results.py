"""The one writer of benchmark results (:mod:`solver.benchmarking.results`): the JSON and the
markdown exactly as the scripts under ``benchmarks/`` wrote them themselves, and the head of a
record (device, date, commit) in that order."""

from __future__ import annotations

import json
from datetime import date

from solver.benchmarking.results import checkout_commit, git_commit, run_meta, write_json_md


def test_the_pair_is_written_as_json_dumps_and_the_markdown_as_given(tmp_path) -> None:
    record = {"b": [1, 2.5], "a": {"x": None}}
    out = tmp_path / "results" / "deeper"  # made on the way
    paths = write_json_md(out, "stem-2026", record, "# Table\n")
    assert paths == (out / "stem-2026.json", out / "stem-2026.md")
    assert paths[0].read_text() == json.dumps(record, indent=1)
    assert paths[1].read_text() == "# Table\n"
    write_json_md(out, "two", {"v": 1.0 + 0j}, "", indent=2, default=str, newline=True)
    assert (out / "two.json").read_text() == json.dumps({"v": "(1+0j)"}, indent=2) + "\n"


def test_the_head_of_a_record_names_device_date_and_commit_first(monkeypatch) -> None:
    monkeypatch.setenv("LBM_COMMIT", "abc1234")
    meta = run_meta("NVIDIA H200", tau=0.8)
    assert list(meta) == ["device", "date", "commit", "tau"]
    assert meta == {"device": "NVIDIA H200", "date": date.today().isoformat(),
                    "commit": "abc1234", "tau": 0.8}
    monkeypatch.delenv("LBM_COMMIT")
    assert git_commit() == checkout_commit()
    assert checkout_commit("/") == "unknown"  # no checkout there
