"""Safe reading of NumPy ``.npy`` and ``.npz`` data from bytes.

``np.load`` trusts the header: a hostile header can declare a huge array (memory exhaustion) and
object arrays need pickle. Here the header is parsed first, the dtype must be a plain number
(or a short string where asked), the declared size is checked against a limit and against the
bytes actually present, and only then is the data wrapped. Nothing is ever unpickled.
"""

from __future__ import annotations

import io
import zipfile

import numpy as np

from .errors import GeometryError

__all__ = ["NPY_HEAD_BYTES", "NPY_MAGIC", "check_npy_header", "check_zip_methods", "read_npy",
           "read_npz"]

NPY_MAGIC = b"\x93NUMPY"
_NUMBER_KINDS = "biuf"
_HEADER_BUDGET = 65536
#: Most members an .npz may list (VoxelGeometry.save writes 7).
MAX_NPZ_ENTRIES = 64  # an .npy header is far shorter; bounds the first read


#: Bytes of a file enough to hold any .npy header this reader accepts (magic + length + text).
NPY_HEAD_BYTES = _HEADER_BUDGET + 16


def check_npy_header(
    head: bytes, *, max_items: int, kinds: str = _NUMBER_KINDS
) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Return (shape, fortran, dtype, data offset) of the ``.npy`` header at the start of
    ``head``, refusing pickles and over-large arrays: a file is checked before it is read."""
    if not head.startswith(NPY_MAGIC):
        raise GeometryError(
            "The data is not a .npy file (it lacks the NumPy magic bytes). "
            "Save arrays with numpy.save, or pass the right format=."
        )
    fp = io.BytesIO(head)
    shape, fortran, dtype = _read_header(fp)
    if dtype.hasobject or dtype.kind not in kinds or dtype.fields is not None:
        raise GeometryError(
            f"The .npy array has dtype {dtype}, which cannot hold a voxel image. "
            "Save a bool, integer or float array (object arrays are never unpickled)."
        )
    _check_dims(shape)
    count = int(np.prod(shape, dtype=object))
    if count > max_items:
        raise GeometryError(
            f"The .npy array has {count} elements, more than the limit of {max_items}. "
            "Crop or downsample the image first, or raise max_voxels=."
        )
    return shape, fortran, dtype, fp.tell()


def read_npy(data: bytes, *, max_items: int, kinds: str = _NUMBER_KINDS) -> np.ndarray:
    """Return the array stored in ``.npy`` bytes, refusing pickles and over-large arrays."""
    shape, fortran, dtype, offset = check_npy_header(
        data[:NPY_HEAD_BYTES], max_items=max_items, kinds=kinds
    )
    count = int(np.prod(shape, dtype=object))
    expected = count * dtype.itemsize
    if len(data) - offset != expected:
        raise GeometryError(
            f"The .npy header promises {expected} bytes of data but {len(data) - offset} "
            "follow it: the file is truncated or corrupted. Upload it again."
        )
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    return flat.reshape(shape, order="F" if fortran else "C")


def read_npz(
    data: bytes,
    *,
    max_items: int,
    names: tuple[str, ...],
    optional: tuple[str, ...] = (),
    item_bytes: dict[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """Return the named arrays of ``.npz`` bytes (numbers or short strings, no pickles).

    ``item_bytes`` caps the element size per array name, so that a small archive cannot
    declare, e.g., a float64 mask eight times the memory of the bool one it should hold.
    """
    _check_entry_count(data)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    # zipfile raises many exception types on malformed archives (BadZipFile, zlib.error,
    # NotImplementedError, struct.error, ...); for an upload they all mean "broken file".
    except Exception as exc:  # noqa: BLE001
        raise GeometryError(
            f"The data is not a readable .npz (zip) archive ({exc}). "
            "Use a file written by VoxelGeometry.save."
        ) from exc
    with archive:
        check_zip_methods(archive)
        present = set(archive.namelist())
        missing = [n for n in names if f"{n}.npy" not in present]
        if missing:
            raise GeometryError(
                f"The .npz archive lacks the arrays {missing}. "
                "Use a file written by VoxelGeometry.save (it stores solid, origin, ...)."
            )
        wanted = list(names) + [n for n in optional if f"{n}.npy" in present]
        caps = item_bytes or {}
        return {n: _read_member(archive, n, max_items, caps.get(n, 64)) for n in wanted}


def _check_entry_count(data: bytes) -> None:
    """Refuse archives whose directory lists more than MAX_NPZ_ENTRIES members.

    zipfile builds an object per directory entry before anything else: a 200 MB upload of
    empty entries would take gigabytes. The count sits in the end-of-directory record.
    """
    end = data.rfind(b"PK\x05\x06", max(0, len(data) - 65557))
    if end < 0 or end + 16 > len(data):
        return  # not a zip: ZipFile's own error says so
    entries = int.from_bytes(data[end + 10 : end + 12], "little")
    # zipfile walks the directory by its byte size, not the count: bound both.
    directory_bytes = int.from_bytes(data[end + 12 : end + 16], "little")
    if entries > MAX_NPZ_ENTRIES or directory_bytes > MAX_NPZ_ENTRIES * 1024:
        raise GeometryError(
            f"The .npz archive's directory lists {entries} members in {directory_bytes} bytes; "
            f"a geometry has fewer than {MAX_NPZ_ENTRIES} members. Use a file written by "
            "VoxelGeometry.save."
        )


#: zip methods whose reads are bounded: zipfile inflates bzip2 (12) and LZMA (14) members whole on
#: the first read, whatever size was asked for (a 2.9 kB upload took 4 GiB).
_BOUNDED_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}


def check_zip_methods(archive: zipfile.ZipFile) -> None:
    """Refuse members compressed with any method but stored or deflate (np.savez writes those)."""
    for info in archive.infolist():
        if info.compress_type not in _BOUNDED_METHODS:
            raise GeometryError(
                f"The .npz member {info.filename[:80]!r} uses zip compression method "
                f"{info.compress_type}; only stored and deflate (what numpy.savez and "
                "savez_compressed write) are read. Save the geometry again with VoxelGeometry.save."
            )


def _read_member(
    archive: zipfile.ZipFile, name: str, max_items: int, max_item_bytes: int
) -> np.ndarray:
    """Return one array of an open archive, reading no more than its checked header allows.

    The zip directory's sizes are claims; the member is stream-decompressed, its .npy header
    checked first, and reading stops at the size that header (within ``max_items``) implies.
    """
    try:
        with archive.open(f"{name}.npy") as member:
            head = member.read(_HEADER_BUDGET)
            fp = io.BytesIO(head)
            shape, _, dtype = _read_header(fp) if head.startswith(NPY_MAGIC) else ((), 0, None)
            if dtype is None:
                raise GeometryError(f"The array {name!r} in the .npz archive is not a .npy.")
            if dtype.itemsize > max_item_bytes and not dtype.hasobject:  # objects: see read_npy
                raise GeometryError(
                    f"The array {name!r} in the .npz archive has {dtype.itemsize}-byte elements "
                    f"({dtype}); at most {max_item_bytes} are allowed. Use VoxelGeometry.save."
                )
            _check_dims(shape)
            count = int(np.prod(shape, dtype=object))
            if count > max_items:
                raise GeometryError(
                    f"The array {name!r} in the .npz archive has {count} elements, more than "
                    f"the limit of {max_items}. Raise max_voxels= if the file is trusted."
                )
            budget = fp.tell() + count * dtype.itemsize + 1 - len(head)
            raw = head + member.read(max(budget, 0))
    except GeometryError:
        raise
    except Exception as exc:  # noqa: BLE001 - as above: any failure means a corrupted member
        raise GeometryError(
            f"The array {name!r} in the .npz archive is corrupted ({exc}). Save it again."
        ) from exc
    return read_npy(raw, max_items=max_items, kinds=_NUMBER_KINDS + "U")


def _check_dims(shape: tuple[int, ...]) -> None:
    """Refuse negative dimensions (numpy's header parser accepts them; reshape then fails)."""
    if any(n < 0 for n in shape):
        raise GeometryError(
            f"The .npy header declares the shape {shape}, with a negative size: the file is "
            "corrupted. Save the array again with numpy.save."
        )


def _read_header(fp: io.BytesIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Return (shape, fortran_order, dtype) from an .npy header."""
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(fp)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(fp)
    # The header is a Python literal parsed by numpy (tokenize, ast); malformed headers raise
    # ValueError, SyntaxError, tokenize.TokenError, ... - all "corrupted" for the user.
    except Exception as exc:  # noqa: BLE001
        raise GeometryError(
            f"The .npy header is corrupted ({exc}). Save the array again with numpy.save."
        ) from exc
    raise GeometryError(
        f"The .npy format version {version} is not supported. Save with numpy.save "
        "(version 1.0 or 2.0)."
    )
