"""The tiled kernel family: its spec, built from parts, and the generator that renders it.

A :class:`TiledSpec` is one kernel of the tiled storage (every node of a tile) composed of the
parts of :mod:`.kernel_parts`: the launch's mode, the collision (or the propagation probe's
plain stores), the storage, the streaming and the boundary code, plus the in-tile layout, the
tile edge, the sector fill (:mod:`.sector_fill`) and the width of halo sources.
:func:`render_tiled` fills ``templates/tiled_lbm.cu`` with straight-line code for the spec's
velocity set: every fragment comes from the part that owns it (where a value is read or
written is the streaming's, how it is decoded or encoded the storage's, what happens between
the collision's, the face closures and Ladd's term the boundary's), so every part works with
every other. :mod:`.kernels` builds the spec from a ``KernelVariant``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from string import Template

import numpy as np

from ...lattice import Lattice
from .kernel_parts import BoundaryPart, CollisionPart, Mode, StoragePart, StreamingPart
from .sector_fill import fills_sectors, solid_exit
from .streaming import swap_code
from .tables import c_literal, direction_layouts, halo_masks

__all__ = ["TiledSpec", "render_tiled"]

_TEMPLATE = Path(__file__).with_name("templates") / "tiled_lbm.cu"


@dataclass(frozen=True)
class TiledSpec:
    """One tiled kernel, composed of parts. ``variant`` is the canonical
    :class:`~solver.backends.cuda.kernels.KernelVariant` it was built from (its sector fill and
    layout are read by :mod:`.sector_fill`); ``form`` what float16 arithmetic works on."""

    name: str
    lattice: Lattice
    layout: str
    tile_edge: int
    mode: Mode
    collision: CollisionPart  # the probes' and 'swap''s: no model (plain stores or none)
    storage: StoragePart
    streaming: StreamingPart
    boundary: BoundaryPart
    form: str
    wide_sources: bool
    variant: object

    @property
    def kinds(self) -> tuple[str, ...]:
        """The in-tile layout of each direction."""
        return direction_layouts(self.lattice.name, self.layout, self.tile_edge)

    @property
    def halo_edge(self) -> int:
        return self.tile_edge + 2

    def lit(self, x: float) -> str:
        """C literal of ``x`` in the kernel's arithmetic."""
        return c_literal(x, self.storage.real)


def _load(s: TiledSpec, i: int, index: str) -> str:
    """C expression: the population at ``fin[index]`` of direction i (or its opposite), as
    real (decoded from the storage)."""
    return s.storage.decode(s.lattice, i, f"fin[{index}]", s.form)


def _gather(s: TiledSpec) -> str:
    lat, kinds = s.lattice, s.kinds
    lines = []
    for i, c in enumerate(lat.c.tolist()):
        if not any(c):
            at = f"base + {i} * NPT + slot_{kinds[i]}(n)"
            lines.append(f"    const real g{i} = {_load(s, i, at)};")
            continue
        lines += [
            f"    real g{i};",
            "    {",
            *s.streaming.load(lat, kinds, i, s.halo_edge),
            f"        g{i} = {_load(s, i, 'at')};",
            "    }",
        ]
    lines = s.boundary.before_gather() + lines + s.boundary.after_gather(lat, s.halo_edge)
    return "\n".join(s.storage.node_code(lat, s.form)
                     + s.streaming.own_offsets(lat, kinds) + lines)


def _storer(s: TiledSpec):
    """``store(i, value)``: the statement storing ``value`` (real) as f*_i of the thread's
    node, encoded to the storage, where the streaming pattern puts it."""
    kinds, lat, fill = s.kinds, s.lattice, fills_sectors(s.variant)
    if not fill or s.storage.half:  # float16: encode zeroes a solid lane's store
        return lambda i, value: s.streaming.store(
            kinds, i, s.storage.encode(lat, i, value, s.form, fill))
    return lambda i, value: s.streaming.store(  # the sector fill's solid lanes store the rest
        kinds, i, f"solid ? {s.storage.rest(lat.weight_class[i])} : "
                  f"{s.storage.encode(lat, i, value, s.form)}")


def _collide(s: TiledSpec) -> str:
    if s.mode.decodes:
        return swap_code(s.lattice, s.kinds, s.halo_edge)
    before, after = s.streaming.deferred(s.lattice, s.kinds, s.halo_edge)
    arithmetic = s.collision.code(s.lattice, s.lit, _storer(s))
    return "\n".join(part for part in (before, arithmetic, after) if part)


def _readwrite(s: TiledSpec) -> str:
    return "\n".join(f"        fout[{at}] = fin[{at}];" for at in (
        f"base + {i} * NPT + slot_{s.kinds[i]}(n)" for i in range(s.lattice.q)))


@cache
def _template() -> Template:
    return Template(_TEMPLATE.read_text())


def _launch_bounds(nodes_per_tile: int) -> str:
    # Only big tiles need a register cap for their block size; a cap at 256 threads makes
    # ptxas trade registers for occupancy and spill, which costs more than it gains here.
    return f"__launch_bounds__({min(1024, 4 * nodes_per_tile)}) " if nodes_per_tile > 64 else ""


def render_tiled(s: TiledSpec, collision_params: list[str]) -> str:
    """Complete CUDA C++ source of ``s``; its kernel is ``extern "C"`` ``s.name``.
    ``collision_params``: the collision constants the kernel takes (its model's, or the probe
    model's: every kernel of a lattice takes the same arguments)."""
    lat, a = s.lattice, s.tile_edge
    d = lat.d
    params = ",\n".join(f"    const real {p}" for p in collision_params)
    return _template().substitute(
        namespace=s.name, kernel=s.name, real=s.storage.real, d=d,
        source="long long" if s.wide_sources else "int",
        storage_code=s.storage.definitions(),
        storage_prologue=s.storage.prologue(s.mode, s.streaming.phase()),
        q=lat.q, a=a, npt=a**d,
        halo_nodes=(a + 2) ** d, neighbours=3**d, mode=s.mode.number,
        skip_corners="true" if int(np.abs(lat.c).sum(axis=1).max()) < d else "false",
        launch_bounds=_launch_bounds(a**d),
        readwrite=_readwrite(s) if s.mode.copies else "",
        gather=_gather(s) if s.mode.gathers else "",
        collide="" if s.mode.copies else _collide(s),
        solid_exit=solid_exit(s.variant),
        restrict=s.streaming.restrict(),
        halo="true" if s.streaming.needs_halo(s.mode, s.boundary) else "false",
        halo_masks="true" if halo_masks(s.storage.kind) else "false",
        collision_params=params + s.storage.signature(),
        zou_he=s.boundary.face_code(lat, s.collision.incompressible, s.lit)
        if s.mode.collides else "",
    )
