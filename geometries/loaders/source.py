"""What a loader reads from, and the checks every loader applies to what it builds.

A source is either a path given by trusted code or raw ``bytes`` (an upload). Uploaded bytes are
never turned into a path; a library that needs a file gets a temporary copy made here.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..errors import GeometryError
from ..openings.opening import Opening
from ..voxel import VoxelGeometry

__all__ = [
    "DEFAULT_MAX_VOXELS",
    "Payload",
    "Source",
    "build_geometry",
    "check_voxel_count",
    "cubic_voxel_size",
    "parse_errors",
    "positive_number",
    "temporary_copy",
]

Source = str | os.PathLike | bytes | bytearray | memoryview

#: Largest geometry a loader builds unless ``max_voxels=`` says otherwise (512³ voxels).
DEFAULT_MAX_VOXELS = 512**3


class Payload:
    """The bytes of a source, read once, and the trusted path they came from (if any)."""

    def __init__(self, source: Source) -> None:
        if isinstance(source, bytes | bytearray | memoryview):
            self.path: Path | None = None
            self._data: bytes | None = bytes(source)
        elif isinstance(source, str | os.PathLike):
            self.path = Path(source)
            self._data = None
            if not self.path.is_file():
                raise GeometryError(f"No such file: {self.path}. Check the path.")
        else:
            raise GeometryError(
                f"A geometry source must be a path or bytes, got {type(source).__name__}."
            )

    @property
    def data(self) -> bytes:
        """All bytes of the source."""
        if self._data is None:
            assert self.path is not None
            self._data = self.path.read_bytes()
        return self._data

    def head(self, n: int = 4096) -> bytes:
        """The first ``n`` bytes of the source (without reading a whole file)."""
        if self._data is not None:
            return self._data[:n]
        assert self.path is not None
        with open(self.path, "rb") as fh:
            return fh.read(n)

    def size(self) -> int:
        """Length of the source in bytes."""
        if self._data is not None:
            return len(self._data)
        assert self.path is not None
        return self.path.stat().st_size


@contextlib.contextmanager
def parse_errors(what: str) -> Iterator[None]:
    """Turn any exception a third-party parser raises into a GeometryError about ``what``."""
    try:
        yield
    except GeometryError:
        raise
    # Parsers of untrusted files raise a zoo of exception types (struct.error, KeyError,
    # UnicodeDecodeError, ...); to the user they all mean "this file is broken".
    except Exception as exc:  # noqa: BLE001
        raise GeometryError(
            f"Could not read the {what} data ({type(exc).__name__}: {exc}). "
            f"Check that it is a valid, complete {what} file, or pass the right format=."
        ) from exc


@contextlib.contextmanager
def temporary_copy(data: bytes, suffix: str) -> Iterator[Path]:
    """Yield a private temporary file holding ``data`` (for libraries that need a file)."""
    with tempfile.TemporaryDirectory(prefix="geometry-") as folder:
        path = Path(folder) / f"upload{suffix}"
        path.write_bytes(data)
        yield path


def check_voxel_count(shape: tuple[int, ...], max_voxels: int) -> None:
    """Raise GeometryError when a grid of ``shape`` has more than ``max_voxels`` voxels."""
    count = int(np.prod(shape, dtype=object))
    if count > max_voxels:
        dims = " × ".join(str(n) for n in shape)
        raise GeometryError(
            f"The geometry would have {count:,} voxels ({dims}), more than the limit of "
            f"{max_voxels:,}. Use a coarser resolution, crop or downsample the image, or raise "
            "max_voxels=."
        )


def build_geometry(
    solid: np.ndarray,
    *,
    max_voxels: int,
    voxel_size: float | None = None,
    origin: tuple[float, ...] = (),
    flow_axis: int = 0,
    labels: np.ndarray | None = None,
    name: str = "",
    openings: tuple[Opening, ...] = (),
) -> VoxelGeometry:
    """Return a validated VoxelGeometry; refuse too many voxels or no fluid at all."""
    if solid.ndim not in (2, 3):
        raise GeometryError(
            f"The image has shape {solid.shape}, but a geometry must be 2D or 3D. "
            "Give a single 2D slice or 3D volume."
        )
    check_voxel_count(solid.shape, max_voxels)
    geometry = VoxelGeometry(
        solid, voxel_size=voxel_size, origin=origin, flow_axis=flow_axis, labels=labels, name=name,
        openings=openings,
    )
    if geometry.n_fluid == 0:
        raise GeometryError(
            "The geometry has no fluid voxel: everything is solid. Check the segmentation "
            "(pore_value=, threshold=, pore_below=) or, for STL, inside= and resolution=."
        )
    return geometry


def cubic_voxel_size(spacing: np.ndarray) -> float:
    """Return the common grid spacing (metres) of an image, refusing non-cubic voxels."""
    if not np.all(np.isfinite(spacing)) or not np.all(spacing > 0):
        raise GeometryError(
            f"The image spacing {tuple(spacing)} is not positive. Pass voxel_size= (metres)."
        )
    if not np.allclose(spacing, spacing[0], rtol=1e-6):
        raise GeometryError(
            f"The image spacing {tuple(spacing)} is not the same along every axis, but the "
            "lattice needs cubic voxels. Resample the image, or pass voxel_size= to override."
        )
    return float(spacing[0])


def positive_number(value: object, what: str) -> float:
    """Return a loader option as a positive finite float or raise GeometryError."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise GeometryError(f"{what} must be a positive number, got {value!r}.") from exc
    if not np.isfinite(number) or number <= 0:
        raise GeometryError(f"{what} must be a positive number, got {value!r}.")
    return number
