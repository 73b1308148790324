"""lbmpy's D3Q19 SRT kernel on a dense box with halfway bounce-back (for compare_lbmpy.py).

lbmpy and pystencils are imported only when a box is built: they are not dependencies of the
project. Lattice units throughout; voxel arrays are (x, y, z) like everywhere in the project.

How lbmpy runs here (the pieces lbmpy's own ``LatticeBoltzmannStep`` wires together):

- Method: ``LBMConfig(D3Q19, SRT, relaxation_rate=omega, compressible=False,
  continuous_equilibrium=False)``: the incompressible (He-Luo) second-order polynomial
  equilibrium that our BGK uses (lbmpy's default for D3Q19 derives the equilibrium from the
  continuous Maxwellian, which differs in higher moments). Pull streaming, lbmpy's default
  zero-centred storage (``f - w`` is stored), its default simplifications.
- Storage: two fixed-size fields of (n+2)^3 cells x 19 in lbmpy's default ``fzyx`` layout
  (structure of arrays, x fastest), one ghost layer: the shape-specialised kernel that
  ``LatticeBoltzmannStep(fixed_loop_sizes=True)`` generates.
- Boundaries: the ghost layer (the domain faces) and the solid cells are boundary cells, handled
  by lbmpy's generated boundary kernels (``create_lattice_boltzmann_boundary_kernel``) for
  ``NoSlip`` (halfway bounce-back) and ``UBB`` (moving wall, ``-6 w_i c_i . u_w``), each over an
  index list of (x, y, z, dir) links from fluid cells to its boundary cells.
  :func:`boundary_links` builds the lists with vectorised NumPy in the same content and order
  as pystencils' list builder (checked in ``tests/benchmarks``), whose pure-Python fallback
  (used without Cython) needs minutes for a 192^3 sphere pack.
- Code variants (:data:`VARIANTS`): pystencils' defaults (int64 index arithmetic), int32
  indices, and int32 indices with lbmpy's global common-subexpression elimination.
- One step, as ``LatticeBoltzmannStep.time_step``: boundary kernels on the source field, the
  stream-collide kernel source -> destination, swap. The kernel updates every cell of the box,
  solid ones included; only fluid cells count in MFLUPS.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np

__all__ = ["LINK_FIELDS", "VARIANTS", "boundary_links", "LbmpyBox", "build_box", "versions"]

log = logging.getLogger(__name__)

#: Members of pystencils' boundary index records, in order.
LINK_FIELDS = ("x", "y", "z", "dir")
#: Cell flags of :func:`boundary_links`: fluid, resting wall (NoSlip), moving lid (UBB).
FLUID, WALL, LID = 0, 1, 2
#: Code-generation variants of the stream-collide kernel: name -> (index type, cse_global).
#: pystencils indexes with int64 by default; int32 is enough below 2^31 values per field.
VARIANTS = {
    "defaults": ("int64", False),
    "int32 indices": ("int32", False),
    "int32 indices, cse_global": ("int32", True),
}


def boundary_links(flags: np.ndarray, stencil: np.ndarray, value: int) -> np.ndarray:
    """Links (k, 4) int32 ``(x, y, z, dir)`` from interior fluid cells to cells flagged ``value``.

    ``flags`` is the (nx+2, ny+2, nz+2) cell-flag array including the ghost layer, ``stencil``
    the (q, 3) velocities in lbmpy's order; coordinates are ghost-layer array indices and
    ``dir`` points from the fluid cell to the boundary cell. Rows are sorted by fluid cell
    (z slowest, x fastest) and then by direction, the order of pystencils' list builder.
    """
    inner = tuple(slice(1, s - 1) for s in flags.shape)
    fluid = flags[inner] == FLUID
    parts = []
    for d, c in enumerate(stencil):
        if not np.any(c):
            continue
        shifted = tuple(slice(1 + ci, s - 1 + ci) for ci, s in zip(c, flags.shape, strict=True))
        x, y, z = np.nonzero(fluid & (flags[shifted] == value))
        parts.append(np.stack([x + 1, y + 1, z + 1, np.full_like(x, d)], axis=1))
    links = np.concatenate(parts) if parts else np.zeros((0, 4), dtype=np.int64)
    order = np.lexsort((links[:, 3], links[:, 0], links[:, 1], links[:, 2]))
    return links[order].astype(np.int32)


def cell_flags(solid: np.ndarray, lid: tuple[float, float, float] | None) -> np.ndarray:
    """Flags (n+2)^3 int8: walls in the ghost layer and solids, the lid on the y_max ghost plane.

    The lid plane is written last, so links through its edges and corners see the moving wall:
    the precedence our solver gives a moving wall where faces meet.
    """
    flags = np.full(tuple(s + 2 for s in solid.shape), WALL, dtype=np.int8)
    flags[1:-1, 1:-1, 1:-1] = np.where(solid, WALL, FLUID)
    if lid is not None:
        flags[:, -1, :] = LID
    return flags


def versions() -> dict[str, str]:
    """Versions of lbmpy, pystencils and sympy (imports them)."""
    import lbmpy
    import pystencils
    import sympy

    return {"lbmpy": lbmpy.__version__, "pystencils": pystencils.__version__,
            "sympy": sympy.__version__}


@cache
def _collision_rule(omega: float, cse_global: bool):
    """lbmpy's simplified SRT collision rule (the slow sympy part, shared by every box)."""
    from lbmpy import LBMOptimisation
    from lbmpy.creationfunctions import create_lb_collision_rule

    return create_lb_collision_rule(lbm_config=_method_config(omega),
                                    lbm_optimisation=LBMOptimisation(cse_global=cse_global))


