"""Boundary conditions in the tiled GPU kernel: Ladd's moving walls and Zou-He faces.

The CUDA port of :mod:`solver.boundaries` (``templates/PHYSICS_FOR_GPU.md``, section 2). Per node
the kernel reads two bytes, the node type and the wall-velocity group; everything else lives in
one small table ``bc`` of the arithmetic precision, built here on the host:

- ``bc[4 f + k]``, f = 0..5: face f's (ux, uy, uz, rho) -- inlet velocity, outlet density.
- ``bc[24 + row * q + i]``: Ladd's term ``6 w_i rho_w c_i . U`` added to a bounced population
  ``i``. Rows 0..26 are the ways a link can leave the domain: ``code = sum_axis side * 3^axis``
  (side 1 below the min face, 2 above the max face), and the row holds the velocity of the
  highest-ranked face among those crossed (:func:`solver.boundaries.crossed_face`); row
  ``27 + g`` holds wall group ``g`` (a solid source inside the domain, with the group stored
  at the pulling fluid node).

The kernel's halo resolution (``tiled_lbm.cu``, ``fill_pencil``) encodes a bounced source as -1
(solid inside the domain) or ``-2 - code``; :func:`ladd_code` turns that into a table row, in
one branch per node that only nodes next to a moving wall take (:func:`wall_groups`).
:func:`zou_he_code` emits the reconstruction of PHYSICS_FOR_GPU.md 2b as one straight-line block
per face (direction sets fixed at compile time), chosen by a switch on the node's face.
:func:`boundary_kind` picks the kernel: without boundary code, with Zou-He only, or with both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...boundaries import crossed_face
from ...face_kinds import FaceCondition
from ...lattice import get_lattice
from ...problem import Problem
from ...registry import Registry

__all__ = ["WALL_ROWS", "FACE_PARAMS", "NO_WALL", "BOUNDARY_KINDS", "CUDA_FACE_KINDS",
           "CudaFaceKind", "boundary_kind",
           "boundary_values", "wall_groups", "ladd_code", "zou_he_code"]

#: Ladd rows for out-of-domain links (3^3 side codes); wall group g is row WALL_ROWS + g.
WALL_ROWS = 27
#: Per-face parameters at the start of ``bc``: (ux, uy, uz, rho) for each of the 6 faces.
FACE_PARAMS = 24
#: Kernel wall group of nodes without a moving wall next to them (groups go up to 254).
NO_WALL = 255
#: Boundary code in a kernel: none, Zou-He faces, Zou-He faces and Ladd's moving walls.
BOUNDARY_KINDS = ("none", "zou_he", "moving")


def _density_closure_code(d: int, axis: int, neg: str, incompressible: bool, lit) -> list[str]:
    """CUDA of :func:`solver.face_kinds._density_closure`: rho = the face's density ``fp[3]``,
    j' along the normal from K (``k``) and the half force ``h``."""
    out = ["                rho = fp[3];"]
    if incompressible:
        out.append("                const real jn = rho - k + hn;")
    else:
        out.append(f"                const real jn = rho * ({lit(1.0)} - (k - hn) / rho);")
    for b in range(d):
        value = f"{neg}jn - h{'xyz'[b]}" if b == axis else f"-h{'xyz'[b]}"
        out.append(f"                j{b} = {value};")
    return out


def _velocity_closure_code(d: int, axis: int, neg: str, incompressible: bool, lit
                           ) -> list[str]:
    """CUDA of :func:`solver.face_kinds._velocity_closure`: rho from K (``k``) and the face's
    velocity ``fp[0..2]``, j' = rho u - F/2."""
    out = [f"                const real un = {neg}fp[{axis}];"]
    if incompressible:
        out.append("                rho = k + (un - hn);")
    else:
        out.append(f"                rho = (k - hn) / ({lit(1.0)} - un);")
    for b in range(d):
        value = f"fp[{b}]" if incompressible else f"rho * fp[{b}]"
        out.append(f"                j{b} = {value} - h{'xyz'[b]};")
    return out


@dataclass(frozen=True)
class CudaFaceKind:
    """A face kind in the kernel (keyed like :data:`solver.face_kinds.FACE_TYPES`).

    ``code``: the boundary code its nodes need ('none': bounce-back covers the kind; 'zou_he':
    its Zou-He nodes are reconstructed by :func:`zou_he_code`, which reads the node type and
    the face's row of ``bc``); ``closure_code(d, axis, neg, incompressible, lit)``: for a
    Zou-He kind, the CUDA lines giving ``rho`` and ``j<b>`` at its nodes from ``k`` and the
    half force. ``needs_ladd(conditions)``: whether the faces of this kind in a run (their
    conditions) make links carry Ladd's term, which the 'moving' code adds.
    """

    name: str
    code: str = "none"
    needs_ladd: Callable[[list[FaceCondition]], bool] = lambda conditions: False
    closure_code: Callable[..., list[str]] | None = None


