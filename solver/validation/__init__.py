"""Validation suite: published and analytic flows the solver must reproduce.

Cases (registered in :data:`CASES`, run by the tests in ``tests/solver/validation`` and by
``python -m solver validate``):

- ``channel_2d``, ``duct_3d``: Zou-He pressure/velocity faces vs Poiseuille and duct series.
- ``cavity_re100_bgk``, ``cavity_re100_mrt``, ``cavity_re1000_mrt``: lid-driven cavity vs Ghia.
- ``sc_array``, ``sc_tau``: simple-cubic sphere arrays vs Zick & Homsy; TRT vs BGK in tau.
- ``sphere_pipe_re1`` (D3Q19), ``sphere_pipe_re1_d3q13``: sphere moving in a pipe, drag vs
  Schiller-Naumann + Haberman-Sayre (Tolke & Krafczyk 2008, section 6).
- ``cylinder_re100``: vortex shedding, Strouhal number.
- ``tube_openings``: STL tube at 0/30/45 deg with a velocity inlet and a pressure outlet on its
  openings vs Hagen-Poiseuille; mass balance of the bifurcation sample.
- ``stenosis_re100/300/500``, ``expansion_re100/300/500``: a 75 % stenosis and a 1:3 sudden
  expansion at default settings (SI only), three resolutions: steady state, mass balance,
  pressure drop converging; the jet behind the expansion at Re 500.
- ``womersley_alpha4``, ``womersley_alpha10``: a periodic tube driven by an oscillating body
  force vs Womersley's profile over the cycle, converging with the radius.
- ``pulsatile_mass_balance``: waveform inlet and RCR outlet in a tube, mass over a cycle.
"""

from __future__ import annotations

from . import (  # noqa: F401  (registers the cases)
    cavity,
    channels,
    cycle_mass,
    objects,
    porous,
    stenosis,
    vessels,
    womersley,
)
from .core import CASES, SIZES, Case, CaseResult, run_case
from .report import run_all, write_report

__all__ = ["CASES", "SIZES", "Case", "CaseResult", "run_case", "run_all", "write_report"]
