"""Pore-space connectivity of a sample: which pores carry flow, which are isolated or dead ends.

Connectivity follows the lattice: two fluid voxels are joined when a lattice velocity links them
(:func:`connectivity`). D3Q19 links nodes across faces and edges (18 neighbours), D3Q27 also
across corners (26), D2Q9 across sides and corners (8); a face-only rule (6 in 3D) would drop
fluid that the solver does move and refuse samples that percolate through edges only.

Pore classes, per connected component of the pore space along the flow axis (inlet = first
layer, outlet = last layer):

- **percolating**: the component touches both the inlet and the outlet face; it carries flow.
- **dead-end**: it touches exactly one of the two faces. Fluid enters and leaves it through the
  same face, so at steady state it holds (almost) stagnant fluid and adds nothing to k.
- **isolated**: it touches neither face; no flow can reach it.

Dead-end branches hanging off a percolating component are part of that component here (telling
them apart needs the flow field). Volumes are voxel counts, fractions of the pore volume and,
with a voxel size, cubic metres.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.ndimage as ndi

from .errors import GeometryError
from .voxel import VoxelGeometry

__all__ = ["PoreReport", "connectivity", "label_pores", "pore_labels", "pore_report",
           "pore_reports", "sample_hints", "check_sample"]

#: Porosity above which a rock image probably has its pore label inverted (hint only).
INVERTED_POROSITY = 0.5


def connectivity(links: np.ndarray | None, ndim: int) -> np.ndarray:
    """Structuring element (3,)*ndim, bool, joining voxels along the given lattice velocities.

    ``links`` is a velocity set (q, d) of integer vectors (e.g. ``get_lattice('D3Q19').c``), an
    already built (3,)*ndim structuring element, or None for face neighbours only.
    """
    if links is None:
        return ndi.generate_binary_structure(ndim, 1)
    links = np.asarray(links)
    if links.shape == (3,) * ndim and links.dtype == bool:
        return links
    if links.ndim != 2 or links.shape[1] != ndim:
        raise GeometryError(f"connectivity needs a velocity set of shape (q, {ndim}) or a "
                            f"{'x'.join(['3'] * ndim)} structuring element, got shape "
                            f"{links.shape}.")
    if np.abs(links).max() > 1:
        raise GeometryError("connectivity: velocities longer than one voxel per axis are not "
                            "supported; pass a lattice with |c_i| <= 1 per axis.")
    structure = np.zeros((3,) * ndim, dtype=bool)
    structure[tuple((links + 1).T)] = True
    structure[(1,) * ndim] = True
    return structure


def pore_labels(geom: VoxelGeometry, links: np.ndarray | None = None) -> np.ndarray:
    """Connected pore components of ``geom`` (int labels, 0 = solid): the same for every
    axis, so one labelling may serve several axes and checks (``components=`` below)."""
    components, _ = ndi.label(~geom.solid, structure=connectivity(links, geom.ndim))
    return components


def label_pores(geom: VoxelGeometry, axis: int, links: np.ndarray | None = None,
                components: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (component labels, ids touching the inlet, ids touching the outlet) along ``axis``;
    ``components``: :func:`pore_labels` of ``geom`` with ``links`` when made already."""
    if components is None:
        components = pore_labels(geom, links)
    inlet = np.unique(np.take(components, 0, axis=axis))
    outlet = np.unique(np.take(components, -1, axis=axis))
    return components, inlet[inlet > 0], outlet[outlet > 0]


@dataclass(frozen=True)
class PoreReport:
    """Pore-space classes of a sample along ``axis``: voxel counts, fractions, m³ and hints."""

    axis: int
    porosity: float
    pore_voxels: int
    percolating_voxels: int
    dead_end_voxels: int
    isolated_voxels: int
    voxel_size: float | None = None
    hints: tuple[str, ...] = field(default=())

    @property
    def percolates(self) -> bool:
        """Whether a connected pore path joins the inlet and outlet faces."""
        return self.percolating_voxels > 0

    def fraction(self, voxels: int) -> float:
        """``voxels`` as a fraction of the pore volume (0 without pores)."""
        return voxels / self.pore_voxels if self.pore_voxels else 0.0

    def volume_m3(self, voxels: int) -> float | None:
        """``voxels`` in cubic metres (None without a voxel size)."""
        return None if self.voxel_size is None else voxels * self.voxel_size**3

    def as_dict(self) -> dict:
        """JSON-ready summary; fractions of the pore volume, volumes in m³."""
        out: dict = {"axis": "xyz"[self.axis], "porosity": self.porosity,
                     "pore_voxels": self.pore_voxels, "hints": list(self.hints)}
        for name in ("percolating", "dead_end", "isolated"):
            voxels = getattr(self, f"{name}_voxels")
            out[f"{name}_fraction"] = self.fraction(voxels)
            out[f"{name}_volume_m3"] = self.volume_m3(voxels)
        return out

    def summary(self) -> str:
        """One line for logs and the CLI."""
        def part(name: str) -> str:
            voxels = getattr(self, f"{name}_voxels")
            m3 = self.volume_m3(voxels)
            si = f", {m3:.3g} m³" if m3 is not None else ""
            return f"{name.replace('_', '-')} {100 * self.fraction(voxels):.1f} %{si}"
        return (f"porosity {self.porosity:.3f}; pore volume along {'xyz'[self.axis]}: "
                + "; ".join(part(n) for n in ("percolating", "dead_end", "isolated")))


