"""Tables of benchmarks/lbmpy/compare_lbmpy.py: ours against lbmpy, best setting of each."""

from __future__ import annotations

__all__ = ["FAIRNESS", "LBMPY_SETUP", "summary_rows", "table", "markdown"]

FAIRNESS = [
    "Same GPU, same process; same cases, precision, velocity set (D3Q19), collision (BGK/SRT, "
    "tau = 0.8, incompressible second-order equilibrium) and number of steps for both codes.",
    "CUDA events around back-to-back steps after warm-up, median of the repeats; the "
    "device-to-device copy bandwidth (1 GiB, read + write) measured in the same process.",
    "MFLUPS count fluid nodes only, for both codes. lbmpy updates its whole dense box (solid "
    "cells too); its time includes its boundary kernels (no-slip walls and solids, moving lid).",
    "Same geometry: the lid-driven cavity (all nodes fluid, walls on every face, y_max moving "
    "at (0.05, 0, 0)) and the sphere packs of geometries.generators (seed 0) closed by resting "
    "walls; halfway bounce-back in both codes.",
    "Physics check first: velocity fields of both codes on small lid-driven cases agree "
    "(relative L2 over fluid nodes) before anything is timed.",
    "Best of a few settings for each: ours XYZ layout with 1/2/4 tiles per block; lbmpy "
    "pystencils' default block size and three others, then two more code variants (int32 "
    "indices; int32 indices with cse_global) at the two fastest block sizes.",
]

LBMPY_SETUP = (
    "lbmpy: `LBMConfig(D3Q19, SRT, relaxation_rate=1/tau, compressible=False, "
    "continuous_equilibrium=False)` (the polynomial equilibrium our BGK uses; lbmpy's D3Q19 "
    "default derives it from the continuous Maxwellian), pull streaming, zero-centred storage "
    "(lbmpy's default), fixed-size `fzyx` fields with one ghost layer, CUDA through CuPy. "
    "Boundaries: the ghost layer and the solid cells are boundary cells, handled by lbmpy's "
    "generated boundary kernels (`NoSlip`: halfway bounce-back; `UBB` on the y_max ghost plane "
    "for the lid, edges included) over index lists of fluid-to-boundary links built once (with "
    "NumPy, same lists as pystencils' builder); a step is the boundary kernels, then the "
    "stream-collide kernel, then a swap, as in `LatticeBoltzmannStep`. Ours: the tiled kernel "
    "(BGK incompressible; the cavity uses the kernel variant with Ladd's moving-wall term, the "
    "packs the plain one), replayed CUDA graphs of 16 steps."
)


def _best(rows, **match) -> dict | None:
    hits = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    return min(hits, key=lambda r: r["seconds_per_step"]) if hits else None


def summary_rows(rows: list[dict]) -> list[dict]:
    """Per case and precision: the fastest setting of each code and ours / lbmpy."""
    out = []
    keys = dict.fromkeys((r["case"], r["precision"]) for r in rows)
    for case, precision in keys:
        ours = _best(rows, case=case, precision=precision, code="ours")
        lbm = _best(rows, case=case, precision=precision, code="lbmpy")
        kernel = _best(rows, case=case, precision=precision, code="lbmpy kernel only")
        if not (ours and lbm):
            continue
        out.append({
            "case": case, "precision": precision, "porosity": ours["porosity"],
            "fluid_nodes": ours["fluid_nodes"], "eta_t": ours["eta_t"],
            "ours_mflups": ours["mflups"], "ours_fraction_copy": ours["fraction_copy"],
            "ours_setting": ours["setting"],
            "lbmpy_mflups": lbm["mflups"], "lbmpy_fraction_copy": lbm["fraction_copy"],
            "lbmpy_cell_fraction_copy": lbm["cell_fraction_copy"],
            "lbmpy_setting": lbm["setting"],
            "lbmpy_kernel_only_mflups": kernel["mflups"] if kernel else None,
            "ratio": round(ours["mflups"] / lbm["mflups"], 3),
        })
    return out


