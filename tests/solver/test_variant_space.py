"""The kernels' variant space is exactly what the execution plans launch (issue 27).

``kernels.all_variants()`` is derived from the plan's declared choices
(:mod:`solver.backends.plan`: storages, layouts, streamings, families with their modes, tile
edges, boundary code and compact kernel). Here real problems over every one of those choices,
every lattice, collision model, fluid model and boundary kind, with and without the sector
fill, the 64-bit halo sources and the compact kernels' 64-bit value offsets, are planned by
``plan_for`` and every launch of their runs (``family.launches``) is resolved by
``KernelVariant.for_problem`` as the backends do: the set of those kernels must equal the
enumeration, so no plan launches a kernel outside it and
no enumerated kernel is one no plan launches. No kernel is compiled.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from solver.backends import plan as plans
from solver.backends.cuda import kernels, tables
from solver.backends.cuda.boundary import BOUNDARY_KINDS, boundary_kind
from solver.backends.cuda.kernels import KernelVariant, all_variants
from solver.collisions import COLLISION_MODELS
from solver.config import SimulationConfig
from solver.problem import Problem
from solver.values import ConfigError

from .porous_cases import porous_solid

#: Small domains per lattice dimension (sizes not multiples of the tile edges).
SHAPES = {2: (19, 17), 3: (10, 9, 7)}


def _faces(kind: str, d: int) -> dict:
    """Face options giving boundary code ``kind``."""
    u = (0.01, 0.0, 0.0)[:d]
    if kind == "zou_he":
        return dict(x_min="velocity", x_min_value=u, x_max="pressure", x_max_value=1.0)
    if kind == "moving":
        return dict(y_min="wall", y_max="moving_wall", y_max_value=u)
    return {}


def _problems():
    """One problem per lattice, tile edge, collision, fluid model and boundary kind."""
    for lattice in ("D2Q9", "D3Q19", "D3Q27", "D3Q13"):
        d = 2 if lattice == "D2Q9" else 3
        solid = porous_solid(SHAPES[d])
        for family, edge in itertools.product(plans.FAMILIES.values(), (4, 8, 16)):
            if edge not in family.tile_edges(d):
                continue
            for model, fluid, kind in itertools.product(
                    COLLISION_MODELS.values(), ("incompressible", "quasi-compressible"),
                    BOUNDARY_KINDS):
                if lattice not in model.lattices or (kind != "none"
                                                      and not family.boundary_code):
                    continue
                config = SimulationConfig(lattice=lattice, collision=model.name,
                                          fluid_model=fluid, tile_edge=edge, tile_offset="origin",
                                          **_faces(kind, d))
                problem = Problem.from_config(solid, config)
                assert boundary_kind(problem) == kind
                yield family, problem


def _planned(problem: Problem, family: plans.KernelFamily, mp: pytest.MonkeyPatch):
    """Every kernel the runs of ``problem`` launch under every plan choice of ``family``, with
    and without the sector fill, the 64-bit halo sources and (compact) 64-bit value offsets."""
    limits = (tables.SOURCE32_LIMIT, 0)  # 0: every copy needs 64-bit halo sources
    # 1: every copy needs the compact family's 64-bit value offsets (its wide kernels)
    offsets = (None,) if family.value_limit is None else (family.value_limit, 1)
    for label, layout, streaming, offset_limit in itertools.product(
            plans.STORAGE_CHOICES, plans.LAYOUT_CHOICES, plans.STREAMING_CHOICES, offsets):
        if offset_limit != family.value_limit:
            mp.setattr(plans, "COMPACT", replace(family, value_limit=offset_limit))
        precision, _ = plans.STORAGE_CHOICES[label]
        p = replace(problem, dtype=np.dtype(precision), layout=layout, streaming=streaming,
                    storage_kind="float16" if label == "float16" else "auto",
                    tile_storage=family.name)
        p.__dict__["boundary"] = problem.boundary  # the same geometry and faces
        plan = plans.plan_for(p)
        assert (plan.family.name, plan.storage, plan.streaming) == (family.name, label,
                                                                    streaming)
        assert plan.wide == (offset_limit == 1)
        for fill_from, limit in itertools.product((0.0, 2.0), limits):
            mp.setattr(kernels, "SECTOR_FILL_MIN_MIX", fill_from)  # every mix fills / none
            mp.setattr(tables, "SOURCE32_LIMIT", limit)
            for mode, phase in plan.family.launches(streaming):
                yield KernelVariant.for_problem(p, mode, phase, plan)
        mp.undo()


@pytest.fixture(scope="module")
def launched() -> set[KernelVariant]:
    """The kernels every plan launches."""
    out: set[KernelVariant] = set()
    with pytest.MonkeyPatch.context() as mp:
        for family, problem in _problems():
            out.update(_planned(problem, family, mp))
    return out


def test_every_plan_launches_an_enumerated_kernel_and_every_one_is_launched(launched) -> None:
    enumerated = all_variants()
    assert len({v.name for v in enumerated}) == len(set(enumerated)) == len(enumerated)
    assert launched - set(enumerated) == set()  # no plan launches a kernel outside the space
    assert set(enumerated) - launched == set()  # every kernel of the space is launched
    assert len(enumerated) > 3000


def test_a_knob_that_lost_its_timing_is_refused_by_the_plan() -> None:
    """3D tiles of edge 8 lost to edge 4 on the H100: the plan refuses them, saying why."""
    config = SimulationConfig(lattice="D3Q19", tile_edge=8, tile_storage="tiled")
    problem = Problem.from_config(porous_solid(SHAPES[3]), config)
    with pytest.raises(ConfigError,
                       match=r"3D tiles of edge 4 \(this run: 3D, edge 8\).*backend='numpy'"):
        plans.plan_for(problem)
    with pytest.raises(ValueError, match="tiled storage does not support"):
        kernels.kernel_source(KernelVariant("D3Q19", "float32", tile_edge=8))
    assert all(v.tile_edge == 4 for v in all_variants() if v.lattice != "D2Q9")
