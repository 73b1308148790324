"""``python -m solver run CASE --axes all --protocol both``: a case's permeability study.

Writes ``summary.json`` (k per protocol and axis in voxel², m² and mD, anisotropy, protocol
difference, pore classes per axis, convergence) and ``k_history.csv`` (step, k per run) to the
output folder, and prints one line per run with its units. Under ``mpirun`` the runs are shared
among the ranks (:func:`run_permeability_mpi`).
"""

from __future__ import annotations

import csv
import io
import logging
import sys
from pathlib import Path
from typing import Any

from ..io import atomic_write, write_json
from ..stability import DivergenceError
from .measure import PermeabilityStudy, add_formation_factors, run_study, study_runs
from .settings import PermeabilitySettings

__all__ = ["run_permeability", "run_permeability_mpi", "settings_for", "write_study"]

log = logging.getLogger(__name__)

#: 4 is the CLI's "writing the outputs failed" (solver.__main__.EXIT_OUTPUT): one meaning each.
EXIT_OK, EXIT_INVALID, EXIT_DIVERGED, EXIT_NOT_CONVERGED = 0, 2, 3, 6


def settings_for(case: Any, protocol: str | None, axes: str | None,
                 max_steps: int | None) -> PermeabilitySettings | None:
    """The case's ``permeability`` settings with CLI overrides; None when neither asks for k."""
    if case.permeability is None and protocol is None and axes is None:
        return None
    settings = case.permeability or PermeabilitySettings()
    overrides: dict[str, Any] = {}
    if protocol is not None:
        overrides["protocol"] = protocol
    if axes is not None:
        overrides["axes"] = axes
    if max_steps is not None:
        overrides["max_steps"] = max_steps
    try:
        settings.param.update(**PermeabilitySettings.from_mapping(overrides))
    except ValueError as exc:
        raise ValueError(f"permeability options: {exc} (axes: x, y, z, a comma list or all; "
                         "protocol: mirrored, pressure or both)") from exc
    return settings


def run_permeability(case: Any, settings: PermeabilitySettings, out: str | Path | None,
                     backend: Any = None) -> int:
    """Run the study of ``case``; write the outputs; return the exit code (6: not converged)."""
    from ..case import load_geometry

    try:
        geometry = load_geometry(case.geometry)
        study = run_study(geometry, case.config, settings, backend or case.config.backend)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except DivergenceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_DIVERGED
    return write_study(case, settings, study, out)


def run_permeability_mpi(case: Any, settings: PermeabilitySettings, out: str | Path | None,
                         backend: Any = None) -> int:
    """The study under ``mpirun``: one run per rank when there are as many ranks as runs (3
    for ``--axes all``), else every run split over all ranks (one sample decomposed into
    slabs, :class:`~solver.distributed.DistributedBackend`), one run after the other; rank 0
    gathers the results and writes the outputs. Every rank returns the same exit code."""
    from ..case import load_geometry
    from ..distributed import launch
    from ..distributed.comm import bind_local_gpu, world

    comm = world()
    bind_local_gpu(comm)  # each rank on its own GPU (before CUDA starts in this process)
    rank, size = comm.Get_rank(), comm.Get_size()
    inner = backend or case.config.backend
    runs, reply, geometry, per_rank = [], None, None, False
    try:
        geometry = load_geometry(case.geometry)
        runs = study_runs(geometry, settings)
        per_rank = size == len(runs)
        if per_rank:
            reply = run_study(geometry, case.config, settings, inner, runs=[runs[rank]]).results
        else:  # rank 0 drives each run, the others serve its slabs
            reply = launch(lambda distributed: run_study(geometry, case.config, settings,
                                                         distributed, runs=runs).results,
                           inner=inner)
    except DivergenceError as exc:
        reply = (EXIT_DIVERGED, f"rank {rank}: {exc}")
    except (ValueError, RuntimeError) as exc:  # answered, not raised: the others would hang
        reply = (EXIT_INVALID, f"rank {rank}: {exc}")
    replies = comm.gather(reply, root=0)  # every rank answers, failed or not: no deadlock
    code = EXIT_OK
    if rank == 0:
        failed = [r for r in replies if isinstance(r, tuple)]
        for _, message in failed:
            print(f"error: {message}", file=sys.stderr)
        if failed:
            code = failed[0][0]
        else:
            how = "one run per rank" if per_rank else "each run split over the ranks"
            log.info("permeability under MPI: %d runs on %d ranks (%s)", len(runs), size, how)
            results = [r for part in replies if part for r in part]
            split = {"ranks": size, "decomposition": how,
                     "runs_per_rank": [1] * size if per_rank else [len(runs)] * size}
            study = PermeabilityStudy(results, geometry.voxel_size)
            if settings.formation_factor:  # the conduction solves: on rank 0, after the runs
                add_formation_factors(study, geometry, settings,
                                      backend or case.config.backend)
            code = write_study(case, settings, study, out, {"mpi": split})
    return comm.bcast(code, root=0)


def write_study(case: Any, settings: PermeabilitySettings, study: PermeabilityStudy,
                out: str | Path | None, extra: dict | None = None) -> int:
    """Write ``summary.json`` and ``k_history.csv``, print the result lines; the exit code."""
    out = Path(out or case.run.output or Path("runs") / case.name)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"case": case.name, "settings": {k: v for k, v in settings.param.values().items()
                                               if k != "name"}, **study.as_dict(),
               **(extra or {})}
    write_json(out / "summary.json", summary)
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(["protocol", "axis", "step", "k_voxel2"])
    for r in study.results:
        writer.writerows([r.protocol, r.axis, s, k] for s, k in r.history)
    # Replaced, not opened for writing: a planted symlink is not followed (issue 31 item 11).
    atomic_write(out / "k_history.csv", lambda fh: fh.write(text.getvalue().encode()))
    for line in study.lines():
        print(line)
    if study.voxel_size is None:
        print("no voxel size (the case gives none, nor does the file): k in voxel² only; "
              "add geometry.voxel_size (metres, e.g. 5.345e-6) for m² and mD")
    print(f"outputs in {out}")
    if not study.converged:
        print(f"error: k did not converge within {_limits(settings)}; raise the limit"
              f"{'' if settings.accelerate else ' or use accelerate: true'}. The numbers "
              "above are not final.", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return EXIT_OK


def _limits(settings: PermeabilitySettings) -> str:
    """The limits a run stops at, as the case file names them."""
    limits = f"permeability.max_steps ({settings.max_steps})"
    if settings.max_seconds:
        limits += f" or permeability.max_seconds ({settings.max_seconds:g} s)"
    return limits
