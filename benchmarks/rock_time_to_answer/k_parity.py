"""k read at two consecutive steps after convergence: the period-2 part of the mirrored k.

A converged mirrored run's k alternates between even and odd steps (found while checking the
coarse start over MPI ranks): the whole domain's mean velocity alternates with it, so it is in
the populations, not in the readout. The protocol reads k at multiples of its (even) check
interval only, so its k carries up to half this alternation. This script measures it on
generated grain packs of growing size, reading k at steps n and n + 1 four times over the run
(mirrored, or ``--protocol pressure``: started at rest, the default ``pressure_start``, without
the coarse start). The protocol now reads k at n and n + 1 at every check and judges and
reports their means (solver.rock.uncertainty).

    python benchmarks/rock_time_to_answer/k_parity.py                 # GPU: 24³, 96³, 200³
    python benchmarks/rock_time_to_answer/k_parity.py --backend numpy --sizes 24   # CPU
    python benchmarks/rock_time_to_answer/k_parity.py --protocol pressure --sizes 200
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from geometries import VoxelGeometry  # noqa: E402
from geometries.preprocess import keep_connected  # noqa: E402
from geometries.regions import GrainRegions  # noqa: E402
from solver.backends import get_backend  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.lattice import get_lattice  # noqa: E402
from solver.rock.check import KCheck  # noqa: E402
from solver.rock.protocol import setup_protocol  # noqa: E402
from solver.rock.settings import PermeabilitySettings  # noqa: E402
from solver.simulation import Simulation  # noqa: E402

#: Pack per size: (porosity, grain diameter in voxels, steps before the last read).
PACKS = {24: (0.35, 6, 4000), 96: (0.2, 11, 12000), 200: (0.2, 21, 16000)}
OUT = Path(__file__).parent / "results"


def alternation(size: int, precision: str, backend, protocol: str = "mirrored") -> dict:
    """k at steps n and n + 1, four times over the run, for the x run of one pack."""
    porosity, grain, steps = PACKS[size]
    sample = GrainRegions((size,) * 3, porosity, grain, seed=5).slab(0, 0, size)
    kept, _ = keep_connected(VoxelGeometry(sample), 0, get_lattice("D3Q19").c)
    config = SimulationConfig(precision=precision, backend=backend.name)
    setup = setup_protocol(kept, config, 0, protocol, PermeabilitySettings())
    sim = Simulation(setup.geometry, setup.config, backend)
    check = KCheck(sim, setup.axis, setup.window, None)
    reads = []
    for _ in range(4):
        sim.step(steps // 4 - 2)
        n = sim.time_step
        k_n = check.read()[1].lattice
        sim.step(1)
        k_next = check.read()[1].lattice
        sim.step(1)
        reads.append({"n": n, "k_n": k_n, "k_n1": k_next,
                      "relative": (k_next - k_n) / (0.5 * (k_n + k_next))})
    sim.close()
    return {"size": size, "protocol": protocol, "porosity": porosity, "grain": grain,
            "precision": precision,
            "collision": setup.config.collision, "tau": setup.config.tau, "reads": reads}


def markdown(report: dict) -> str:
    """The report as one Markdown table."""
    out = [f"# k at consecutive steps, {report['protocol']} x ({report['device']}, "
           f"{report['date']}, "
           f"commit {report['commit']})", "",
           "| pack | precision | collision, tau | step n | k(n) voxel² | k(n+1) voxel² | "
           "(k(n+1) - k(n)) / mean |", "|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        for r in row["reads"]:
            out.append(f"| {row['size']}³, φ {row['porosity']}, grains {row['grain']} | "
                       f"{row['precision']} | {row['collision']}, {row['tau']} | {r['n']} | "
                       f"{r['k_n']:.7g} | {r['k_n1']:.7g} | {r['relative']:+.2e} |")
    return "\n".join(out + [""])


def main(argv: list[str] | None = None) -> int:
    """Measure every size and write JSON + Markdown under results/."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cupy", choices=("cupy", "numpy"))
    parser.add_argument("--sizes", type=int, nargs="+", default=sorted(PACKS),
                        choices=sorted(PACKS))
    parser.add_argument("--precision", default="float32", choices=("float32", "float64"))
    parser.add_argument("--protocol", default="mirrored", choices=("mirrored", "pressure"))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    backend = get_backend(args.backend)
    rows = [alternation(size, args.precision, backend, args.protocol) for size in args.sizes]
    report = {"device": backend.device_info().get("name") or args.backend,
              "protocol": args.protocol,
              "date": date.today().isoformat(), "commit": git_commit(), "rows": rows}
    device = re.sub(r"[^A-Za-z0-9]+", "-", str(report["device"])).strip("-")
    suffix = "" if args.protocol == "mirrored" else f"-{args.protocol}"
    stem = args.out / f"k_parity{suffix}-{device}-{report['date']}"
    write_json_md(stem.parent, stem.name, report, markdown(report), indent=2, default=float)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
