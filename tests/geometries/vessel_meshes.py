"""Watertight capped vessel surfaces (mm) built without booleans, for the cap search (issue 28).

- :func:`nozzle`: a 12 mm pipe, a cone to a 4 mm throat and a sudden expansion back to 12 mm,
  200 mm long, revolved with few sections (a faceted cylinder wall: long flat side facets).
- :func:`aorta`: an aorta-like vessel: a 20 mm main tube with a coarctation (10 mm) and a 10 mm
  branch leaving upwards, one flattened patch on the top of the main tube's wall (normal +z),
  cut by three planes and closed there by flat caps (inflow at x = 2, outflows at x = 128 and
  z = 45). Its wall is the zero level of a signed distance sampled on a grid and triangulated by
  marching tetrahedra (six tetrahedra per cube around one diagonal, the same in every cube, so
  neighbouring cubes share their faces' triangulation and the surface is closed); the end
  planes are cut with trimesh and each open loop is closed by a fan from its centroid.
"""

from __future__ import annotations

import numpy as np
import trimesh

from geometries.openings.surface import find_loops

#: Cap planes of :func:`aorta`: (point on the plane, outward normal).
AORTA_CAPS = (((2.0, 0.0, 0.0), (-1.0, 0.0, 0.0)), ((128.0, 0.0, 0.0), (1.0, 0.0, 0.0)),
              ((30.0, 0.0, 45.0), (0.0, 0.0, 1.0)))
#: Cap planes of :func:`nozzle`.
NOZZLE_CAPS = (((0.0, 0.0, 0.0), (0.0, 0.0, -1.0)), ((0.0, 0.0, 200.0), (0.0, 0.0, 1.0)))


def nozzle(sections: int = 16) -> trimesh.Trimesh:
    """The nozzle of issue 28 (mm) along z, its wall a cylinder of ``sections`` flat sides."""
    profile = np.array([[0, 0], [6, 0], [6, 50], [2, 100], [2, 110], [6, 110], [6, 200],
                        [0, 200]], dtype=float)
    return trimesh.creation.revolve(profile, sections=sections)


def _aorta_distance(p: np.ndarray) -> np.ndarray:
    """Signed distance-like field (mm, < 0 inside) of the uncut aorta-like vessel."""
    x, y, z = p[..., 0], p[..., 1], p[..., 2]
    radius = 10.0 - 5.0 * np.where(np.abs(x - 80.0) < 12.0, 0.5 + 0.5 * np.cos(np.pi * (x - 80.0)
                                                                              / 12.0), 0.0)
    main = np.hypot(y, z) - radius
    # A flat patch of the top wall, 14 mm long, where the main tube is cut at z = 8.6.
    main = np.maximum(main, z - 8.6 - 3.0 * np.maximum(np.abs(x - 105.0) - 7.0, 0.0))
    branch = np.maximum(np.hypot(x - 30.0, y) - 5.0, -z)
    k = 2.0  # smooth union: a fillet where the branch leaves the main tube
    h = np.clip(0.5 + 0.5 * (branch - main) / k, 0.0, 1.0)
    return branch * (1 - h) + main * h - k * h * (1 - h)


_TETS = np.array([(0, 1, 3, 7), (0, 1, 5, 7), (0, 2, 3, 7), (0, 2, 6, 7), (0, 4, 5, 7),
                  (0, 4, 6, 7)])


