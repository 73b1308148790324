"""geometries.generators.tilted_pipe: a pipe along any direction with an opening on each end
plane (the oblique-wall benchmarks and the GPU openings tests build it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from geometries.errors import GeometryError
from geometries.generators import tilted_pipe


@pytest.mark.parametrize("axis", [(0.0, 0.0, 1.0), (1.0, 0.0, 1.0), (0.5, 0.2, 0.8)])
def test_each_end_plane_holds_an_opening_of_the_pipe_s_cross_section(axis):
    radius, length = 5.0, 30.0
    geom = tilted_pipe(radius, length, axis)
    unit = np.asarray(axis) / np.linalg.norm(axis)
    first, second = geom.openings
    assert (first.id, second.id) == (1, 2)
    assert np.allclose(first.normal, -unit) and np.allclose(second.normal, unit)
    assert np.allclose(np.subtract(second.centre, first.centre), unit * length)
    for opening in geom.openings:
        # a staircase cross-section: the patch's nodes are about the disc's area (within 35 %)
        assert len(opening.nodes) == pytest.approx(math.pi * radius**2, rel=0.35)
        assert not geom.solid[tuple(opening.nodes.T)].any()
    fluid = np.count_nonzero(~geom.solid)
    assert fluid == pytest.approx(math.pi * radius**2 * (length + 1), rel=0.15)


def test_a_zero_axis_is_refused_saying_so():
    with pytest.raises(GeometryError, match="non-zero axis"):
        tilted_pipe(4, 20, (0.0, 0.0, 0.0))
