"""2D lid-driven cavity against Ghia, Ghia & Shin (1982), Tables I and II.

An ``n x n`` fluid box with halfway bounce-back walls half a node outside, so the cavity side is
``n`` and node ``i`` sits at ``(i + 1/2) / n``. The lid (``y_max``) is a moving wall with speed
``U``; where the lid meets the side walls the lid wins (``solver.boundaries`` rule). The
centreline profiles u(y) at x = 1/2 and v(x) at y = 1/2 are interpolated linearly (wall values
included) at Ghia's points; the check is the largest deviation in units of U.
"""

from __future__ import annotations

import csv
from functools import cache
from importlib import resources

import numpy as np

from ..config import SimulationConfig
from ..simulation import Simulation
from .core import CaseResult, Timer, register, run_steady

__all__ = ["ghia_reference", "cavity"]

_SIZES = {
    (100, "ci"): dict(n=64, u=0.1), (100, "full"): dict(n=256, u=0.05),
    (1000, "full"): dict(n=256, u=0.1),
}


@cache
def ghia_reference(re: int) -> dict[str, np.ndarray]:
    """Ghia's centreline data at ``re`` (100 or 1000): {'u_vs_y': (k, 2), 'v_vs_x': (k, 2)}."""
    column = {100: 2, 1000: 3}[re]
    text = resources.files(__package__).joinpath("data/ghia1982_cavity.csv").read_text()
    rows = [r for r in csv.reader(line for line in text.splitlines()
                                  if line and not line.startswith("#"))][1:]
    out: dict[str, list] = {}
    for row in rows:
        out.setdefault(row[0], []).append((float(row[1]), float(row[column])))
    return {k: np.array(sorted(v)) for k, v in out.items()}


def centrelines(u: np.ndarray, lid: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coordinates (n + 2,) and u(y) at x = 1/2, v(x) at y = 1/2 (n + 2,), walls included."""
    n = u.shape[1]
    mid = [n // 2 - 1, n // 2] if n % 2 == 0 else [n // 2, n // 2]
    u_col = 0.5 * (u[0][mid[0]] + u[0][mid[1]]) / lid
    v_row = 0.5 * (u[1][:, mid[0]] + u[1][:, mid[1]]) / lid
    s = np.concatenate([[0.0], (np.arange(n) + 0.5) / n, [1.0]])
    return s, np.concatenate([[0.0], u_col, [1.0]]), np.concatenate([[0.0], v_row, [0.0]])


@register("cavity_re1000_mrt", "Lid-driven cavity Re = 1000, D2Q9 MRT vs Ghia "
          "(max deviation <= 0.03 U); full size only: ~1e9 node updates, too long for CI",
          slow=True, sizes=("full",), re=1000, collision="MRT")
@register("cavity_re100_mrt", "Lid-driven cavity Re = 100, D2Q9 MRT vs Ghia "
          "(max deviation <= 0.03 U)", re=100, collision="MRT")
@register("cavity_re100_bgk", "Lid-driven cavity Re = 100, D2Q9 BGK vs Ghia "
          "(max deviation <= 0.03 U)", re=100, collision="BGK")
def cavity(size: str, backend: str, name: str, re: int, collision: str) -> list[CaseResult]:
    """Steady cavity at Reynolds number ``re`` = U n / nu."""
    n, lid = _SIZES[(re, size)]["n"], _SIZES[(re, size)]["u"]
    tau = 3.0 * lid * n / re + 0.5
    config = SimulationConfig(lattice="D2Q9", collision=collision, tau=tau,
                              precision="float64", backend=backend, x_min="wall", x_max="wall",
                              y_min="wall", y_max="moving_wall", y_max_value=(lid, 0.0))
    timer = Timer()
    sim = Simulation(np.zeros((n, n), bool), config)
    passage = int(n / lid)
    residual = run_steady(sim, passage // 2, 1e-5, 400 * passage, measure="speed")
    s, u_col, v_row = centrelines(sim.fields()["u"], lid)
    ref = ghia_reference(re)
    du = np.abs(np.interp(ref["u_vs_y"][:, 0], s, u_col) - ref["u_vs_y"][:, 1]).max()
    dv = np.abs(np.interp(ref["v_vs_x"][:, 0], s, v_row) - ref["v_vs_x"][:, 1]).max()
    common = dict(size=f"{n}x{n}", steps=sim.time_step, seconds=timer(), relative=False,
                  note=f"tau = {tau:.4f}, U = {lid}, residual {residual:.1e}")
    return [
        CaseResult(name, "max abs(u - u_Ghia) / U on x = 1/2", float(du), 0.0, 0.03, **common),
        CaseResult(name, "max abs(v - v_Ghia) / U on y = 1/2", float(dv), 0.0, 0.03, **common),
    ]
