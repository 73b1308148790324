"""The factor from lattice units to SI of a field a view shows, and its label."""

from __future__ import annotations

from typing import Any

from solver.flow_fields import FIELDS


def field_si(name: str, setup: Any, controller: Any) -> tuple[float, str]:
    """(factor from lattice units to SI, label) of field ``name`` with the run's tau and voxel
    size; (1, the lattice label) without a physical ``setup`` or where it cannot give units."""
    spec = FIELDS[name]
    if setup is None:
        return 1.0, spec.lattice_label()
    try:
        tau = float(controller.snapshot.config.get("tau", controller.config.tau))
        units = setup.units(tau, controller.geometry.voxel_size)
    except ValueError:
        return 1.0, spec.lattice_label()
    return spec.si_factor(units), spec.si_label()
