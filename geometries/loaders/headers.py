"""Bounded Python parsers for image headers, run before any native reader sees a file.

They check what the native readers would otherwise trust: MetaImage ``key = value`` headers
(sizes, channels, element type, compressed size, detached data files), VTK XML image headers
(read with an XML parser, so comments cannot hide or fake a ``WholeExtent``) and TIFF IFD chains
(walked with a page limit and loop detection). Each raises GeometryError with what to do.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from ..errors import GeometryError

__all__ = ["check_metaimage", "check_vti", "check_tiff_chain", "confined_data_file"]

_MET_TYPES = {"MET_CHAR", "MET_UCHAR", "MET_SHORT", "MET_USHORT", "MET_INT", "MET_UINT",
              "MET_LONG", "MET_ULONG", "MET_LONG_LONG", "MET_ULONG_LONG", "MET_FLOAT",
              "MET_DOUBLE"}  # fmt: skip
_META_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_MAX_COMPONENTS = 16
#: Most pages a TIFF stack may have (z slices); more means a broken or hostile file.
MAX_TIFF_PAGES = 65536


def check_metaimage(head: bytes, size: int, max_voxels: int, *, uploaded: bool) -> str:
    """Validate a MetaImage header; return its ElementDataFile (``LOCAL`` for attached data)."""
    fields: dict[str, str] = {}
    for raw in head.split(b"\n"):
        line = raw.decode("latin-1").strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _META_KEY.fullmatch(key):
            raise GeometryError(f"The MetaImage header has a malformed line {line[:40]!r}.")
        if key.lower() in {k.lower() for k in fields}:
            raise GeometryError(f"The MetaImage header sets {key} twice. Check the file.")
        fields[key] = value.strip()
        if key == "ElementDataFile":
            break  # the last header entry: binary data follows
    else:
        raise GeometryError("The MetaImage header has no ElementDataFile entry; check the file.")
    ndims = _integer(fields, "NDims", 1, 3)
    dims = [int(v) for v in _ints(fields.get("DimSize", ""), "DimSize")]
    if len(dims) != ndims or min(dims, default=0) < 1:
        raise GeometryError(f"The MetaImage DimSize {dims} does not give {ndims} positive sizes.")
    _check_count(dims, max_voxels, "MetaImage")
    if "ElementNumberOfChannels" in fields:
        _integer(fields, "ElementNumberOfChannels", 1, 1)
    kind = fields.get("ElementType", "").upper()
    if kind not in _MET_TYPES:
        raise GeometryError(
            f"The MetaImage ElementType {kind!r} is not a number type; save the image as "
            "MET_UCHAR, MET_SHORT, MET_FLOAT or another numeric type."
        )
    if "CompressedDataSize" in fields:
        _integer(fields, "CompressedDataSize", 0, size)
    name = fields["ElementDataFile"]
    if uploaded and name.upper() != "LOCAL":
        raise GeometryError(
            "The uploaded MetaImage header refers to a separate data file, which cannot be "
            "uploaded with it. Save it as one .mha file (ElementDataFile = LOCAL)."
        )
    return name


def confined_data_file(header: Path, name: str, what: str) -> Path:
    """Return the detached data file ``name`` of a trusted header, inside the header's folder."""
    folder = header.resolve().parent
    candidate = Path(name)
    if candidate.is_absolute() or not name or "\x00" in name:
        raise GeometryError(
            f"The {what} header names the data file {name!r}; only a file name relative to the "
            "header's folder is allowed. Move the data next to the header and name it plainly."
        )
    path = (folder / candidate).resolve()
    if folder not in path.parents:
        raise GeometryError(
            f"The {what} data file {name!r} lies outside the header's folder {folder}. Move the "
            "data next to the header."
        )
    if not path.is_file():
        raise GeometryError(f"The {what} data file {path} does not exist. Check the header.")
    return path


