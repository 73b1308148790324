"""CUDA source of the moment-storage probe kernel on compact tiles (issue 34; not production).

Storage: :class:`~solver.backends.cuda.compact.CompactTiling` with ten "directions": moment k
of a tile's fluid node of rank r sits at ``10 * base + k * padded + r`` (moment order of
``moment_reference.MOMENTS``). One launch is one whole step of ``moment_reference``'s scheme:

1. the tile's threads locate its 6^3 halo once (the compact kernels' code of
   ``templates/compact_probe.cu``, compiled here with Q = 10: the inner-tile column fill or
   the general per-entry search) and copy the ten moments of every fluid halo node (the 8
   corners skipped: D3Q19 never reads them) into shared memory as ``real``;
2. each fluid node rebuilds the 19 populations it pulls from the staged moments (a pull from a
   non-fluid node rebuilds its own opposite population: halfway bounce-back), takes their
   moments, collides them (incompressible, Guo force) and stores its ten moments.

float16 storage keeps ``SCALE`` times each moment as binary16 (round to nearest even), decoded
to float in shared memory; float32/float64 store the arithmetic type. The kernel takes the
compact kernels' arguments (``fin, fout, masks, base, tiles, tile_map`` and 11 ints) and the
reals ``fx, fy, fz, omega`` (float16: then an unused ``unsigned int*``, so the g++ emulator of
``tests/solver/compact_emulator.py`` launches it unchanged).
"""

from __future__ import annotations

import sys
from pathlib import Path
from string import Template

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from solver.backends.cuda.compact_source import halo_text  # noqa: E402
from solver.backends.cuda.storage import storage_code  # noqa: E402
from solver.lattice import get_lattice  # noqa: E402

__all__ = ["N_MOMENTS", "SCALE", "kernel_name", "kernel_source", "shared_bytes", "value_dtype",
           "arith_dtype"]

_TEMPLATE = ROOT / "solver" / "backends" / "cuda" / "templates" / "compact_probe.cu"
LAT = get_lattice("D3Q19")
N_MOMENTS = 10
#: float16 storage keeps SCALE * moment (moments of slow flows are ~1e-2..1e-6: scaled up,
#: they stay out of binary16's subnormal range).
SCALE = 1024.0
STORAGES = ("float32", "float64", "float16")
_HE = 6
_HN = _HE**3


def arith_dtype(storage: str) -> str:
    """NumPy dtype name of the kernel's arithmetic (float16 storage: float32)."""
    return "float64" if storage == "float64" else "float32"


def value_dtype(storage: str) -> str:
    """NumPy dtype of one stored value (float16 storage: the binary16 bits, uint16)."""
    return {"float32": "float32", "float64": "float64", "float16": "uint16"}[storage]


#: Moment layouts: per tile one block per moment ('soa': moment k of rank r at ``10 base +
#: k padded + r``) or the ten moments of a node side by side ('aos': ``10 (base + r) + k``).
LAYOUTS = ("soa", "aos")


def kernel_name(storage: str, pad: int = 1, inner: bool = True, layout: str = "soa") -> str:
    """Name of the probe kernel of one storage, padding, halo code and layout."""
    return f"lbm_moments_{layout}_{storage}_p{pad}" + ("_i" if inner else "")


def _real_bytes(storage: str) -> int:
    return 8 if storage == "float64" else 4


