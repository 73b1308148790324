"""Pictures of the 3D view: the geometry as its kind is read, the cut, streamlines and an
isosurface, rendered off screen by PyVista (no display needed).

The one scene of the app's 3D view (``app/views/scene3d.py`` mirrors it in the browser with
vtk.js) and of the command line's 3D frames (``frames: {views: [slice, 3d]}`` of a case file):
the solid surface is the marching-cubes contour of the solid mask at 0.5, halfway between solid
and fluid nodes where the bounce-back walls sit, computed once per geometry (on a coarsened mask
for large domains, decimated if still large). A porous sample's grains are opaque and clipped at
the cut so the plane is visible; a vessel's wall (a geometry with openings found on its surface)
is see-through and open at its openings. The plane shows a field in the pores and the solid
colour in the grains; streamlines and the isosurface come from the run's coarse flow
(:mod:`solver.flow_meshes`). Node coordinates (lattice units) throughout.
"""

from __future__ import annotations

import numpy as np
import pyvista as pv

__all__ = ["ScenePicture", "solid_surface", "is_vessel", "slice_plane", "clip_solid",
           "add_scene_actors", "style_solid", "reset_view", "outline", "SOLID_RGB", "VESSEL_RGB",
           "VESSEL_OPACITY", "STREAMLINE_RGB", "ISO_RGB", "MAX_TRIANGLES", "WINDOW"]

pv.OFF_SCREEN = True
SOLID_RGB = "#c9b28f"
#: A vessel's wall: see-through, so the cut and the flow inside the lumen stay visible.
VESSEL_RGB = "#d98c8c"
VESSEL_OPACITY = 0.3
STREAMLINE_RGB = "#1d4ed8"
ISO_RGB = "#f59e0b"
BACKGROUND_RGB = "#f4f6f8"
#: Mask size per axis above which the surface is built from a coarsened mask.
MAX_SURFACE_EDGE = 96
#: Triangle count above which the surface is decimated.
MAX_TRIANGLES = 150_000
#: Picture size of the 3D view, pixels (width, height).
WINDOW = (640, 480)


def is_vessel(geometry) -> bool:
    """Whether ``geometry`` is read as a vessel: a lumen with openings found on an STL surface
    (a box face's fluid patches make a porous sample's openings, not a vessel's)."""
    return any(o.source != "face-patch" for o in getattr(geometry, "openings", ()))


def solid_surface(solid: np.ndarray, close_box: bool = True) -> pv.PolyData:
    """Triangulated solid-fluid interface of a 3D mask, node coordinates (lattice units).

    ``close_box``: close the surface at the box faces (a porous sample's grains cut by the box
    look solid); False leaves it open there (a vessel: the wall with its openings, without the
    box of solid around the lumen)."""
    stride = max(1, int(np.ceil(max(solid.shape) / MAX_SURFACE_EDGE)))
    coarse = solid[::stride, ::stride, ::stride].astype(np.float32)
    padded = np.pad(coarse, 1, mode="constant" if close_box else "edge")
    image = pv.ImageData(dimensions=padded.shape, spacing=(stride,) * 3,
                         origin=(-stride,) * 3)
    image.point_data["solid"] = padded.ravel(order="F")
    surface = image.contour([0.5], scalars="solid")
    if surface.n_cells > MAX_TRIANGLES:
        surface = surface.decimate(1.0 - MAX_TRIANGLES / surface.n_cells)
    return surface


def slice_plane(plane: np.ndarray, axis: int, index: int) -> tuple[pv.DataSet, pv.DataSet]:
    """(fluid cells with scalar 'q', solid cells) of a cut normal to ``axis`` at ``index``."""
    dims, origin = [1, 1, 1], [0.0, 0.0, 0.0]
    in_plane = [a for a in range(3) if a != axis]
    for a, n in zip(in_plane, plane.shape, strict=True):
        dims[a], origin[a] = n + 1, -0.5
    origin[axis] = float(index)
    grid = pv.ImageData(dimensions=dims, origin=origin)
    values = np.asarray(plane, dtype=float).ravel(order="F")
    grid.cell_data["q"] = np.nan_to_num(values)
    solid = np.isnan(values)
    return grid.extract_cells(np.flatnonzero(~solid)), grid.extract_cells(np.flatnonzero(solid))


def clip_solid(surface: pv.PolyData, vessel: bool, axis: int, index: int) -> pv.PolyData:
    """The solid surface as the scene shows it with a cut normal to ``axis`` at ``index``: a
    porous sample's grains behind the cut (below it along the normal), so the cut is visible;
    a vessel's see-through wall whole."""
    if vessel:
        return surface
    origin = [0.0, 0.0, 0.0]
    origin[axis] = float(index)
    return surface.clip(normal=tuple(np.eye(3)[axis]), origin=tuple(origin), invert=True)


