"""``mpirun -n N python -m solver run CASE``: the headless run on a DistributedBackend.

Every rank reads the (small) case file to learn the backend; rank 0 then runs the ordinary
``solver run`` command with a :class:`~solver.distributed.backend.DistributedBackend` in place
of the backend name, so case checks, progress, divergence checks, CSV/VTI output and
checkpoints are exactly the single-process code; the other ranks serve until it finishes.
Checkpoints are written by every rank (``checkpoint.npz``, a manifest, and the ranks' parts in
``checkpoint.parts/``, :mod:`solver.checkpoint_parts`); one written by N ranks resumes on any
number of ranks or in one process, and a single-process checkpoint resumes on N ranks.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from .launch import launch

__all__ = ["run_under_mpi"]


def run_under_mpi(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    """Exit code of ``run(args)`` executed on rank 0 with a DistributedBackend (0 elsewhere)."""
    from ..case import load_case

    try:
        inner = args.backend or load_case(args.case).config.backend
    except (ValueError, OSError) as exc:  # every rank sees the same error; no collective yet
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def on_root(backend) -> int:
        return run(argparse.Namespace(**{**vars(args), "backend": backend}))

    return launch(on_root, inner=inner, transport=getattr(args, "transport", "auto")) or 0