def _stream_collide_ast(src_field, dst_field, omega: float, precision: str, target,
                        variant: str):
    """lbmpy's stream-collide kernel (not compiled) for the fields and code variant."""
    import pystencils as ps
    from lbmpy import LBMOptimisation
    from lbmpy.creationfunctions import create_lb_ast

    if variant not in VARIANTS:
        raise ValueError(f"Unknown lbmpy variant {variant!r}; use one of {', '.join(VARIANTS)}.")
    index_dtype, cse_global = VARIANTS[variant]
    config = ps.CreateKernelConfig(target=target, default_dtype=precision,
                                   index_dtype=index_dtype)
    optimisation = LBMOptimisation(symbolic_field=src_field, symbolic_temporary_field=dst_field,
                                   cse_global=cse_global)
    method_config = replace(_method_config(omega),
                            collision_rule=_collision_rule(omega, cse_global))
    return create_lb_ast(lbm_config=method_config, config=config,
                         lbm_optimisation=optimisation)


def _method_config(omega: float):
    from lbmpy import LBMConfig, LBStencil, Method, Stencil

    return LBMConfig(stencil=LBStencil(Stencil.D3Q19), method=Method.SRT, relaxation_rate=omega,
                     compressible=False, continuous_equilibrium=False,
                     streaming_pattern="pull")


@dataclass
class LbmpyBox:
    """One lbmpy run: compiled kernels, the two pdf fields, boundary index lists on the device."""

    xp: object
    fields: tuple = field(repr=False)
    src: object = field(repr=False)
    dst: object = field(repr=False)
    boundaries: list = field(repr=False)
    stencil: np.ndarray = field(repr=False)
    omega: float = 1.0
    precision: str = "float64"
    target: object = None
    n_fluid: int = 0
    n_cells: int = 0
    n_links: int = 0
    ast: object = field(default=None, repr=False)
    kernel: object = field(default=None, repr=False)
    variant: str = ""
    block_size: tuple[int, int, int] | None = None

    def use_variant(self, variant: str) -> None:
        """Generate the stream-collide kernel of code variant ``variant`` (:data:`VARIANTS`)."""
        self.ast = _stream_collide_ast(*self.fields, self.omega, self.precision, self.target,
                                       variant)
        self.variant = variant
        self.use_block_size(None)

    def use_block_size(self, block_size: tuple[int, int, int] | None) -> None:
        """Compile (cached by CuPy) a launcher with ``block_size`` threads; None = pystencils'."""
        kernel = self.ast.compile()
        if block_size is not None:  # set before the first launch: the launcher caches its grid
            kernel.launch_config.trim_block_size(tuple(block_size))
        self.kernel, self.block_size = kernel, block_size

    def step(self, n: int = 1, boundaries: bool = True) -> None:
        """Advance ``n`` steps (boundary kernels, then stream-collide); asynchronous on a GPU."""
        kernel = self.kernel
        for _ in range(n):
            if boundaries:
                for boundary_kernel, links in self.boundaries:
                    boundary_kernel(src=self.src, indexField=links)
            kernel(src=self.src, dst=self.dst)
            self.src, self.dst = self.dst, self.src

    def velocity(self) -> np.ndarray:
        """Velocity (3, nx, ny, nz) float64 of the stored post-collision populations (host)."""
        f = self.src[1:-1, 1:-1, 1:-1]
        f = f.get() if hasattr(f, "get") else np.asarray(f)
        # Zero-centred storage leaves sum_i c_i f_i unchanged (sum_i c_i w_i = 0).
        return np.moveaxis(f.astype(np.float64) @ self.stencil.astype(np.float64), -1, 0)