def shared_bytes(tiles_per_block: int, storage: str, layout: str = "soa") -> int:
    """Dynamic shared memory of a block: per tile 27 masks (8 B), 27 bases (4 B), the located
    halo (2 ints per halo node), then (8-byte aligned) ten reals per halo node ('aos': after
    the pulls, the tile's new moments, stored from there in whole warps). ``layout`` does not
    change it."""
    head = tiles_per_block * (27 * 12 + 2 * 4 * _HN)
    head = -(-head // 8) * 8
    return head + tiles_per_block * N_MOMENTS * _HN * _real_bytes(storage)


def _lit(x: float) -> str:
    return repr(float(x))


def _helpers(storage: str, pad: int, inner: bool, layout: str) -> str:
    """The compact kernels' helpers (halo location): with Q = 10 ('soa': a located node's
    first value ``10 base + rank``) or Q = 1 ('aos': its slot ``base + rank``)."""
    text = _TEMPLATE.read_text()
    text = text[:text.index('extern "C"')]
    return Template(text).substitute(
        namespace=kernel_name(storage, pad, inner, layout),
        real="double" if storage == "float64" else "float",
        storage_code=storage_code("float16" if storage == "float16" else "auto"),
        q=N_MOMENTS if layout == "soa" else 1, pad=pad, halo="true", offset="int",
        inner="true" if inner else "false",
        corners="false", **halo_text())


def _pull(i: int) -> list[str]:
    """Lines computing g<i> (population deviation f_i - w_i) arriving at this node."""
    c = LAT.c[i]
    w = LAT.w[i]
    if not any(c):  # rest population: the node's own, rebuilt: w (drho - 3/2 tr A) = w P
        return [f"    const real g{i} = {_lit(w)} * o_ptr[0];"]
    shift = int(c[0] + 6 * c[1] + 36 * c[2])
    lines = [f"    real g{i};", "    {",
             f"        const int h = hn - ({shift});",
             "        const bool fluid = s_halo[h] >= 0;",
             "        const real s = fluid ? (real)1 : (real)-1;  // bounce-back: c -> -c",
             "        const real* p = fluid ? s_mom + h : o_ptr;"]
    # f_i - w_i = w [drho + 3 c.j + 9/2 (sum_ab c_a c_b A_ab - tr A / 3)]
    #           = w [P + 3 c.j + 9/2 sum_ab c_a c_b A_ab], P = drho - 3/2 tr A (staged)
    cj = " + ".join(f"{'' if c[a] > 0 else '-'}p[{1 + a} * HN]" for a in range(3) if c[a])
    diag = [a for a in range(3) if c[a]]
    quad = " + ".join(f"p[{4 + a} * HN]" for a in diag)
    off = {(0, 1): 7, (0, 2): 8, (1, 2): 9}
    if len(diag) == 2:
        a, b = diag
        sign = "+" if c[a] * c[b] > 0 else "-"
        quad += f" {sign} (real)2 * p[{off[(a, b)]} * HN]"
    lines += [f"        g{i} = {_lit(w)} * (p[0] + s * (real)3 * ({cj}) "
              f"+ (real)4.5 * ({quad}));", "    }"]
    return lines


def _collide(storage: str, layout: str) -> list[str]:
    """Moments of the g's, collision, stores ('aos': into shared memory, stored later)."""
    q = LAT.q
    terms = lambda coef: " + ".join(  # noqa: E731
        (f"g{i}" if k == 1 else f"-g{i}") for i in range(q) for k in [coef(i)] if k)
    c = LAT.c
    lines = [f"    const real drho = {terms(lambda i: 1)};"]
    for a, name in enumerate("xyz"):
        lines.append(f"    const real j{name} = {terms(lambda i, a=a: int(c[i][a]))};")
    for a, b in ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)):
        n = "xyz"[a] + "xyz"[b]
        s = terms(lambda i, a=a, b=b: int(c[i][a] * c[i][b]))
        lines.append(f"    const real p{n} = {s}" + (" - drho * (real)(1.0 / 3.0);" if a == b
                                                       else ";"))
    lines += ["    const real ux = jx + (real)0.5 * fx, uy = jy + (real)0.5 * fy, "
              "uz = jz + (real)0.5 * fz;",
              "    const real keep = (real)1 - omega, half = (real)1 - (real)0.5 * omega;"]
    out = ["drho", "jx + fx", "jy + fy", "jz + fz"]
    for a, b in ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)):
        n, ua, ub, fa, fb = ("xyz"[a] + "xyz"[b], "u" + "xyz"[a], "u" + "xyz"[b],
                             "f" + "xyz"[a], "f" + "xyz"[b])
        out.append(f"keep * p{n} + omega * {ua} * {ub} + half * ({ua} * {fb} + {ub} * {fa})")
    for k, value in enumerate(out):
        if layout == "aos":
            lines.append(f"    r{k} = {value};")
        else:
            lines.append(f"    fout[own + {k} * stride] = {_encode(storage, value)};")
    return ["    " + line for line in lines]


def _encode(storage: str, value: str) -> str:
    """C expression: the stored form (store_t) of a real moment."""
    return (f"float_to_half_bits((float)({value}) * {_lit(SCALE)}f)" if storage == "float16"
            else f"({value})")


