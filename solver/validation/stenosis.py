"""Vessel benchmarks at the default settings (issue 28, item 7): a 75 % stenosis and a 1:3
sudden expansion at throat Reynolds numbers 100, 300 and 500, each at three resolutions.

Every run is set up as a user would: SI values only (blood, ``nu`` = 3.3e-6 m^2/s and 1060
kg/m^3; a 4 mm throat; the throat's flow rate from the Reynolds number; the voxel size from the
throat's diameter in voxels), no tau, no collision: the case goes through the CLI's own path
(:class:`solver.run.HeadlessRun`: tau from :func:`solver.lattice_parameters.choose_lattice`, the
collision from ``collision: auto``, the soft start, the steady state of
:class:`solver.monitor.FlowConvergence`). The only setting besides the SI values is that the x
faces of the box, where the openings lie, are walls (not periodic). Geometries:
:func:`geometries.generators.stenosed_pipe` (cosine stenosis of Varghese et al. 2007, 75 % area,
D = 2 d, 2 D before and 8 D after it) and :func:`geometries.generators.expanded_pipe`, a
Poiseuille velocity inlet and a pressure outlet on their two openings.

The expansion is 1:3 in AREA (diameter 1:sqrt 3, 2 d before and 30 d after the step). The issue's
nozzle (4 mm to 12 mm) is 1:3 in diameter, but there the recirculation grows to about 0.09 Re
step heights (8.7 d at Re 100, d = 6, not yet steady): over 40 d at Re 500, and the wide pipe
(9 times the throat's area) fills so slowly that its flows were still 2 % out of balance after
4.4 inlet flow-throughs at Re 100 on NumPy. Three resolutions of it at Re 500 (>= 55 d long,
>= 10 flow-throughs) do not fit the few minutes of GPU a validation run gets; 1:3 in area does
(converged after 5.9 flow-throughs at Re 100, d = 6, 12 d long, on NumPy);
``expanded_pipe(d, ratio=3)`` builds the other.

The Reynolds number is that of the voxelised throat (:func:`_setup`: its area gives the
equivalent diameter and the flow rate); the nominal disc's area differs from the voxels' by up
to 2 % with d, up or down, an error that is not monotone in d: at d = 24, 28, 32 the voxel
throat is -1.0, +0.0, +1.0 % off, which alone moves a drop ~ U_t^2 by about +2, 0, -2 %, as
much as the first GPU run's stenosis at Re 500 changed (0.510, 0.502, 0.491).

Checked per run: the steady state is reached (the run stops as converged, no divergence) and
the mass balance (net / inflow) is at most 0.5 %. Per Reynolds number: the pressure drop
``dp / (rho U_t^2)`` (U_t the throat's mean speed) between two fixed stations, 1 d after the
inlet and 2 d before the outlet (cross-section means, away from the openings' boundary layers;
the drop between the openings is reported next to it), converges with resolution
(:func:`converging`: the change between the two finer grids is smaller than between the two
coarser ones, OR all three lie within the band of :data:`BANDS`, 0.02 rho U_t^2; the observed
order of ``f(h) = f0 + C h^p`` through the three values is in the note where they are
monotone). Behind the expansion at Re 500: the centreline speed 5 and 15 throat diameters after
the step (over U_t; band 0.02 U_t) and the length of the recirculation zone (where the mean axial
speed near the wall turns positive, in throat diameters; band 2 %), converging the same way.

Resolutions (throat diameter in voxels) grow by about 1.5 per step (1.33-1.5; the first run's
24, 28, 32 were too close to tell an order) and differ per Reynolds number: tau stays at
:data:`solver.lattice_parameters.TAU_MIN` (0.505, RR) on the coarser grids, where the expected
peak is above the Mach target 0.1 (up to 0.19 at Re 500, d = 16) and reaches the target at the
finest (0.1 at Re 300, d = 18 and 24; Re 500, d = 30). A coarser grid at Re 500 fails: the
stenosis at throat Re 250 and d = 7 (the same lattice speed and viscosity as Re 500 at d = 14)
diverged at step 2500 on NumPy. The expansion at Re 500 runs on 22, 30, 40
(:data:`JET_RESOLUTIONS`): its recirculation length needs the finer grids. ``ci`` runs one
coarse stenosis at Re 100 (d = 6, a shorter tube, on NumPy); the expansion has no ci size (its
wide pipe fills slowly: minutes on NumPy).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass

import numpy as np

from .core import CaseResult, Timer, register

__all__ = ["TubeRun", "run_tube", "observed_order", "converging", "station_drop",
           "throat_area", "cost", "RESOLUTIONS", "BANDS"]

#: Blood: kinematic viscosity (m^2/s) and density (kg/m^3); throat diameter (m).
VISCOSITY, DENSITY, THROAT = 3.3e-6, 1060.0, 4e-3
#: Throat diameters (voxels) per size and Reynolds number.
RESOLUTIONS = {"ci": {100: (6,)},  # one grid: steady state and mass balance only
               "full": {100: (8, 12, 18), 300: (12, 18, 24), 500: (16, 22, 30)}}
#: The jet behind the expansion at Re 500 on a finer series: at d = 16, 22, 30 its
#: recirculation length grew 4.70, 7.54, 10.66 d (H200, tau 0.505; the step is 0.37 d high:
#: 6 voxels at d = 16), not converging, while its pressure drop and centreline speeds did.
JET_RESOLUTIONS = {"full": (22, 30, 40)}


def resolutions(size: str, kind: str, reynolds: int) -> tuple[int, ...]:
    """Throat diameters (voxels) of ``kind`` at ``reynolds`` and ``size``."""
    if kind == "expansion" and reynolds == 500 and size in JET_RESOLUTIONS:
        return JET_RESOLUTIONS[size]
    return RESOLUTIONS[size][reynolds]
#: Tube lengths (``upstream``, ``downstream``; stenosis in pipe diameters D, expansion in throat
#: diameters d) per size; ci is shorter to finish in seconds on NumPy.
LENGTHS = {"stenosis": {"ci": (1.0, 3.0), "full": (2.0, 8.0)},
           "expansion": {"ci": (1.0, 12.0), "full": (2.0, 30.0)}}
#: Flow-throughs (lattice_parameters' estimate: the box's length at the inlet's mean speed)
#: after which a run that is not yet steady stops. The expansion's wide pipe carries the flow
#: at a third of the inlet's speed and its recirculation settles slowly: more of them.
FLOW_THROUGHS = {"stenosis": {"ci": 3.0, "full": 6.0},
                 "expansion": {"ci": 10.0, "full": 10.0}}
#: Diameter ratio of the expansion: area 1:3 (module text says why not diameter 1:3).
EXPANSION_RATIO = math.sqrt(3.0)
#: Where the jet's centreline speed is read: throat diameters behind the step.
STATIONS = (5.0, 15.0)
#: Mass balance limit (net / inflow).
BALANCE = 0.005
#: Where the checked pressure drop is read, in throat diameters: this far after the inlet and
#: before the outlet (cross-section means), away from the openings' boundary layers.
PRESSURE_STATIONS = (1.0, 2.0)
#: Grid-independence band of each converging quantity: (band, relative). A quantity converges
#: when its change shrinks with resolution (change ratio < 1) OR when all three values lie
#: within the band (max - min <= band; of the largest magnitude where relative): changes below
#: the band are not resolved by three grids at the tau floor (the O(Ma^2) compressibility
#: error, ~1-4 % at Mach 0.1-0.2, moves with the resolution there). Pressure drops in units of
#: rho U_t^2 and speeds of U_t (absolute: the expansion's drop nears zero), the recirculation
#: length relative.
BANDS = {"pressure drop": (0.02, False), "centreline": (0.02, False),
         "recirculation": (0.02, True)}


@dataclass(frozen=True)
class TubeRun:
    """One benchmark run: how it ended and what it measured (dimensionless)."""

    status: str
    message: str
    steps: int
    tau: float
    collision: str
    mach: float
    balance: float
    drop: float            # dp / (rho U_t^2), inlet minus outlet opening
    station_drop: float    # dp / (rho U_t^2) between the fixed stations (PRESSURE_STATIONS)
    centreline: tuple[float, float]  # u_axis / U_t at STATIONS d after the step
    reattachment: float    # recirculation length / d behind the step (NaN: none found)
    seconds: float


def _geometry(kind: str, d: int, size: str) -> dict:
    up, down = LENGTHS[kind][size]
    target = "stenosed_pipe" if kind == "stenosis" else "expanded_pipe"
    parameters = {"throat_diameter": d, "upstream": up, "downstream": down}
    if kind == "expansion":
        parameters["ratio"] = EXPANSION_RATIO
    return {"generator": target, "voxel_size": THROAT / d, "parameters": parameters}


def throat_area(solid: np.ndarray) -> int:
    """Fluid voxels of the narrowest x slice of a tube along x (True = solid)."""
    return int(np.min(np.count_nonzero(~np.asarray(solid, dtype=bool), axis=(1, 2))))


def _setup(kind: str, reynolds: float, d: int, size: str, backend: str):
    """Throat speed (m/s), geometry, inlet and outlet openings and the parsed case of a run.

    The Reynolds number is that of the VOXELISED throat: its area A_t (voxels) gives the
    equivalent diameter d_e = sqrt(4 A_t / pi) and the flow rate Q = Re nu pi d_e / 4, so that
    U_t = Q / A_t = Re nu / d_e. The voxel disc of nominal diameter d differs from pi d^2 / 4 by
    up to 2 % at d = 10-32, up or down with d (24: -1.0 %, 28: +0.0 %, 32: +1.0 %); with
    the nominal area that error, O(1/d) but not monotone, entered every result (estimated:
    about -4 % on a drop ~ U_t^2 from d = 24 to 32, the size of the stenosis drop's change at
    Re 500 in the first GPU run, -3.8 %).
    """
    from ..case import load_geometry, parse_case

    geometry = load_geometry(parse_case({"geometry": _geometry(kind, d, size)}).geometry)
    area = throat_area(geometry.solid) * (THROAT / d) ** 2  # m^2
    d_e = math.sqrt(4.0 * area / math.pi)
    speed = reynolds * VISCOSITY / d_e  # throat mean speed, m/s
    inlet = next(o for o in geometry.openings if o.normal[0] < 0)
    outlet = next(o for o in geometry.openings if o.normal[0] > 0)
    data = {
        "name": f"{kind}-re{reynolds:g}-d{d}",
        "geometry": _geometry(kind, d, size),
        # the openings lie on the x faces: those must be walls (not periodic), as for any
        # voxel image with face openings; nothing else is set (no tau, no collision)
        "config": {"backend": backend, "x_min": "wall", "x_max": "wall"},
        "run": {"viscosity": VISCOSITY, "density": DENSITY, "vti": False,
                "checkpoint_interval": 0, "check_interval": 500, "output_interval": 10**9},
        "openings": [{"id": inlet.id, "kind": "velocity", "profile": "poiseuille",
                      "flow_rate": speed * area},
                     {"id": outlet.id, "kind": "pressure", "pressure": 0.0}],
    }
    return speed, geometry, inlet, outlet, parse_case(data)


def cost(size: str = "full", backend: str = "cupy") -> list[dict]:
    """Per run of ``size``: tau, expected Mach, steps per flow-through, the step limit, fluid
    nodes and fluid-node updates at that limit (what the lattice parameters report)."""
    from ..vessel_setup import case_lattice

    rows = []
    for kind in ("stenosis", "expansion"):
        for reynolds in RESOLUTIONS[size]:
            for d in resolutions(size, kind, reynolds):
                _, geometry, _, _, case = _setup(kind, reynolds, d, size, backend)
                choice = case_lattice(case, geometry, backend)
                limit = max(1000, int(FLOW_THROUGHS[kind][size]
                                      * choice.steps_per_flow_through))
                rows.append({"case": f"{kind}_re{reynolds}", "d": d, "tau": choice.tau,
                             "mach": choice.mach, "steps_per_flow_through":
                             choice.steps_per_flow_through, "max_steps": limit,
                             "fluid_nodes": geometry.n_fluid,
                             "updates": limit * geometry.n_fluid})
    return rows


def run_tube(kind: str, reynolds: float, d: int, size: str = "ci",
             backend: str = "numpy") -> TubeRun:
    """Run ``kind`` ('stenosis' or 'expansion') at throat Reynolds number ``reynolds`` with a
    throat of ``d`` voxels, default settings, to its steady state or its step limit."""
    from ..io import read_checkpoint, restore
    from ..run import HeadlessRun
    from ..vessel import mass_balance

    timer = Timer()
    speed, geometry, inlet, outlet, case = _setup(kind, reynolds, d, size, backend)
    with tempfile.TemporaryDirectory() as out:
        run = HeadlessRun(case, out=out, geometry=geometry)
        choice = run.lattice_choice
        run.controls.max_steps = max(1000, int(FLOW_THROUGHS[kind][size]
                                               * choice.steps_per_flow_through))
        # The steady state is judged over the monitor's window from the flow (5 % of a
        # flow-through here, solver.monitor.steady_window), as for any run.
        outcome = run.execute(progress=False)
        sim = run.sim
        if outcome.status == "diverged":
            return TubeRun(outcome.status, outcome.message, sim.time_step, sim.config.tau,
                           sim.problem.collision.name, choice.mach, math.nan, math.nan,
                           math.nan, (math.nan, math.nan), math.nan, timer())
        # the run closed its state; its final checkpoint holds the steady flow
        restore(sim, read_checkpoint(run.checkpoint_path))
    flows = {f.id: f for f in sim.opening_flows()}
    u_t = run.units.velocity_to_lattice(speed)
    drho = flows[inlet.id].mean_density - flows[outlet.id].mean_density
    balance = mass_balance(tuple(flows.values()))
    fields = sim.fields()
    centreline, reattachment = (math.nan, math.nan), math.nan
    if kind == "expansion":
        step = int(round(LENGTHS[kind][size][0] * d))
        centreline, reattachment = _jet(fields["u"][0], step, d, u_t)
    sim.close()
    return TubeRun(outcome.status, outcome.message, sim.time_step, sim.config.tau,
                   sim.problem.collision.name, choice.mach,
                   math.nan if balance is None else abs(balance),
                   drho / 3.0 / u_t**2, station_drop(fields["rho"], d) / 3.0 / u_t**2,
                   centreline, reattachment, timer())


def station_drop(rho: np.ndarray, d: int) -> float:
    """Density difference (lattice) between the cross-section means PRESSURE_STATIONS[0] d
    after the inlet and PRESSURE_STATIONS[1] d before the outlet (x slice centres at i + 1/2,
    linear in between; NaN in solids)."""
    line = np.nanmean(rho.reshape(rho.shape[0], -1), axis=1)
    nx = rho.shape[0]
    x = np.arange(nx) + 0.5
    first = PRESSURE_STATIONS[0] * d
    last = nx - PRESSURE_STATIONS[1] * d
    return float(np.interp(first, x, line) - np.interp(last, x, line))


def _jet(ux: np.ndarray, step: int, d: int, u_t: float) -> tuple[tuple[float, float], float]:
    """Centreline speed / U_t at STATIONS d after the step (x index ``step``), and the
    recirculation length / d: the first slice after the step where the mean axial speed
    between 0.9 and 1 of the wide pipe's radius turns from negative to positive."""
    nx, ny, nz = ux.shape
    c = np.arange(ny) + 0.5 - ny / 2.0
    r = np.hypot(c[:, None], c[None, :])
    axis = r <= r.min() + 1e-9  # the one to four nodes nearest the axis
    wide = 0.5 * EXPANSION_RATIO * d
    ring = (r >= 0.9 * wide) & (r <= wide)  # the fluid next to the wide pipe's wall
    line = np.nanmean(ux[:, axis], axis=1) / u_t
    behind = np.nanmean(ux[step:, ring], axis=1)  # the ring is solid before the step

    def at(k: float) -> float:
        x = step + k * d
        return float(np.interp(x - 0.5, np.arange(nx), line)) if x < nx - 1 else math.nan

    back = np.flatnonzero(behind < 0)
    length = math.nan
    if back.size:
        after = np.flatnonzero(behind[back[0]:] >= 0)
        if after.size:  # the zero crossing between slice centres, from the step's face
            i = back[0] + after[0]
            w0, w1 = behind[i - 1], behind[i]
            length = (i - 0.5 + w0 / (w0 - w1)) / d
    return (at(STATIONS[0]), at(STATIONS[1])), length