def build_box(solid: np.ndarray, lid: tuple[float, float, float] | None, omega: float,
              precision: str, target: str = "cuda", variant: str = "defaults") -> LbmpyBox:
    """Generate and compile lbmpy's kernels for ``solid`` (True = solid, (x, y, z)).

    ``lid`` is the velocity of the y_max face (None: resting walls on every face); ``target``
    'cuda' (CuPy) or 'cpu' (C compiled with the host compiler, for checks without a GPU);
    ``variant`` the stream-collide kernel's code variant (:data:`VARIANTS`).
    """
    import pystencils as ps
    from lbmpy.boundaries import UBB, NoSlip
    from pystencils.boundaries.createindexlist import numpy_data_type_for_boundary_object

    if target not in ("cuda", "cpu"):
        raise ValueError(f"Unknown target {target!r}; use 'cuda' or 'cpu'.")
    ps_target = ps.Target.CUDA if target == "cuda" else ps.Target.CPU
    if target == "cuda":
        import cupy as xp
    else:
        xp = np
    q = 19
    shape = tuple(s + 2 for s in solid.shape) + (q,)
    src_field, dst_field = (ps.Field.create_fixed_size(name, shape, index_dimensions=1,
                                                       dtype=precision, layout="fzyx")
                            for name in ("src", "dst"))
    method = _collision_rule(omega, False).method
    stencil = np.array([tuple(int(v) for v in c) for c in method.stencil], dtype=np.int64)
    flags = cell_flags(solid, lid)
    walls = [(WALL, NoSlip())]
    if lid is not None:
        walls.append((LID, UBB(tuple(lid), data_type=precision)))
    boundaries, n_links = [], 0
    for value, condition in walls:
        links = boundary_links(flags, stencil, value)
        records = np.zeros(len(links), dtype=numpy_data_type_for_boundary_object(condition, 3))
        for k, name in enumerate(LINK_FIELDS):
            records[name] = links[:, k]
        index_field = ps.Field.create_generic("indexField", spatial_dimensions=1,
                                              field_type=ps.FieldType.INDEXED,
                                              dtype=records.dtype)
        kernel = create_lattice_boltzmann_boundary(src_field, index_field, method, condition,
                                                   ps_target, precision)
        boundaries.append((kernel, xp.asarray(records)))
        n_links += len(links)

    def pdf_array():
        # fzyx: the direction index slowest, x fastest; zero = rest equilibrium (zero-centred).
        return xp.zeros(shape[::-1], dtype=precision).transpose(3, 2, 1, 0)

    box = LbmpyBox(xp=xp, fields=(src_field, dst_field), src=pdf_array(), dst=pdf_array(),
                   boundaries=boundaries, stencil=stencil, omega=omega, precision=precision,
                   target=ps_target, n_fluid=int((~solid).sum()), n_cells=int(solid.size),
                   n_links=n_links)
    box.use_variant(variant)
    return box


def create_lattice_boltzmann_boundary(src_field, index_field, method, condition, target,
                                      precision: str):
    """lbmpy's generated boundary kernel for ``condition``, compiled."""
    from lbmpy.boundaries.boundaryhandling import create_lattice_boltzmann_boundary_kernel

    ast = create_lattice_boltzmann_boundary_kernel(src_field, index_field, method, condition,
                                                   target=target, default_dtype=precision)
    return ast.compile()