def marching_tetrahedra(values: np.ndarray, origin, spacing: float) -> trimesh.Trimesh:
    """The closed surface ``values = 0`` of a grid of values (< 0 inside), normals out."""
    values = np.where(values == 0.0, 1e-9, values)
    shape = np.array(values.shape)
    ids = np.arange(values.size).reshape(values.shape)
    corners = [ids[i:shape[0] - 1 + i, j:shape[1] - 1 + j, k:shape[2] - 1 + k].ravel()
               for k in (0, 1) for j in (0, 1) for i in (0, 1)]  # corner = i + 2 j + 4 k
    flat = values.ravel()
    signs = np.stack([flat[c] < 0 for c in corners])
    cut = signs.any(axis=0) & ~signs.all(axis=0)  # cubes the surface passes through
    corners = [c[cut] for c in corners]
    tets = np.concatenate([np.stack([corners[c] for c in tet], axis=1) for tet in _TETS])
    inside = flat[tets] < 0
    count = inside.sum(axis=1)
    tets, inside, count = tets[(count > 0) & (count < 4)], inside[(count > 0) & (count < 4)], \
        count[(count > 0) & (count < 4)]
    order = np.argsort(~inside, axis=1, kind="stable")  # inside corners first
    v = np.take_along_axis(tets, order, axis=1)

    def edge(a, b):
        return np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1)

    one, three, two = v[count == 1], v[count == 3], v[count == 2]
    # Triangles as grid-point pairs (edges crossing the surface), each with one inside and one
    # outside grid point of its tetrahedron to orient it (normal out of the lumen).
    tris = [(np.stack([edge(one[:, 0], one[:, m]) for m in (1, 2, 3)], axis=1),
             one[:, 0], one[:, 1]),
            (np.stack([edge(three[:, m], three[:, 3]) for m in (0, 1, 2)], axis=1),
             three[:, 0], three[:, 3]),
            (np.stack([edge(two[:, 0], two[:, 2]), edge(two[:, 0], two[:, 3]),
                       edge(two[:, 1], two[:, 3])], axis=1), two[:, 0], two[:, 2]),
            (np.stack([edge(two[:, 0], two[:, 2]), edge(two[:, 1], two[:, 3]),
                       edge(two[:, 1], two[:, 2])], axis=1), two[:, 0], two[:, 2])]
    tri_edges = np.concatenate([t[0] for t in tris])  # (n, 3, 2) grid point pairs
    p_in = np.concatenate([t[1] for t in tris])
    p_out = np.concatenate([t[2] for t in tris])
    keys, index = np.unique(tri_edges[..., 0].astype(np.int64) * values.size + tri_edges[..., 1],
                            return_inverse=True)
    a, b = keys // values.size, keys % values.size
    grid = np.stack(np.unravel_index(np.arange(values.size), values.shape), axis=1)
    pa, pb = grid[a].astype(float), grid[b].astype(float)
    sa, sb = flat[a], flat[b]
    points = np.asarray(origin) + spacing * (pa + (pb - pa) * (sa / (sa - sb))[:, None])
    faces = index.reshape(-1, 3)
    tri = points[faces]
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    flip = np.einsum("ij,ij->i", normal, (grid[p_out] - grid[p_in]).astype(float)) < 0
    faces[flip] = faces[flip][:, ::-1]
    return trimesh.Trimesh(points, faces, process=True)


def _close_cut(mesh: trimesh.Trimesh, point, normal) -> trimesh.Trimesh:
    """``mesh`` cut by the plane (point, outward normal), the loop closed by a flat fan."""
    vertices, faces = trimesh.intersections.slice_faces_plane(
        mesh.vertices, mesh.faces, -np.asarray(normal, float), point)[:2]
    kept = trimesh.Trimesh(vertices, faces, process=True)
    loops = [loop for loop in find_loops(kept)
             if abs((np.asarray(loop.centre) - point) @ np.asarray(normal)) < 1e-6]
    vertices, faces = [kept.vertices], [kept.faces]
    count = len(kept.vertices)
    for loop in loops:
        ids = loop.vertex_ids
        vertices.append(np.asarray(kept.vertices)[ids].mean(axis=0)[None, :])
        faces.append(np.column_stack([np.roll(ids, -1), ids, np.full(len(ids), count)]))
        count += 1
    return trimesh.Trimesh(np.concatenate(vertices), np.concatenate(faces), process=True)


def aorta(spacing: float = 1.25) -> trimesh.Trimesh:
    """The aorta-like vessel (mm), watertight, with its three flat caps (:data:`AORTA_CAPS`)."""
    lo, hi = np.array([-4.0, -14.0, -14.0]), np.array([134.0, 14.0, 52.0])
    axes = [lo[a] + spacing * np.arange(int(np.ceil((hi[a] - lo[a]) / spacing)) + 1)
            for a in range(3)]
    points = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)
    mesh = marching_tetrahedra(_aorta_distance(points), lo, spacing)
    for point, normal in AORTA_CAPS:
        mesh = _close_cut(mesh, np.asarray(point), np.asarray(normal))
    return mesh