CUDA_FACE_KINDS: Registry[CudaFaceKind] = Registry("CUDA face kind")


register = CUDA_FACE_KINDS.register


register(CudaFaceKind("periodic"))
register(CudaFaceKind("wall"))
# Two velocity faces: where they meet, a link through the lower-ranked one into a node of the
# other is no Zou-He unknown and carries Ladd's term with the inlet velocity.
register(CudaFaceKind("velocity", "zou_he", lambda conditions: len(conditions) > 1,
                      _velocity_closure_code))
register(CudaFaceKind("pressure", "zou_he", closure_code=_density_closure_code))
register(CudaFaceKind("moving_wall", "none",
                      lambda conditions: any(any(fc.velocity) for fc in conditions)))


def boundary_kind(problem: Problem) -> str:
    """Boundary code the kernel of ``problem`` needs: one of :data:`BOUNDARY_KINDS`.

    'none': periodic faces and resting walls only. 'moving': a moving wall face, a moving
    object, or two velocity faces (where they meet, a link through the lower-ranked one into a
    node of the other is no Zou-He unknown and carries Ladd's term with the inlet velocity).
    'zou_he' otherwise when there are velocity/pressure nodes: every link through a velocity
    face then enters a node of that face as an unknown, so Ladd's term is never needed. It
    keeps the gather's populations live at once (more registers); measured on the H200, 256^3
    float32 BGK: plain 24.1, 'zou_he' 22.6, 'moving' 19.6 GLUPS
    (``benchmarks/validation/results/gpu-physics-nvidia-h200-2026-11-22.md``). Decided from the face
    kinds and object velocities first, so plain runs never build the per-node tables.
    """
    by_kind: dict[str, list[FaceCondition]] = {}
    for fc in problem.faces.values():
        by_kind.setdefault(fc.kind, []).append(fc)
    kinds = {name: CUDA_FACE_KINDS[name] for name in by_kind}
    moving_face = any(kind.needs_ladd(by_kind[name]) for name, kind in kinds.items())
    moving_object = any(any(v) for v in problem.objects.values())
    if moving_face or moving_object:
        return "moving" if problem.boundary.needs_boundary_kernel else "none"
    if all(kind.code == "none" for kind in kinds.values()):
        return "none"
    return "zou_he" if problem.boundary.needs_boundary_kernel else "none"


