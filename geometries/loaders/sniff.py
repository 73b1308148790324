"""Recognising a file format from its first bytes, for uploads that come without a name."""

from __future__ import annotations

import re

from ..npyfile import NPY_MAGIC

__all__ = ["sniff_format"]

_TIFF_MAGICS = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
_STL_RECORD = 50
_STL_HEADER = 84


def sniff_format(head: bytes, size: int) -> str | None:
    """Return the format name that the leading bytes ``head`` of a ``size``-byte file show."""
    if head.startswith(NPY_MAGIC):
        return "npy"
    if head.startswith(b"PK\x03\x04"):
        return "npz"
    if head.startswith(_TIFF_MAGICS):
        return "tiff"
    if head.startswith(b"MATLAB 5.0 MAT-file") or head.startswith(b"MATLAB 7.3 MAT-file"):
        return "mat"
    if head.startswith(b"NRRD000"):
        return "nrrd"
    if head.startswith(b"# vtk DataFile"):
        return "vtk"
    text = head.lstrip()
    if text.startswith((b"<?xml", b"<VTKFile")) and b'type="ImageData"' in head:
        return "vti"
    if _is_binary_stl(head, size):
        return "stl"
    if text[:5].lower() == b"solid" and (b"facet" in head.lower() or size < len(head) + 1):
        return "stl"
    if re.search(rb"^\s*NDims\s*=", head, re.MULTILINE) and b"ElementType" in head:
        return "mha"
    return None


def _is_binary_stl(head: bytes, size: int) -> bool:
    """True when the triangle count in an 84-byte STL header matches the file size."""
    if len(head) < _STL_HEADER:
        return False
    count = int.from_bytes(head[80:84], "little")
    return count > 0 and size == _STL_HEADER + _STL_RECORD * count
