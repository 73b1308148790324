"""benchmarks/scaling/scaling.py: the tile storage and streaming options reach each point's
configuration (compact float16 and in-place runs over ranks can be timed, issue 33)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "scaling"))

import scaling  # noqa: E402


def test_tile_storage_and_streaming_reach_the_configuration() -> None:
    args = scaling.build_parser().parse_args(
        ["strong", "--backend", "cupy", "--storage", "float16", "--tile-storage", "compact",
         "--streaming", "in-place"])
    config = scaling._config(args)
    assert (config.storage, config.tile_storage, config.streaming) == \
        ("float16", "compact", "in-place")
    defaults = scaling._config(scaling.build_parser().parse_args(["strong"]))
    assert (defaults.tile_storage, defaults.streaming) == ("auto", "two-copy")
