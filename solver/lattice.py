"""Discrete velocity sets (D2Q9, D3Q13, D3Q19, D3Q27) as immutable NumPy constants.

A :class:`Lattice` holds the integer velocity vectors ``c`` (shape ``(q, d)``, lattice units per
time step), the weights ``w`` (shape ``(q,)``), the index of the opposite direction of each
velocity and a short name for every direction.

Axis and name convention (as in the tiled-LBM paper, Fig. 1): x points east (E), y north (N),
z top (T); ``O`` is the rest population. The paper fixes the first seven D3Q19 directions as
O, E, N, W, S, T, B (its Fig. 1 states ``e_3 = e_W = (-1, 0, 0)``); the diagonal order is ours and
groups each xy, xz and yz pair. All values are in lattice units; the lattice speed of sound is
``c_s^2 = 1/3`` for every set here.

D3Q13 (d'Humieres et al. 2001) keeps the rest and the 12 face-diagonal velocities in the order of
Tolke & Krafczyk (2008), eq. 1: r, ne, sw, se, nw, te, bw, be, tw, tn, bs, bn, ts. Its weights
(1/2, 1/24) give the right second moment but not an isotropic fourth moment, so it only runs
with its own MRT collision (``solver.mrt``). Its nodes form two decoupled sublattices
(x + y + z even / odd); the tiled layout stores both, i.e. every node of the box: 2 copies x 13
values = 104 bytes per node in float32 (D3Q19: 152). Tolke & Krafczyk keep one sublattice only
(52 bytes per node of the box) with a staggered x layout that the cubic tiles do not have; here
the second sublattice runs the same flow again (a free check: both must agree).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

__all__ = ["Lattice", "get_lattice", "LATTICE_NAMES", "MRT_ONLY", "CS2"]

#: Squared lattice speed of sound, lattice units.
CS2 = 1.0 / 3.0

_UNIT = {"E": (1, 0, 0), "W": (-1, 0, 0), "N": (0, 1, 0), "S": (0, -1, 0), "T": (0, 0, 1),
         "B": (0, 0, -1)}


def _vector(name: str, ndim: int) -> tuple[int, ...]:
    """Velocity vector of a compass name such as 'NE' or 'WB', in lattice units."""
    v = np.zeros(3, dtype=int)
    for letter in name:
        if letter != "O":
            v += _UNIT[letter]
    return tuple(int(x) for x in v[:ndim])


@dataclass(frozen=True)
class Lattice:
    """A DdQq velocity set; arrays are read-only."""

    name: str
    names: tuple[str, ...]
    c: np.ndarray = field(repr=False)
    w: np.ndarray = field(repr=False)
    opposite: np.ndarray = field(repr=False)

    @property
    def d(self) -> int:
        """Number of spatial dimensions."""
        return int(self.c.shape[1])

    @property
    def q(self) -> int:
        """Number of discrete velocities."""
        return int(self.c.shape[0])

    @property
    def weight_class(self) -> tuple[int, ...]:
        """Weight class ``k = |c_i|^2`` of each direction (0 rest, 1 axis, 2 and 3 diagonals)."""
        return tuple(int(k) for k in (self.c * self.c).sum(axis=1))

    @property
    def cs2(self) -> float:
        """Squared speed of sound, lattice units."""
        return CS2

    def index(self, name: str) -> int:
        """Index of the direction called ``name`` (e.g. ``'NE'``)."""
        return self.names.index(name)


def _build(name: str, ndim: int, names: tuple[str, ...], weights: dict[int, float]) -> Lattice:
    c = np.array([_vector(n, ndim) for n in names], dtype=np.int64)
    norm2 = (c * c).sum(axis=1)
    w = np.array([weights[int(n2)] for n2 in norm2], dtype=np.float64)
    lookup = {tuple(v): i for i, v in enumerate(c.tolist())}
    opposite = np.array([lookup[tuple((-c[i]).tolist())] for i in range(len(c))], dtype=np.int64)
    for arr in (c, w, opposite):
        arr.setflags(write=False)
    return Lattice(name=name, names=names, c=c, w=w, opposite=opposite)


_D2Q9_NAMES = ("O", "E", "N", "W", "S", "NE", "NW", "SW", "SE")
_D3Q19_NAMES = ("O", "E", "N", "W", "S", "T", "B",
                "NE", "NW", "SW", "SE", "ET", "EB", "WT", "WB", "NT", "NB", "ST", "SB")
_D3Q27_NAMES = _D3Q19_NAMES + ("NET", "NWT", "SWT", "SET", "NEB", "NWB", "SWB", "SEB")
_D3Q13_NAMES = ("O", "NE", "SW", "SE", "NW", "ET", "WB", "EB", "WT", "NT", "SB", "NB", "ST")

_FACTORIES = {
    "D2Q9": lambda: _build("D2Q9", 2, _D2Q9_NAMES, {0: 4 / 9, 1: 1 / 9, 2: 1 / 36}),
    "D3Q13": lambda: _build("D3Q13", 3, _D3Q13_NAMES, {0: 1 / 2, 2: 1 / 24}),
    "D3Q19": lambda: _build("D3Q19", 3, _D3Q19_NAMES, {0: 1 / 3, 1: 1 / 18, 2: 1 / 36}),
    "D3Q27": lambda: _build("D3Q27", 3, _D3Q27_NAMES,
                            {0: 8 / 27, 1: 2 / 27, 2: 1 / 54, 3: 1 / 216}),
}

#: Names accepted by :func:`get_lattice`.
LATTICE_NAMES: tuple[str, ...] = tuple(_FACTORIES)

#: Lattices whose fourth moment is not isotropic: they need their own MRT (no BGK/TRT).
MRT_ONLY: tuple[str, ...] = ("D3Q13",)


@cache
def get_lattice(name: str) -> Lattice:
    """Return the velocity set called ``name`` (one of :data:`LATTICE_NAMES`)."""
    try:
        return _FACTORIES[name]()
    except KeyError:
        raise ValueError(
            f"Unknown lattice {name!r}; choose one of {', '.join(LATTICE_NAMES)}."
        ) from None