def boundary_values(problem: Problem) -> np.ndarray:
    """The kernel's ``bc`` table, float64 (24 + (27 + n_groups) * q,), lattice units."""
    lattice, tables = problem.lattice, problem.boundary
    faces = np.zeros((6, 4))
    faces[:, :3] = tables.face_velocity
    faces[:, 3] = np.nan_to_num(tables.face_density, nan=0.0)
    shape = np.array(problem.tiling.shape)
    codes = np.arange(WALL_ROWS)
    sides = np.stack([(codes // 3**ax) % 3 for ax in range(lattice.d)], axis=1)
    # A representative source node for each code: -1 below, n above, 0 inside.
    source = np.where(sides == 1, -1, np.where(sides == 2, shape, 0))
    face = crossed_face(source, problem.tiling.shape, problem.periodic, tables.face_rank)
    rows = np.where((face >= 0)[:, None], tables.face_velocity[face], 0.0)
    rows = np.concatenate([rows, tables.wall_velocity])[:, : lattice.d]
    c = lattice.c.astype(np.float64)
    # Same expression and order as solver.boundaries.ladd_links.
    ladd = np.stack([6.0 * lattice.w[i] * tables.rho_wall * (rows @ c[i])
                     for i in range(lattice.q)], axis=1)
    return np.concatenate([faces.ravel(), ladd.ravel()])


def wall_groups(problem: Problem) -> np.ndarray:
    """Per-node wall group for the kernel, uint8 (n_tiles * a**d,); NO_WALL where Ladd is moot.

    A node needs Ladd's term only next to a moving object (group > 0) or on a boundary layer
    of a non-periodic axis when a face moves (a superset: the table rows of resting faces are
    zero). Every other node gets :data:`NO_WALL`, so the kernel skips the term in one uniform
    branch for whole warps away from moving walls.
    """
    tables, tiling = problem.boundary, problem.tiling
    group = tables.wall_group
    needs = group > 0
    if np.any(tables.face_velocity != 0.0):
        coords = tiling.node_coordinates()
        for ax, periodic in enumerate(problem.periodic):
            if not periodic:
                needs |= (coords[..., ax] == 0) | (coords[..., ax] == tiling.shape[ax] - 1)
    return np.ascontiguousarray(np.where(needs, group, NO_WALL), dtype=np.uint8).ravel()


def ladd_code(lattice_name: str, halo_edge: int) -> str:
    """CUDA block adding Ladd's term to every bounced population of a node next to a moving wall.

    The halo source ``s`` of each direction is read again from shared memory (tiles with halo of
    edge ``halo_edge``): -1 is a solid inside the domain (the node's wall group), ``-2 - code``
    a link through the faces ``code``.
    """
    lat = get_lattice(lattice_name)
    lines = ["    if (wgroup != NO_WALL) {  // next to a moving wall: Ladd's term on bounced links",
             "        const int wrow = WALL_ROWS + wgroup;",
             # volatile: reload rather than keep every source index live through the gather
             "        const volatile src_t* src = s_src;"]
    for i, c in enumerate(lat.c.tolist()):
        if not any(c):
            continue
        shift = sum(ci * halo_edge**ax for ax, ci in enumerate(c))
        lines += [
            "        {",
            f"            const src_t s = src[centre - ({shift})];",
            f"            if (s < 0) g{i} += bc[FACE_PARAMS + (s == -1 ? wrow : -2 - s) * Q"
            f" + {i}];",
            "        }",
        ]
    lines.append("    }")
    return "\n".join(lines)


def _sum(names: list[str]) -> str:
    return " + ".join(names) if names else "0"


def _face_block(lattice, face: int, incompressible: bool, lit) -> list[str]:
    """Straight-line Zou-He reconstruction for nodes of ``face`` (axis face//2)."""
    d, axis = lattice.d, face // 2
    sign = 1 if face % 2 == 0 else -1
    c = lattice.c
    cn = c[:, axis] * sign
    unknown = np.flatnonzero(cn > 0)
    tangential = [f"g{i}" for i in np.flatnonzero(cn == 0)]
    outgoing = [f"g{i}" for i in np.flatnonzero(cn < 0)]
    neg = "" if sign > 0 else "-"
    ax = "xyz"[axis]
    out = [f"            const real k = ({_sum(tangential)}) + {lit(2.0)} * "
           f"({_sum(outgoing)});",
           f"            const real hn = {neg}h{ax};",
           "            real rho"]
    out[-1] += ", " + ", ".join(f"j{b}" for b in range(d)) + ";"
    # The two Zou-He kinds' closures: density given (pressure) or velocity given.
    closure = (CUDA_FACE_KINDS[name].closure_code for name in ("pressure", "velocity"))
    out.append("            if (pressure) {")
    out += next(closure)(d, axis, neg, incompressible, lit)
    out.append("            } else {")
    out += next(closure)(d, axis, neg, incompressible, lit)
    out.append("            }")
    # Unknowns: non-equilibrium bounce-back g_i = g_opp + 6 w_i c_i . j'.
    for i in unknown:
        terms = [f"{lit(6.0 * lattice.w[i] * c[i, b])} * j{b}" for b in range(d) if c[i, b]]
        out.append(f"            g{i} = g{lattice.opposite[i]} + ({' + '.join(terms)});")
    # Tangential momentum: spread the remainder over the unknowns with c_t != 0.
    for t in range(d):
        if t == axis:
            continue
        col = c[:, t]
        moment = " + ".join(f"{'-' if col[i] < 0 else ''}g{i}" for i in np.flatnonzero(col))
        denom = float((c[unknown, t] ** 2).sum())
        out.append("            {")
        out.append(f"                const real delta = j{t} - ({moment.replace('+ -', '- ')});")
        for i in unknown:
            if col[i]:
                out.append(f"                g{i} += {lit(col[i] / denom)} * delta;")
        out.append("            }")
    return out


def zou_he_code(lattice_name: str, incompressible: bool, lit) -> str:
    """CUDA block overwriting the unknown populations of Zou-He nodes (PHYSICS_FOR_GPU 2b)."""
    lattice = get_lattice(lattice_name)
    d = lattice.d
    lines = [
        "    if (type > 1) {  // Zou-He node: 2 + face (velocity) or 8 + face (pressure)",
        "        const bool pressure = type >= 8;",
        "        const int face = pressure ? type - 8 : type - 2;",
        "        const real* fp = bc + 4 * face;  // (ux, uy, uz, rho) of the face",
    ]
    lines += [f"        const real h{ax} = f{ax} * {lit(0.5)};" for ax in "xyz"[:d]]
    lines.append("        switch (face) {")
    for face in range(2 * d):
        lines.append(f"        case {face}: {{")
        lines += _face_block(lattice, face, incompressible, lit)
        lines.append("            break;")
        lines.append("        }")
    lines += ["        default: break;", "        }", "    }"]
    return "\n".join(lines)
