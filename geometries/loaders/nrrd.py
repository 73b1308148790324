"""Loader for NRRD images (``.nrrd``; detached ``.nhdr`` headers from trusted paths only).

NRRD is a text header ending in a blank line followed by the samples, first axis fastest, so
``sizes: nx ny nz`` maps onto (x, y, z) as a Fortran-ordered view. Encodings raw, gzip, bzip2
and ascii are read here with NumPy and the standard library: VTK's NRRD reader hangs on some
malformed headers and guesses that a first axis of ≤ 9 samples holds vector components.
Decompression is bounded by the size the header declares.
"""

from __future__ import annotations

import bz2
import re
import zlib
from collections.abc import Sequence

import numpy as np

from ..errors import GeometryError
from ..segment import segment
from ..voxel import VoxelGeometry
from .headers import confined_data_file
from .source import (
    DEFAULT_MAX_VOXELS,
    Payload,
    build_geometry,
    check_voxel_count,
    cubic_voxel_size,
    positive_number,
)

__all__ = ["load_nrrd"]

_TYPES = {
    "int8": "i1", "int8_t": "i1", "signed char": "i1",
    "uint8": "u1", "uint8_t": "u1", "uchar": "u1", "unsigned char": "u1",
    "int16": "i2", "int16_t": "i2", "short": "i2", "short int": "i2", "signed short": "i2",
    "signed short int": "i2",
    "uint16": "u2", "uint16_t": "u2", "ushort": "u2", "unsigned short": "u2",
    "unsigned short int": "u2",
    "int32": "i4", "int32_t": "i4", "int": "i4", "signed int": "i4",
    "uint32": "u4", "uint32_t": "u4", "uint": "u4", "unsigned int": "u4",
    "int64": "i8", "int64_t": "i8", "longlong": "i8", "long long": "i8", "long long int": "i8",
    "signed long long": "i8", "signed long long int": "i8",
    "uint64": "u8", "uint64_t": "u8", "ulonglong": "u8", "unsigned long long": "u8",
    "unsigned long long int": "u8",
    "float": "f4", "double": "f8",
}  # fmt: skip
#: Most values read from an ascii-encoded NRRD (2^22, about 160³).
_MAX_ASCII_VALUES = 1 << 22
_ENCODINGS = {"raw": "raw", "gzip": "gzip", "gz": "gzip", "bzip2": "bzip2", "bz2": "bzip2",
              "ascii": "ascii", "text": "ascii", "txt": "ascii"}  # fmt: skip


def load_nrrd(
    payload: Payload,
    *,
    pore_value: float | Sequence[float] | None = None,
    threshold: float | None = None,
    pore_below: bool = True,
    voxel_size: float | None = None,
    unit: float = 1.0,
    flow_axis: int = 0,
    name: str = "",
    max_voxels: int = DEFAULT_MAX_VOXELS,
) -> VoxelGeometry:
    """Load a 2D/3D NRRD image as an (x, y[, z]) geometry; spacing × ``unit`` = voxel size."""
    fields, body = _split(payload)
    dims = _sizes(fields)
    check_voxel_count(dims, max_voxels)
    dtype = _dtype(fields)
    body = _detached_body(payload, fields) if _data_file(fields) else body
    flat = _decode(body, fields, dtype, int(np.prod(dims)))
    image = flat.reshape(dims, order="F")
    unit = positive_number(unit, "unit")
    spacing = _spacing(fields, len(dims)) * unit
    size = cubic_voxel_size(spacing) if voxel_size is None else voxel_size
    origin = _origin(fields, len(dims)) * unit - spacing / 2
    solid = segment(image, pore_value=pore_value, threshold=threshold, pore_below=pore_below)
    return build_geometry(
        solid,
        max_voxels=max_voxels,
        voxel_size=size,
        origin=tuple(float(v) for v in origin),
        flow_axis=flow_axis,
        name=name,
    )


def _split(payload: Payload) -> tuple[dict[str, str], bytes]:
    """Return (header fields, bytes after the blank line) of an NRRD file."""
    data = payload.data
    if not re.match(rb"NRRD000[1-5]\r?\n", data):
        raise GeometryError("The data is not an NRRD file (no NRRD000x magic line).")
    match = re.search(rb"\r?\n\r?\n", data)
    if match is None and payload.path is None:
        raise GeometryError(
            "The NRRD header does not end with a blank line, so the file is truncated. "
            "Upload the complete file."
        )
    end, start = (match.start(), match.end()) if match else (len(data), len(data))
    fields: dict[str, str] = {}
    for line in data[:end].decode("latin-1").splitlines()[1:]:
        if line.startswith("#") or ":=" in line:
            continue  # comments and key/value pairs carry no geometry
        key, sep, value = line.partition(": ")
        if not sep:
            raise GeometryError(
                f"The NRRD header has a malformed line {line[:40]!r}. Check the file: every header "
                "line is 'field: value' and a blank line ends the header."
            )
        fields[key.strip().lower()] = value.strip()
    if match is None and not _data_file(fields):
        raise GeometryError(
            "The NRRD header does not end with a blank line and names no data file, so the "
            "file is truncated. Check the file."
        )
    return fields, data[start:]


