"""Mass balance of a pulsatile vessel over a heart cycle (issue 32, item 5).

A straight tube (:func:`solver.validation.vessels.tube_geometry`, STL voxelised, its two open
ends detected as openings) with a waveform velocity inlet (a mean and two harmonics, Womersley
profiles) and an RCR Windkessel outlet updated by the backend every 10 steps. After warm-up
cycles (the outlet's capacitor and the weakly compressible fluid settle into the periodic
state) the run steps one heart cycle a step at a time, summing the openings' exact flow rates
of every step (:meth:`solver.simulation.Simulation.opening_flow_rates`): the mass that entered
and left over the cycle. The fluid in the tube stores mass only through its density, which
returns to the same value after a whole periodic cycle, so the net over the cycle is zero up
to the periodic convergence. Checked: ``|inflow + outflow| / inflow`` over the cycle at most
0.5 %; the outlet's mean pressure over the cycle against ``(R_p + R_d) Q_mean`` (the RCR model's
steady response to the mean flow; information).

``ci``: radius 4 voxels, 4 radii long, a 200-step cycle, 4 warm-up cycles (seconds on NumPy);
``full``: radius 10, 6 radii long, an 800-step cycle, 4 warm-up cycles.
"""

from __future__ import annotations

from ..config import SimulationConfig
from ..simulation import Simulation
from ..windkessel import PRESSURE as PRESSURE_ROW
from ..windkessel import lattice_coupling
from .core import CaseResult, Timer, register

__all__ = ["run_cycle_mass", "SIZES_OF", "TOLERANCE"]

#: (radius voxels, length in radii, period steps, warm-up cycles) per size.
SIZES_OF = {"ci": (4, 4.0, 200, 4), "full": (10, 6.0, 800, 4)}
#: Largest net mass over a cycle, fraction of the inflow.
TOLERANCE = 0.005
#: Steps between the Windkessel outlet's updates.
EVERY = 10


def run_cycle_mass(size: str) -> tuple[float, float, float, int]:
    """(net / inflow over the measured cycle, mean outlet pressure over it, the RCR model's
    ``(R_p + R_d) Q_mean``, steps) of the tube of ``size`` (NumPy, lattice units)."""
    from .vessels import tube_geometry

    radius, length, period, warmup = SIZES_OF[size]
    geometry = tube_geometry(radius, 0.0, length=length)
    # Mean speed 0.01, harmonics of 40 % and 20 %; R_d C = period / 4 (lattice units).
    wave = {"period": float(period), "fourier": [0.01, [0.004, 0.0], [0.0, -0.002]]}
    area = next(o for o in geometry.openings if o.id == 1).area / geometry.voxel_size**2
    q_mean = 0.01 * area
    rd = 2e-3 / q_mean  # a density rise of about 0.006 at the outlet
    rcr = {"Rp": 0.1 * rd, "C": period / 4 / rd, "Rd": rd}
    openings = {1: {"kind": "velocity", "profile": "poiseuille", "waveform": wave},
                2: {"kind": "pressure", "value": 1.0, "windkessel": rcr}}
    sim = Simulation(geometry, SimulationConfig(
        lattice="D3Q19", collision="TRT", trt_magic=3 / 16, tau=0.8, precision="float64",
        ramp_steps=period // 2, openings=openings, backend="numpy"))
    coupling = lattice_coupling(openings, 1.0, EVERY)
    coupling.start(sim)
    sim.step(warmup * period)
    inflow = outflow = pressure = 0.0
    for _ in range(period):
        sim.step(1)
        flows = sim.opening_flow_rates()
        inflow += flows[1]
        outflow += flows[2]
        pressure += float(sim.windkessel_state()[PRESSURE_ROW, 0])
    return (abs(inflow + outflow) / inflow, pressure / period, (rcr["Rp"] + rd) * q_mean,
            sim.time_step)


@register("pulsatile_mass_balance", "Waveform inlet and RCR outlet in a tube: mass balance "
          "over a heart cycle within 0.5 %")
def pulsatile_mass_balance(size: str, backend: str, name: str) -> list[CaseResult]:
    """The tube of :data:`SIZES_OF` (NumPy whatever ``backend``: it reads every step's flows)."""
    timer = Timer()
    balance, pressure, expected, steps = run_cycle_mass(size)
    seconds = timer()
    return [CaseResult(name, "|net mass| / inflow over a cycle", balance, 0.0, TOLERANCE,
                       size, steps, seconds, relative=False,
                       note="exact per-step flux of the openings, after the warm-up cycles"),
            CaseResult(name, "mean outlet pressure / (R_p + R_d) Q_mean", pressure / expected,
                       1.0, None, size, steps, seconds,
                       note="the RCR model's steady response to the mean inflow")]