def add_scene_actors(plotter: pv.Plotter, meshes: dict) -> dict:
    """Add the scene's meshes (keys solid, grains, fluid, outline, streamlines, iso) to
    ``plotter`` in their colours; the actors by the same keys."""
    add = plotter.add_mesh
    actors = {"solid": add(meshes["solid"], color=SOLID_RGB, smooth_shading=True, specular=0.2),
              "grains": add(meshes["grains"], color=SOLID_RGB),
              # A range given: pyvista cannot take one from an empty cut; set the real one later.
              "fluid": add(meshes["fluid"], scalars="q", cmap="viridis", clim=(0.0, 1.0),
                           show_scalar_bar=False),
              "outline": add(meshes["outline"], color="#6b7785", line_width=1),
              "streamlines": add(meshes["streamlines"], color=STREAMLINE_RGB, line_width=2),
              "iso": add(meshes["iso"], color=ISO_RGB, opacity=0.6, smooth_shading=True)}
    return actors


def style_solid(actor: pv.Actor, vessel: bool) -> None:
    """A vessel's wall see-through and reddish, a porous sample's grains opaque sand."""
    actor.prop.opacity = VESSEL_OPACITY if vessel else 1.0
    actor.prop.color = VESSEL_RGB if vessel else SOLID_RGB


def outline(shape: tuple[int, ...]) -> pv.PolyData:
    """The edges of the box of a ``shape`` mask (voxel faces), node coordinates."""
    return pv.Box(bounds=[v for n in shape for v in (-0.5, n - 0.5)]).outline()


def reset_view(plotter: pv.Plotter) -> None:
    """The scene's first viewpoint: isometric, the box filling the picture."""
    plotter.view_isometric()
    plotter.camera.zoom(1.15)


class ScenePicture:
    """The 3D view of one geometry, off screen: :meth:`render` draws a cut of a field, and
    optionally streamlines and an isosurface, and returns the picture (the command line's 3D
    frames; the solid surface is built once, here)."""

    def __init__(self, geometry, window: tuple[int, int] = WINDOW, label: str = "") -> None:
        """``label``: the colour bar's title (the field and its unit)."""
        solid = np.asarray(geometry.solid, dtype=bool)
        if solid.ndim != 3:
            raise ValueError("A 3D picture needs a 3D geometry; this one is 2D.")
        self.vessel = is_vessel(geometry)
        self.surface = solid_surface(solid, close_box=not self.vessel)
        self.plotter = pv.Plotter(off_screen=True, window_size=window)
        self.plotter.set_background(BACKGROUND_RGB)
        # A cut through no fluid or no solid behind it leaves an empty mesh (allowed here).
        self.plotter.theme.allow_empty_mesh = True
        self.meshes = {"solid": pv.PolyData(), "fluid": pv.UnstructuredGrid(),
                       "grains": pv.UnstructuredGrid(), "outline": outline(solid.shape),
                       "streamlines": pv.PolyData(), "iso": pv.PolyData()}
        self.label = label or " "
        self.actors: dict = {}  # added at the first render: pyvista needs the cut's scalars

    def render(self, plane: np.ndarray, axis: int, index: int, clim: tuple[float, float],
               lines: pv.PolyData | None = None, iso: pv.PolyData | None = None,
               title: str = "") -> np.ndarray:
        """The picture (H, W, 3 uint8) with ``plane`` (NaN in solids) cut normal to ``axis`` at
        ``index`` coloured over ``clim``, the streamlines ``lines`` and the isosurface ``iso``
        (None: none), ``title`` in a corner."""
        self.meshes["solid"].copy_from(clip_solid(self.surface, self.vessel, axis, index))
        fluid, grains = slice_plane(plane, axis, index)
        self.meshes["fluid"].copy_from(fluid)
        self.meshes["grains"].copy_from(grains if not self.vessel else pv.UnstructuredGrid())
        self.meshes["streamlines"].copy_from(lines if lines is not None else pv.PolyData())
        self.meshes["iso"].copy_from(iso if iso is not None else pv.PolyData())
        if not self.actors:
            self._add_actors()
        low, high = clim
        self.actors["fluid"].mapper.scalar_range = (low, high if high > low else low + 1e-30)
        self.title.set_text("upper_left", title or " ")
        # A render first: a screenshot alone returns the last rendered image.
        self.plotter.render()
        return np.asarray(self.plotter.screenshot(return_img=True))[..., :3]

    def _add_actors(self) -> None:
        self.actors = add_scene_actors(self.plotter, self.meshes)
        style_solid(self.actors["solid"], self.vessel)
        self.plotter.add_scalar_bar(title=self.label, mapper=self.actors["fluid"].mapper,
                                    n_labels=3, fmt="%.3g", color="#1f2a37")
        self.title = self.plotter.add_text(" ", font_size=9, color="#1f2a37")
        reset_view(self.plotter)

    def close(self) -> None:
        """Release the render window."""
        self.plotter.close()
