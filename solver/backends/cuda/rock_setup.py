"""The host set-up of a rock study made on the GPU: pore labels and tilings (issue 29).

At 1000³ the set-up of a permeability run was mostly host work before any step (an H100 host:
31 s of connectivity analysis, mostly ``scipy.ndimage.label`` of the 1e9-voxel sample, and 58 s
of tiling, mostly the 64-offset search over the 2e9-voxel mirrored box). Here the same two
steps run on the device and their results come back to the host, where the rest of the set-up
reads them as before:

- :func:`device_pore_labels`: ``cupyx.scipy.ndimage.label`` with the lattice's structuring
  element; the components are the same sets of voxels as SciPy's, and every use
  (:func:`geometries.pores.check_sample`, :func:`geometries.preprocess.keep_connected`) reads
  only which voxels share a label;
- :func:`device_tiling`: :meth:`solver.tiling.Tiling.build` with CuPy as its array module (the
  same code as on the host: the same offset, tiles and masks).

Both hold :data:`~.capture.CAPTURE_LOCK` throughout (a study makes the next run's set-up in a
worker thread while the device steps the current run, whose graph capture must not meet these
allocations and launches) and return their device memory to the driver, so the runs that follow
find it free. Both give None when the device lacks the memory, and the caller does it on the
host. Lengths in voxels.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ...tiling import Tiling
from .capture import CAPTURE_LOCK

__all__ = ["device_pore_labels", "device_tiling"]

log = logging.getLogger(__name__)

#: cupyx's labelling kernels index voxels with 32-bit ints: larger images are labelled on the
#: host (a 1000³ sample has 1e9 voxels; its mirrored box, 2e9, is never labelled).
MAX_LABEL_VOXELS = 2**31 - 1


def device_pore_labels(fluid: np.ndarray,
                       structure: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """int32 labels (0 = solid) of the ``structure``-connected components of ``fluid`` (bool,
    True = pore) and the voxels per label (``np.bincount`` of the labels, int64), labelled and
    counted on the GPU; None when the device has not the memory for it or the image has
    :data:`MAX_LABEL_VOXELS` voxels or more."""
    if fluid.size >= MAX_LABEL_VOXELS:
        return None
    import cupy
    from cupyx.scipy import ndimage

    with CAPTURE_LOCK:
        try:
            labels, _ = ndimage.label(cupy.asarray(fluid, dtype=bool),
                                      structure=np.asarray(structure, dtype=bool))
            sizes = cupy.bincount(labels.ravel()).get().astype(np.int64, copy=False)
            return labels.get().astype(np.int32, copy=False), sizes
        except cupy.cuda.memory.OutOfMemoryError:
            log.info("pore labels: no device memory for %d voxels; labelled on the host",
                     fluid.size)
            return None
        finally:
            labels = None
            cupy.get_default_memory_pool().free_all_blocks()


def device_tiling(solid: np.ndarray, a: int | None, offset: Any) -> Tiling | None:
    """:meth:`Tiling.build` of ``solid`` (tile edge ``a``, ``offset`` 'best' or a tuple) with
    the search and the gather on the GPU; None when the device has not the memory for it."""
    import cupy

    with CAPTURE_LOCK:
        try:
            return Tiling.build(solid, a, offset, xp=cupy)
        except cupy.cuda.memory.OutOfMemoryError:
            log.info("tiling: no device memory for %d voxels; tiled on the host", solid.size)
            return None
        finally:
            cupy.get_default_memory_pool().free_all_blocks()
