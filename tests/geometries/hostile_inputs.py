"""Tiny generated files that crashed, hung or exhausted the server before the loader hardening.

Each builder returns the bytes of one hostile upload named in issue 16; the tests feed them to
``geometries.load`` (native readers run in the limited worker, so the test process survives).
"""

from __future__ import annotations

import gzip
import io
import struct
import zipfile

import numpy as np

_MHA_TEMPLATE = (
    "ObjectType = Image\nNDims = {ndims}\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
    "CompressedData = {compressed}\n{extra}ElementSpacing = 1 1 1\nDimSize = 4 5 6\n"
    "ElementType = {etype}\n{data_file}"
)


def mha(*, ndims: str = "3", etype: str = "MET_UCHAR", extra: str = "", compressed: str = "False",
        data_file: str = "ElementDataFile = LOCAL\n", body: bytes = bytes(120)) -> bytes:
    """A 4×5×6 MetaImage with the given header fields (defaults give a valid file)."""
    header = _MHA_TEMPLATE.format(
        ndims=ndims, etype=etype, extra=extra, compressed=compressed, data_file=data_file
    )
    return header.encode() + body


def passwd_mha() -> bytes:
    """The 222-byte style upload: an indented ElementDataFile naming /etc/passwd, decoy LOCAL."""
    return mha(data_file="  ElementDataFile = /etc/passwd\nElementDataFile = LOCAL\n")


def vti(*, whole: str = "0 3 0 4 0 5", components: str = "1", prefix: str = "",
        zlib_claim: int | None = None) -> bytes:
    """A 4×5×6 UInt8 .vti; ``zlib_claim`` makes its appended zlib block claim that many bytes."""
    compressor = ' compressor="vtkZLibDataCompressor"' if zlib_claim is not None else ""
    head = (
        '<?xml version="1.0"?>\n'
        f'<VTKFile type="ImageData" version="1.0" byte_order="LittleEndian" '
        f'header_type="UInt64"{compressor}>\n{prefix}'
        f'<ImageData WholeExtent="{whole}" Origin="0 0 0" Spacing="1 1 1">\n'
        f'<Piece Extent="{whole}"><PointData Scalars="s">'
        f'<DataArray type="UInt8" Name="s" NumberOfComponents="{components}" format="appended" '
        'offset="0"/></PointData></Piece></ImageData>\n<AppendedData encoding="raw">_'
    ).encode()
    values = bytes(120)
    if zlib_claim is None:
        blob = struct.pack("<Q", len(values)) + values
    else:
        import zlib

        packed = zlib.compress(values)
        blob = struct.pack("<QQQQ", 1, zlib_claim, zlib_claim, len(packed)) + packed
    return head + blob + b"\n</AppendedData></VTKFile>\n"


def looping_tiff() -> bytes:
    """A small TIFF whose second page directory points back at the first (an endless chain)."""
    pixels = bytes(16)
    def ifd(next_offset: int) -> bytes:
        tags = [(256, 3, 1, 4), (257, 3, 1, 4), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1),
                (273, 4, 1, 8), (277, 3, 1, 1), (278, 3, 1, 4), (279, 4, 1, 16)]  # fmt: skip
        body = struct.pack("<H", len(tags))
        body += b"".join(struct.pack("<HHII", *t) for t in tags)
        return body + struct.pack("<I", next_offset)
    first = 8 + len(pixels)
    second = first + len(ifd(0))
    return b"II*\x00" + struct.pack("<I", first) + pixels + ifd(second) + ifd(first)


def npz_bomb(megabytes: int = 64) -> bytes:
    """An .npz whose small 'solid' header is followed by ``megabytes`` MB of zeros (≈ 64 kB)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "|b1", "fortran_order": False, "shape": (4, 5, 6)}
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("solid.npy", "w", force_zip64=True) as member:
            member.write(header.getvalue())
            chunk = bytes(1 << 20)
            for _ in range(megabytes):
                member.write(chunk)
        for name, value in (("voxel_size", 1.0), ("origin", [0.0, 0.0, 0.0]), ("flow_axis", 0),
                            ("name", "bomb")):  # fmt: skip
            out = io.BytesIO()
            np.save(out, np.asarray(value))
            archive.writestr(f"{name}.npy", out.getvalue())
    return buffer.getvalue()


def gzip_nrrd_bomb(megabytes: int = 64) -> bytes:
    """A gzip NRRD declaring 4×5×6 bytes whose body inflates to ``megabytes`` MB."""
    header = b"NRRD0004\ntype: uint8\ndimension: 3\nsizes: 4 5 6\nencoding: gzip\n\n"
    return header + gzip.compress(bytes(megabytes << 20), compresslevel=1)


#: A .mat file the fuzz test made from scipy.io.savemat output (zlib-compressed variable, header
#: bytes mutated, then cut): SciPy 1.17.1's mio5 reader dies on it with SIGSEGV in about one load
#: of four, depending on the heap (a crash of the CI run on 2026-11-25).
_CRASHING_MAT = bytes.fromhex(
    "4d41544c414200022e30024d4154fe66696c6520506c6174666f72803a20706f7369782c2043726561746564"
    "206f6e3a20576564204e6f762001352030363a30383a32322032303236000000000000000000000000000000"
    "0000000000000000000000000000000000000080000000000000000000000000000000000001494d0f000000"
    "4d000000789c5d8b510a80300c4313a743617852c13ff1581ed140e2505b5e1ada740570892a66b1c0358926"
    "c6f89a3d5170ec0106f9134f91514f8fa80d497ec2fdee"
)


def crashing_mat() -> bytes:
    """A mutated MATLAB file that crashes SciPy's reader in-process now and then."""
    return _CRASHING_MAT