def check_vti(data: bytes, max_voxels: int) -> None:
    """Validate a VTK XML image header with an XML parser: extent, components, types."""
    head_end = data.find(b"<AppendedData")
    parser = ET.XMLPullParser(events=("start",))
    if b"<!ENTITY" in (data if head_end < 0 else data[:head_end]):
        raise GeometryError("The .vti file declares XML entities, which are not allowed.")
    extent = None
    try:
        for start in range(0, len(data), 4096):
            parser.feed(data[start : start + 4096])
            for _, element in parser.read_events():
                tag = element.tag
                if tag == "ImageData":
                    extent = element.get("WholeExtent")
                elif tag == "DataArray":
                    comps = element.get("NumberOfComponents", "1")
                    if not comps.isdigit() or not 1 <= int(comps) <= _MAX_COMPONENTS:
                        raise GeometryError(
                            f"A .vti data array declares {comps[:20]!r} components; a voxel "
                            "image has one. Export a single-component label array."
                        )
                elif tag == "AppendedData":
                    raise StopIteration
    except StopIteration:
        pass
    except ET.ParseError as exc:
        raise GeometryError(f"The .vti XML header is malformed ({exc}). Check the file.") from exc
    if extent is None:
        raise GeometryError("The .vti file has no ImageData WholeExtent; it is not an image.")
    values = _ints(extent, "WholeExtent")
    if len(values) != 6:
        raise GeometryError(f"The .vti WholeExtent {extent[:60]!r} needs 6 integers.")
    dims = [values[2 * a + 1] - values[2 * a] + 1 for a in range(3)]
    if min(dims) < 1:
        raise GeometryError(f"The .vti WholeExtent {extent!r} is empty.")
    _check_count(dims, max_voxels, ".vti")


def check_tiff_chain(data: bytes) -> int:
    """Walk a TIFF's IFD chain (limit, loop detection) and return its page count."""
    order = {b"II": "little", b"MM": "big"}.get(data[:2])
    if order is None or len(data) < 8:
        raise GeometryError("The data is not a TIFF file (bad byte-order mark).")
    version = int.from_bytes(data[2:4], order)
    big = version == 43
    if version not in (42, 43):
        raise GeometryError(f"The TIFF version {version} is not 42 or 43 (BigTIFF).")
    count_size, entry_size, offset_size = (8, 20, 8) if big else (2, 12, 4)
    offset = int.from_bytes(data[8:16] if big else data[4:8], order)
    seen: set[int] = set()
    while offset:
        if offset in seen:
            raise GeometryError("The TIFF page chain loops back on itself; the file is corrupted.")
        if len(seen) >= MAX_TIFF_PAGES:
            raise GeometryError(f"The TIFF file has more than {MAX_TIFF_PAGES} pages.")
        seen.add(offset)
        if offset + count_size > len(data):
            raise GeometryError("The TIFF file is truncated: a page lies past its end.")
        entries = int.from_bytes(data[offset : offset + count_size], order)
        end = offset + count_size + entries * entry_size
        if end + offset_size > len(data):
            raise GeometryError("The TIFF file is truncated: a page directory runs past its end.")
        offset = int.from_bytes(data[end : end + offset_size], order)
    return len(seen)


def _check_count(dims: list[int], max_voxels: int, what: str) -> None:
    """Refuse headers declaring more than twice ``max_voxels`` samples (cells vs points)."""
    if int(np.prod(dims, dtype=object)) > 2 * max_voxels:
        raise GeometryError(
            f"The {what} header declares an image of {dims} samples, more than the limit of "
            f"{max_voxels:,} voxels. Crop or downsample the image, or raise max_voxels=."
        )


def _ints(text: str, what: str) -> list[int]:
    """Return the integers of a header value (at most 16 digits each)."""
    parts = text.split()
    if len(parts) > 8 or not all(re.fullmatch(r"-?[0-9]{1,16}", p) for p in parts):
        raise GeometryError(f"The image header has malformed {what} {text[:60]!r}.")
    return [int(p) for p in parts]


def _integer(fields: dict[str, str], key: str, low: int, high: int) -> int:
    """Return an integer header field within [low, high] or raise GeometryError."""
    value = fields.get(key, "")
    if not re.fullmatch(r"[0-9]{1,16}", value) or not low <= int(value) <= high:
        raise GeometryError(
            f"The MetaImage {key} = {value[:30]!r} must be an integer from {low} to {high}."
        )
    return int(value)