def observed_order(h: tuple[float, ...], f: tuple[float, ...]) -> float:
    """Order p of ``f = f0 + C h^p`` through three (h, f), by bisection on p in (0.05, 8);
    NaN where the three values do not converge monotonically."""
    (h1, h2, h3), (f1, f2, f3) = h, f
    target = (f1 - f2) / (f2 - f3) if f2 != f3 else math.inf
    if not (math.isfinite(target) and target > 0):
        return math.nan

    def g(p: float) -> float:
        return (h1**p - h2**p) / (h2**p - h3**p) - target

    lo, hi = 0.05, 8.0
    if g(lo) * g(hi) > 0:
        return math.nan
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if g(lo) * g(mid) > 0 else (lo, mid)
    return 0.5 * (lo + hi)


def converging(values: tuple[float, float, float], band: float,
               relative: bool = False) -> tuple[float, float]:
    """(change ratio |f3 - f2| / |f2 - f1|, spread (max - min) / band) of three values on
    grids of increasing resolution; the values converge when either is below 1 (BANDS)."""
    f1, f2, f3 = values
    ratio = abs(f3 - f2) / abs(f2 - f1) if f2 != f1 else (0.0 if f3 == f2 else math.inf)
    scale = max(abs(v) for v in values) if relative else 1.0
    spread = (max(values) - min(values)) / (band * scale) if scale > 0 else math.inf
    if not all(math.isfinite(v) for v in values):
        return math.nan, math.nan
    return ratio, spread