def pore_report(geom: VoxelGeometry, axis: int | None = None,
                links: np.ndarray | None = None,
                components: np.ndarray | None = None,
                sizes: np.ndarray | None = None) -> PoreReport:
    """Classify the pore space of ``geom`` along ``axis`` (default flow axis); never raises."""
    a = geom.flow_axis if axis is None else int(axis)
    return pore_reports(geom, (a,), links, components, sizes)[0]


def pore_reports(geom: VoxelGeometry, axes: tuple[int, ...] | None = None,
                 links: np.ndarray | None = None,
                 components: np.ndarray | None = None,
                 sizes: np.ndarray | None = None) -> list[PoreReport]:
    """:func:`pore_report` along each of ``axes`` (default all), labelling the pores once
    (``components``: that labelling, :func:`pore_labels`, when made already; ``sizes``: its
    voxels per label, ``np.bincount`` of it, when counted already: 10 s or so at 1000³)."""
    if components is None:
        components = pore_labels(geom, links)
    if sizes is None:
        sizes = np.bincount(components.ravel())
    pores = int(sizes[1:].sum())
    hints = tuple(sample_hints(geom))
    out = []
    for a in range(geom.ndim) if axes is None else axes:
        inlet = np.unique(np.take(components, 0, axis=a))
        outlet = np.unique(np.take(components, -1, axis=a))
        inlet, outlet = inlet[inlet > 0], outlet[outlet > 0]
        through = int(sizes[np.intersect1d(inlet, outlet)].sum())
        dead = int(sizes[np.setxor1d(inlet, outlet)].sum())
        out.append(PoreReport(int(a), geom.porosity, pores, through, dead,
                              pores - through - dead, geom.voxel_size, hints))
    return out


def sample_hints(geom: VoxelGeometry) -> list[str]:
    """Warnings about a sample that looks mislabelled (pore and solid swapped); may be empty."""
    hints = []
    phi = geom.porosity
    if phi > INVERTED_POROSITY:
        hints.append(f"Porosity {phi:.3f} is high for a rock; if {1 - phi:.3f} is what you "
                     "expect, the pore label is inverted: choose the other label as pore.")
    border = np.concatenate([np.take(geom.solid, i, axis=a).ravel()
                             for a in range(geom.ndim) for i in (0, -1)])
    border_pore = 1.0 - border.mean()
    if border_pore > 0.5 and border_pore > phi + 0.2:
        hints.append(f"{100 * border_pore:.0f} % of the border voxels are pore but only "
                     f"{100 * phi:.0f} % of the sample: the space around a cylindrical core may "
                     "be labelled as pore; crop to the core or relabel the outside as solid.")
    return hints


def check_sample(geom: VoxelGeometry, axis: int | None = None,
                 links: np.ndarray | None = None,
                 components: np.ndarray | None = None,
                 sizes: np.ndarray | None = None) -> PoreReport:
    """:func:`pore_report`, raising GeometryError when no pore path joins the faces along axis."""
    report = pore_report(geom, axis, links, components, sizes)
    if not report.percolates:
        name = "xyz"[report.axis]
        raise GeometryError(
            f"No connected pore path joins the two faces along {name} (porosity "
            f"{report.porosity:.3f}, dead-end {100 * report.fraction(report.dead_end_voxels):.0f}"
            f" %, isolated {100 * report.fraction(report.isolated_voxels):.0f} % of the pores):"
            f" no flow along {name} is possible. Choose another flow axis, check the pore label,"
            " or use a larger or less coarsened sample.")
    return report