def _sizes(fields: dict[str, str]) -> tuple[int, ...]:
    """Return the validated 2 or 3 axis sizes."""
    dimension = _required(fields, "dimension")
    sizes = _required(fields, "sizes").split()
    if dimension not in ("2", "3") or len(sizes) != int(dimension):
        raise GeometryError(
            f"The NRRD image has dimension {dimension!r} and sizes {sizes}; a geometry needs 2 or "
            "3 axes with one size each. Save a single-channel 2D or 3D image."
        )
    if not all(re.fullmatch(r"[0-9]{1,12}", s) and int(s) > 0 for s in sizes):
        raise GeometryError(f"The NRRD sizes {sizes} must be positive integers.")
    return tuple(int(s) for s in sizes)


def _dtype(fields: dict[str, str]) -> np.dtype:
    """Return the sample dtype with the header's byte order."""
    kind = _required(fields, "type").lower()
    if kind not in _TYPES:
        raise GeometryError(f"The NRRD sample type {kind!r} is not supported; use an integer type.")
    endian = fields.get("endian", "little").lower()
    if endian not in ("little", "big"):
        raise GeometryError(f"The NRRD endian must be little or big, got {endian!r}.")
    return np.dtype(("<" if endian == "little" else ">") + _TYPES[kind])


def _decode(body: bytes, fields: dict[str, str], dtype: np.dtype, count: int) -> np.ndarray:
    """Return the ``count`` samples of the body, decoded without exceeding the declared size."""
    encoding = _ENCODINGS.get(_required(fields, "encoding").lower())
    for skip in ("byte skip", "byteskip", "line skip", "lineskip"):
        if fields.get(skip, "0") != "0":
            raise GeometryError("NRRD files with byte or line skips are not supported.")
    expected = count * dtype.itemsize
    try:
        if encoding == "ascii":
            if count > _MAX_ASCII_VALUES:  # split() makes a ~50-byte object per value
                raise GeometryError(
                    f"The NRRD image has {count:,} values in text (ascii) encoding; above "
                    f"{_MAX_ASCII_VALUES:,} only raw or gzip encoding is read. Save it again "
                    "with 'encoding: gzip'."
                )
            values = np.array(body.split(maxsplit=count), dtype=np.float64)
            if values.size != count:
                raise GeometryError(f"The NRRD text data has {values.size} values, not {count}.")
            return values.astype(dtype)
        if encoding == "gzip":
            body = zlib.decompressobj(wbits=47).decompress(body, expected + 1)
        elif encoding == "bzip2":
            body = bz2.BZ2Decompressor().decompress(body, max_length=expected + 1)
        elif encoding != "raw":
            raise GeometryError(f"The NRRD encoding {fields['encoding']!r} is not supported.")
    except (ValueError, zlib.error, OSError, EOFError) as exc:
        raise GeometryError(
            f"The NRRD data cannot be decoded ({exc}); the file is corrupted."
        ) from exc
    if len(body) != expected:
        raise GeometryError(
            f"The NRRD header declares {expected} bytes of data but {len(body)} are present: the "
            "file is truncated or corrupted. Upload the complete file."
        )
    return np.frombuffer(body, dtype=dtype, count=count)


def _spacing(fields: dict[str, str], ndim: int) -> np.ndarray:
    """Return the spacing per axis from ``spacings`` or ``space directions`` (default 1)."""
    try:
        if "spacings" in fields:
            values = np.array([float(v) for v in fields["spacings"].split()])
        elif "space directions" in fields:
            vectors = re.findall(r"\(([^)]*)\)", fields["space directions"])
            values = np.array([np.linalg.norm([float(c) for c in v.split(",")]) for v in vectors])
        else:
            values = np.ones(ndim)
    except ValueError as exc:
        raise GeometryError(f"The NRRD spacing is malformed ({exc}). Pass voxel_size=.") from exc
    if values.size != ndim:
        raise GeometryError(f"The NRRD spacing has {values.size} values for {ndim} axes.")
    return values


def _origin(fields: dict[str, str], ndim: int) -> np.ndarray:
    """Return the position of the first sample (``space origin``, default zeros)."""
    text = fields.get("space origin", "").strip("() ")
    try:
        values = np.array([float(v) for v in text.split(",")]) if text else np.zeros(ndim)
    except ValueError as exc:
        raise GeometryError(f"The NRRD space origin {text!r} is malformed.") from exc
    if values.size != ndim or not np.all(np.isfinite(values)):
        raise GeometryError(f"The NRRD space origin {text!r} does not have {ndim} values.")
    return values


def _data_file(fields: dict[str, str]) -> str | None:
    """Return the detached data file named by the header, if any."""
    return fields.get("data file", fields.get("datafile"))


def _detached_body(payload: Payload, fields: dict[str, str]) -> bytes:
    """Return the bytes of a detached data file next to a trusted header path."""
    name = _data_file(fields) or ""
    if payload.path is None:
        raise GeometryError(
            "The uploaded NRRD header refers to a separate data file, which cannot be uploaded "
            "with it. Save the NRRD with attached data (one .nrrd file)."
        )
    if not name.split() or name.split()[0] == "LIST" or len(name.split()) > 1:
        raise GeometryError("NRRD data split over several files is not supported.")
    return confined_data_file(payload.path, name, "NRRD").read_bytes()


def _required(fields: dict[str, str], key: str) -> str:
    """Return a required header field or raise GeometryError."""
    if key not in fields:
        raise GeometryError(f"The NRRD header lacks the required '{key}:' field.")
    return fields[key]