_KERNEL = r"""
// Two stored values side by side: one vector load ('aos': a node's ten values start on
// 10 values, so on 8 bytes in float32, 4 in float16, 16 in float64).
struct alignas(2 * sizeof(store_t)) Two {
    store_t a, b;
};

extern "C" __global__ void ${kernel}(
    const store_t* __restrict__ fin, store_t* __restrict__ fout,
    const mask_t* __restrict__ masks, const int* __restrict__ base,
    const int* __restrict__ tiles, const int* __restrict__ tile_map,
    int n_tiles, int gx, int gy, int gz, int sizex, int sizey, int sizez,
    int offx, int offy, int offz, int periodic,
    const real fx, const real fy, const real fz, const real omega${seed})
{
    extern __shared__ int lbm_smem[];
    const int T = blockDim.x / NPT;
    const int n = threadIdx.x % NPT;
    const int local_tile = threadIdx.x / NPT;
    const int tile = blockIdx.x * T + local_tile;
    mask_t* s_mask = reinterpret_cast<mask_t*>(lbm_smem) + local_tile * NB;
    int* s_base = reinterpret_cast<int*>(reinterpret_cast<mask_t*>(lbm_smem) + T * NB)
                  + local_tile * NB;
    int* s_halo = reinterpret_cast<int*>(reinterpret_cast<mask_t*>(lbm_smem) + T * NB)
                  + T * NB + local_tile * 2 * HN;
    const int head = ((T * (NB * 12 + 2 * 4 * HN)) + 7) & ~7;  // bytes before the moments
    real* s_mom = reinterpret_cast<real*>(reinterpret_cast<char*>(lbm_smem) + head)
                  + local_tile * M * HN;
    const bool active = tile < n_tiles;
    int t[3] = {0, 0, 0};
    if (active) {
        t[0] = tiles[3 * tile];
        t[1] = tiles[3 * tile + 1];
        t[2] = tiles[3 * tile + 2];
        if (n < NB) {
            const int u = t[0] + n % 3 - 1, v = t[1] + (n / 3) % 3 - 1, w = t[2] + n / 9 - 1;
            const bool in = u >= 0 && u < gx && v >= 0 && v < gy && w >= 0 && w < gz;
            const int idx = in ? tile_map[u + gx * (v + gy * w)] : -1;
            s_mask[n] = idx >= 0 ? masks[idx] : 0ull;
            s_base[n] = idx >= 0 ? base[idx] : 0;
        }
    }
    __syncthreads();
    if (active) {  // locate the halo (tile nodes included) once
        if (INNER && halo_inside(t[0], t[1], t[2], sizex, sizey, sizez, offx, offy, offz)) {
            fill_inner(n, s_mask, s_base, s_halo);
        } else {
            fill_general(n, NPT, t[0], t[1], t[2], s_halo, s_mask, s_base, masks, base,
                         tile_map, gx, gy, sizex, sizey, sizez, offx, offy, offz, periodic);
        }
    }
    __syncthreads();
    if (active) {  // stage the moments of the fluid halo nodes (corners are never read)
        for (int h = n; h < HN; h += NPT) {
            const int hx = h % HE, hy = (h / HE) % HE, hz = h / (HE * HE);
            const bool corner = (hx == 0 || hx == HE - 1) && (hy == 0 || hy == HE - 1)
                                && (hz == 0 || hz == HE - 1);
            if (corner) continue;
            const int at0 = s_halo[h];
            if (at0 < 0) continue;
${stage}
        }
    }
    __syncthreads();
    const mask_t mine = active ? s_mask[13] : 0ull;
    const bool fluid = (mine >> n) & 1ull;
    const int stride = padded(mine);
    const int rank = __popcll(mine & ((1ull << n) - 1ull));
    const int own = Q * (active ? s_base[13] : 0) + rank;
    (void)stride;
    (void)own;
${results}
    if (fluid) {
        const int x = n & 3, y = (n >> 2) & 3, z = n >> 4;
        const int hn = (x + 1) + HE * (y + 1) + HE * HE * (z + 1);  // the node in the halo
        const real* o_ptr = s_mom + hn;  // the node's own moments
${body}
    }
${store}
}

}  // namespace ${namespace}
"""

#: Staging one halo node: its ten moments, the first replaced by P = drho - 3/2 tr A (the
#: part of every rebuilt population that does not depend on its direction: fewer shared loads
#: per pull).
_STAGE = {
    "soa": """            const int pc = s_halo[HN + h];
            real v[M];
#pragma unroll
            for (int k = 0; k < M; ++k) v[k] = ${dec(fin[at0 + k * pc])};""",
    "aos": """            const Two* src = reinterpret_cast<const Two*>(fin + M * at0);
            real v[M];
#pragma unroll
            for (int k = 0; k < M / 2; ++k) {
                const Two two = src[k];
                v[2 * k] = ${dec(two.a)};
                v[2 * k + 1] = ${dec(two.b)};
            }""",
}
_STAGE_END = """
            v[0] -= (real)1.5 * (v[4] + v[5] + v[6]);
#pragma unroll
            for (int k = 0; k < M; ++k) s_mom[k * HN + h] = v[k];"""

#: 'aos': after every node has collided, the tile's threads store its contiguous range of
#: ten values per fluid node in whole warps.
_AOS_STORE = """    __syncthreads();  // every node has pulled: the staged moments make room
    if (fluid) {
${keep}
    }
    __syncthreads();
    if (active) {
        store_t* dst = fout + M * s_base[13];
        for (int v = n; v < M * __popcll(mine); v += NPT) dst[v] = ${enc};
    }"""


