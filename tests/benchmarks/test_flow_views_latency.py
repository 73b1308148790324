"""Host parts of ``benchmarks/flow_views/flow_views_latency.py``: the coarse flow saved on the
GPU machine reads back the same, and the host parts (meshes, the pane's serialisation) and the
report's total are computed from it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "flow_views"))

import flow_views_latency as fv  # noqa: E402

from geometries.generators import channel  # noqa: E402
from solver.coarse_flow import CoarseFlow  # noqa: E402


def _flow(solid: np.ndarray) -> CoarseFlow:
    """A plane Poiseuille-like flow along x between the plates (y walls), lattice units."""
    ny = solid.shape[1]
    y = np.arange(ny) - (ny - 1) / 2
    ux = np.broadcast_to((1 - (y / (ny / 2)) ** 2)[None, :, None] * 0.01, solid.shape).copy()
    ux[solid] = 0.0
    velocity = np.stack([ux, np.zeros_like(ux), np.zeros_like(ux)]).astype(np.float32)
    scalar = np.where(solid, np.nan, ux).astype(np.float32)
    return CoarseFlow(7, 1, velocity, scalar, "umag", ~solid, 0.0)


def test_a_saved_coarse_flow_reads_back_and_its_host_parts_are_timed(tmp_path):
    pytest.importorskip("pyvista")
    geometry = channel((16, 12, 8), wall_axis=1)
    flow = _flow(np.asarray(geometry.solid))
    fv.save_flow(tmp_path / "f.npz", flow)
    back = fv.load_flow(tmp_path / "f.npz")
    assert (back.step, back.stride, back.name) == (7, 1, "umag")
    assert np.array_equal(back.velocity, flow.velocity)
    assert np.array_equal(back.scalar, flow.scalar, equal_nan=True)
    host = fv.host_part(back, geometry, repeats=1)
    assert host["streamline_points"] > 0 and host["isosurface_cells"] > 0
    assert host["serialise_s"] > 0 and host["payload_bytes"] > 1000  # new meshes were sent
    device = {"headless_mflups": 100.0, "streaming_mflups": 95.0, "cost_fraction": 0.05,
              "requests": [{}] * 4, "published_median_s": 0.2, "published_max_s": 0.3}
    text = fv.markdown({"meta": {"device": "GPU", "date": "d", "commit": "c", "host": "h",
                                 "case_text": ""}, "device": device, "host": host})
    total = 0.2 + host["streamlines_s"] + host["isosurface_s"] + host["serialise_s"]
    assert f"| request to payload ready (median device part + host parts) | {total:.2f} s |" \
        in text
    assert "| cost 1 - streaming / headless | 5.0 % | <= 10 % | yes |" in text