def _converging(name: str, what: str, size: str, ds: tuple[int, ...], values: list[float],
                band: tuple[float, bool], checked: bool = True) -> list[CaseResult]:
    """The convergence row of ``values``: min(change ratio, spread / band) below 1 passes;
    both, the values and the observed order in the note."""
    if len(values) < 3:
        return []
    ratio, spread = converging(tuple(values), *band)
    p = observed_order(tuple(1.0 / d for d in ds), tuple(values))
    text = ", ".join(f"{v:.4g}" for v in values)
    width = f"{band[0]:.0%} of the largest" if band[1] else f"{band[0]:g}"
    measured = min(ratio, spread) if math.isfinite(ratio) or math.isfinite(spread) else math.nan
    return [CaseResult(name, f"{what}: converging (change ratio, or spread / band)",
                       measured, 0.0, 1.0 if checked else None, size, 0, 0.0, relative=False,
                       note=f"values {text} at d = {ds}; change ratio d = {ds[2]}/{ds[1]} vs "
                            f"{ds[1]}/{ds[0]}: {ratio:.3g}; spread {spread * band[0]:.3g} "
                            f"(band {width}); observed order {p:.2g}")]


def tube_case(size: str, backend: str, name: str, kind: str, reynolds: int) -> list[CaseResult]:
    """The rows of ``kind`` at ``reynolds``: per resolution steady + balance, then convergence."""
    out: list[CaseResult] = []
    ds = resolutions(size, kind, reynolds)
    drops, openings, lines5, lines15, lengths = [], [], [], [], []
    for d in ds:
        r = run_tube(kind, reynolds, d, size, backend)
        note = (f"{r.status}; tau {r.tau:.4g}, {r.collision}, expected Mach {r.mach:.2g}, "
                f"{r.steps} steps" + ("" if r.status == "converged" else f": {r.message}"))
        out.append(CaseResult(name, f"steady state reached, d = {d}",
                              float(r.status == "converged"), 1.0, 0.0, f"d{d}", r.steps,
                              r.seconds, relative=False, note=note))
        out.append(CaseResult(name, f"mass balance (net / inflow), d = {d}", r.balance, 0.0,
                              BALANCE, f"d{d}", r.steps, r.seconds, relative=False))
        out.append(CaseResult(
            name, f"pressure drop dp/(rho U_t^2) between stations, d = {d}", r.station_drop,
            r.station_drop, None, f"d{d}", r.steps, r.seconds,
            note=f"{PRESSURE_STATIONS[0]:g} d after the inlet to {PRESSURE_STATIONS[1]:g} d "
                 f"before the outlet; between the openings {r.drop:.4g}"))
        drops.append(r.station_drop)
        openings.append(r.drop)
        if kind == "expansion" and reynolds == 500:
            lines5.append(r.centreline[0])
            lines15.append(r.centreline[1])
            lengths.append(r.reattachment)
            out.append(CaseResult(
                name, f"jet: recirculation length / d (u_axis/U_t in note), d = {d}",
                r.reattachment, r.reattachment, None, f"d{d}", r.steps, r.seconds,
                note=f"u_axis/U_t {r.centreline[0]:.4g} at {STATIONS[0]:g} d, "
                     f"{r.centreline[1]:.4g} at {STATIONS[1]:g} d"))
    out += _converging(name, "pressure drop between stations", size, ds, drops,
                       BANDS["pressure drop"])
    out += _converging(name, "pressure drop between the openings (information)", size, ds,
                       openings, BANDS["pressure drop"], checked=False)
    if lengths:
        for station, line in zip(STATIONS, (lines5, lines15), strict=True):
            out += _converging(name, f"jet centreline u/U_t at {station:g} d", size, ds, line,
                               BANDS["centreline"])
        out += _converging(name, "recirculation length / d", size, ds, lengths,
                           BANDS["recirculation"])
    return out


for _kind, _what in (("stenosis", "75 % cosine stenosis (D = 2 d)"),
                     ("expansion", "1:3 sudden expansion (area; diameter 1:1.73)")):
    for _re in (100, 300, 500):
        register(f"{_kind}_re{_re}",
                 f"{_what} at throat Re {_re}, default settings (SI only): steady state, mass "
                 "balance <= 0.5 %, pressure drop converging with resolution"
                 + ("; the jet's centreline decay and recirculation length converging"
                    if _kind == "expansion" and _re == 500 else ""),
                 slow=_re != 100,
                 sizes=("ci", "full") if (_kind, _re) == ("stenosis", 100) else ("full",),
                 kind=_kind, reynolds=_re)(tube_case)