def _decode(storage: str, stored: str) -> str:
    """C expression: the real moment of a stored value."""
    if storage == "float16":
        return f"half_bits_to_float({stored}) * {_lit(1 / SCALE)}f"
    return stored


def kernel_source(storage: str = "float32", pad: int = 1, inner: bool = True,
                  layout: str = "soa") -> str:
    """CUDA source of the probe kernel ``kernel_name(storage, pad, inner, layout)``."""
    if storage not in STORAGES:
        raise ValueError(f"Unknown storage {storage!r}; use one of {STORAGES}.")
    if layout not in LAYOUTS:
        raise ValueError(f"Unknown layout {layout!r}; use one of {LAYOUTS}.")
    if pad < 1 or pad & (pad - 1) or (layout == "aos" and pad != 1):
        raise ValueError(f"pad must be a power of two >= 1 ('aos': 1), got {pad}.")
    name = kernel_name(storage, pad, inner, layout)
    body = ["    " + line for i in range(LAT.q) for line in _pull(i)] + _collide(storage, layout)
    stage = _STAGE[layout] + _STAGE_END
    for stored in ("fin[at0 + k * pc]", "two.a", "two.b"):
        stage = stage.replace("${dec(" + stored + ")}", _decode(storage, stored))
    keep = "\n".join(f"        s_mom[rank * M + {k}] = r{k};" for k in range(N_MOMENTS))
    store = (_AOS_STORE.replace("${enc}", _encode(storage, "s_mom[v]")).replace("${keep}", keep)
             if layout == "aos" else "")
    results = ("    real " + ", ".join(f"r{k} = 0" for k in range(N_MOMENTS)) + ";"
               if layout == "aos" else "")
    kernel = Template(_KERNEL).substitute(
        kernel=name, namespace=name, body="\n".join(body), stage=stage, store=store,
        results=results,
        seed=",\n    unsigned int* fs_seed" if storage == "float16" else "")
    return (_helpers(storage, pad, inner, layout)
            + f"constexpr int M = {N_MOMENTS};  // moments a node\n"
            + f"constexpr bool AOS = {'true' if layout == 'aos' else 'false'};\n" + kernel)


def encode(m, storage: str):
    """Stored values (``value_dtype``) of moments (float64)."""
    import numpy as np

    if storage == "float16":
        return (np.asarray(m) * SCALE).astype(np.float16).view(np.uint16)
    return np.asarray(m, dtype=storage)


def decode(values, storage: str):
    """Moments (float64) of stored values."""
    import numpy as np

    if storage == "float16":
        return np.asarray(values).view(np.float16).astype(np.float64) / SCALE
    return np.asarray(values, dtype=np.float64)


def aos_order(compact):
    """int64 (10 n_slots,): the 'soa' index of each 'aos' value (pad 1: slots = nodes)."""
    import numpy as np

    slot = np.arange(compact.n_slots)
    tile = np.repeat(np.arange(compact.tiling.n_tiles), compact.padded)
    rank = slot - compact.base[tile]
    k = np.arange(N_MOMENTS)[None, :]
    return (N_MOMENTS * compact.base[tile][:, None] + k * compact.padded[tile][:, None]
            + rank[:, None]).ravel()


def pack(compact, grid, m, storage: str, layout: str = "soa"):
    """Compact array (10 n_slots,) of moments m (10, n_fluid) of ``grid`` (a
    ``moment_reference.MomentGrid`` of the same mask as ``compact``'s tiling); padding 0."""
    import numpy as np

    dense = np.moveaxis(grid.to_grid(m, fill=0.0), 0, -1)           # (nx, ny, nz, 10)
    tiled = compact.tiling.gather(dense, fill=0.0).transpose(0, 2, 1)  # (n_tiles, 10, 64)
    soa = compact.pack(np.ascontiguousarray(tiled))
    return encode(soa if layout == "soa" else soa[aos_order(compact)], storage)


def unpack(compact, grid, values, storage: str, layout: str = "soa"):
    """Moments (10, n_fluid), float64, of a compact array of stored values."""
    import numpy as np

    values = decode(values, storage)
    if layout == "aos":
        soa = np.empty_like(values)
        soa[aos_order(compact)] = values
        values = soa
    tiled = compact.unpack(values, N_MOMENTS)                        # (n_tiles, 10, 64)
    dense = compact.tiling.scatter(np.ascontiguousarray(tiled.transpose(0, 2, 1)))
    return dense[tuple(grid.nodes.T)].T