def table(report: dict) -> str:
    """The summary as a markdown table (printed last by the script)."""
    lines = ["| case | precision | ours MFLUPS | of copy | lbmpy MFLUPS | of copy | "
             "lbmpy kernel only | ours / lbmpy |",
             "| --- | --- |" + " ---: |" * 6]
    for s in report["summary"]:
        kernel = s["lbmpy_kernel_only_mflups"]
        lines.append(f"| {s['case']} | {s['precision']} | {s['ours_mflups']:.0f} | "
                     f"{s['ours_fraction_copy']:.3f} | {s['lbmpy_mflups']:.0f} | "
                     f"{s['lbmpy_fraction_copy']:.3f} | "
                     f"{'' if kernel is None else f'{kernel:.0f}'} | {s['ratio']:.2f} |")
    if not report["summary"]:
        lines.append("| (no timing in this run) | | | | | | | |")
    return "\n".join(lines)


def _check_table(check: list[dict]) -> list[str]:
    lines = ["| case | precision | lbmpy variant | steps | max speed | relative L2 (u) | "
             "tolerance | passed |", "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for c in check:
        lines.append(f"| {c['case']} | {c['precision']} | {c.get('variant', '')} | "
                     f"{c['steps']} | "
                     f"{c['max_speed']:.4f} | {c['relative_l2']:.2e} | {c['tolerance']:.0e} | "
                     f"{'yes' if c['passed'] else 'NO'}"
                     f"{' (' + c['error'] + ')' if c.get('error') else ''} |")
    return lines


def _all_rows(rows: list[dict]) -> list[str]:
    lines = ["| case | precision | code | setting | MFLUPS (fluid) | of copy | cell MLUPS | "
             "cells of copy | spread |", "| --- | --- | --- | --- |" + " ---: |" * 5]
    for r in rows:
        lines.append(f"| {r['case']} | {r['precision']} | {r['code']} | {r['setting']} | "
                     f"{r['mflups']:.0f} | {r['fraction_copy']:.3f} | {r['cell_mlups']:.0f} | "
                     f"{r['cell_fraction_copy']:.3f} | {r['spread']:.3f} |")
    return lines


def markdown(report: dict) -> str:
    """The whole report: setup, fairness rules, physics check, ratios, every measurement."""
    m = report["meta"]
    copy = m.get("copy_bandwidth")
    peak = m.get("peak_bandwidth")
    bw = (f"Copy bandwidth measured in the same run: {copy / 1e9:.0f} GB/s"
          + (f" (peak {peak / 1e9:.0f} GB/s)." if peak else ".") if copy else "")
    lines = [f"# This solver against lbmpy: {m['device']}", "",
             f"Date {m['date']}, commit {m['commit']}; lbmpy {m['lbmpy']}, pystencils "
             f"{m['pystencils']}, sympy {m['sympy']}, CuPy {m.get('cupy', '-')}, NumPy "
             f"{m['numpy']}. {bw} Command: `python benchmarks/lbmpy/compare_lbmpy.py --out DIR` "
             f"({m.get('seconds', 0):.0f} s).", "", "## Fairness rules", ""]
    lines += [f"- {rule}" for rule in m["fairness"]]
    lines += ["", "## Setup", "", LBMPY_SETUP, "", "## Physics check", ""]
    lines += _check_table(report["physics_check"])
    lines += ["", "## Ours against lbmpy (best setting of each; MFLUPS over fluid nodes)", "",
              table(report), ""]
    if report["summary"]:
        lines += ["Settings: " + "; ".join(
            f"{s['case']} {s['precision']}: ours {s['ours_setting']}, lbmpy "
            f"{s['lbmpy_setting']}" for s in report["summary"]) + ".", ""]
        lines += ["## Every measurement", "",
                  "'cell MLUPS' counts the nodes each code updates (lbmpy: every cell of the "
                  "box; ours: fluid nodes); 'spread' is (max - min) / median of the repeats.",
                  ""]
        lines += _all_rows(report["results"])
    return "\n".join(lines) + "\n"
