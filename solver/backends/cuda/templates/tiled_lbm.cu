// Tiled sparse lattice-Boltzmann step: Algorithm 2 of Tomczak & Szafran (tiled-sparse-lbm-gpu).
//
// This file is a template: solver/backends/cuda/tiled_source.py fills its fields for one variant
// (lattice, precision, collision, fluid model, in-tile layout, kernel mode, tile edge: the parts
// of kernel_parts.py) and wraps everything in a namespace of its own, so that many variants can
// share one translation unit (the nvcc compile test) while NVRTC compiles just the one it needs.
// No headers are included: the source must compile unchanged under NVRTC and nvcc.
//
// Layout: f[copy][tile][i][slot], one data block of NPT values per (tile, direction), each value
// a store_t: the arithmetic type real, or the binary16 bits of S (f - w_i rho0) with float16
// storage (cuda/storage.py, solver/storage.py; decoded on load, rounded once on store,
// arithmetic in float). Or one copy updated in place by two alternating kernels in the AA
// pattern (cuda/streaming.py: fin == fout, so those kernels take the pointers without
// __restrict__); any storage works with either. Node n of a
// tile (XYZ order, n = x + A*y + A*A*z) stores direction i at slot_i(n); slot_i is XYZ, YXZ or
// zigzagNE (paper eq. 11-13) per direction. Per node, in XYZ order, one byte of node type
// (solver.node_types: 0 solid, 1 fluid, 2 + face velocity, 8 + face pressure) and, in boundary
// kernels, one byte of wall-velocity group; everything else of the boundary conditions sits in
// the small table bc (cuda/boundary.py): per face (ux, uy, uz, rho), then Ladd's term per
// direction for each way a link can hit a wall (27 out-of-domain codes, then one row per group).
//
// One thread per node, blockDim.x / NPT tiles per block (the tiles-per-block setting is a launch
// parameter). Steps per block: each warp copies the 3^D tile-map neighbourhood of its tile to
// shared memory (warps never straddle tiles, so __syncwarp suffices); the tile's threads resolve
// the source of every node of the tile plus a one-node halo: every thread a share of it when the
// whole halo lies inside the domain (fill_inner), else one x-pencil each with the periodic wrap
// per node, exactly as the NumPy reference, falling back to the global tile map for wrapped
// nodes (fill_pencil); ONE block barrier; solid nodes stop (but those of the sector fill below);
// fluid nodes pull with halfway bounce-back (plus Ladd's moving-wall term and the Zou-He
// reconstruction in boundary kernels), collide (BGK, TRT or MRT) and store coalesced.
//
// A halo source (src_t) is the source node's offset in a copy, tile * Q * NPT + XYZ index, so
// that in the XYZ layout its slot of direction i is the source plus i * NPT: a pull costs a
// select (bounce-back reads the node's own slot instead) and one wide multiply-add, with i * NPT
// the load's immediate offset. Sources are 32-bit unless a copy holds 2^31 values or more
// (tables.needs_wide_sources); negative values code walls and faces.
//
// Solid nodes (tile padding included) carry no physics; every backend keeps the rest equilibrium
// w_i rho0 there in both copies (solver/backends/base.py), which rest0..rest3 hold per weight
// class. In the XYZ layout a solid node whose 32-byte sector of the written copy also holds a
// fluid node stores that value into its own slots (sector fill: it runs the fluid path as a
// fluid node would and stores the rest value instead), so the sector is written whole: a partly
// written sector costs a DRAM read first (read-modify-write). The paper layout permutes slots
// per direction, so a sector there mixes other nodes.
namespace ${namespace} {

typedef ${real} real;
${storage_code}
typedef ${source} src_t;  // halo source: offset of a node in a copy, or a negative code

constexpr int D = ${d};            // spatial dimensions
constexpr int Q = ${q};            // discrete velocities
constexpr int A = ${a};            // tile edge in nodes
constexpr int NPT = ${npt};        // nodes per tile, A^D
constexpr int HE = A + 2;          // edge of the tile with its one-node halo
constexpr int HN = ${halo_nodes};  // nodes of the tile with halo, HE^D
constexpr int NB = ${neighbours};  // tiles in the 3^D neighbourhood
constexpr int MW = (NPT + 63) / 64;  // 64-bit words of a tile's fluid mask
// Halo fluid test from the fluid masks (one 8-byte load per neighbour tile and warp: float16
// storage, bound by instruction issue) or from the node types (one byte per halo node: fewer
// L2 bytes, what float32/float64 need; tables.halo_masks).
constexpr bool HALO_MASKS = ${halo_masks};
constexpr int MODE = ${mode};      // 0 full step, 1 propagation only, 2 read/write only, 3 swap
constexpr bool HALO = ${halo};     // resolve halo sources (not needed by in-place local steps)
constexpr bool SKIP_HALO_CORNERS = ${skip_corners};  // no velocity reaches the halo corners
enum : int {  // bc table (boundary kernels): an enum, so that other kernels need not use them
    FACE_PARAMS = 24,  // bc[4 f + k]: (ux, uy, uz, rho) of face f
    WALL_ROWS = 27,    // Ladd rows 0..26: out-of-domain codes; 27 + g: wall group g
    NO_WALL = 255,     // wall group of nodes with no moving wall next to them
};

// Slot of XYZ node n inside a direction's data block (paper eq. 11-13).
__device__ __forceinline__ int slot_xyz(int n) { return n; }

__device__ __forceinline__ int slot_yxz(int n)
{
    const int x = n % A, y = (n / A) % A;
    return n - x - A * y + y + A * x;
}

__device__ __forceinline__ int slot_zigzag(int n)  // defined for A == 4, D == 3 only
{
    const int x = n & 3, y = (n >> 2) & 3, z = n >> 4;
    return 2 * (x + 3 * y + ((x + 1) & 4) * (3 - y)) + (z & 1) + 16 * (z & 2);
}

// Halo source of node `local` (XYZ index) of tile `tile`: its offset in a copy (see above).
__device__ __forceinline__ src_t node_source(int tile, int local)
{
    return (src_t)tile * (Q * NPT) + local;
}

// Whether node `local` of a tile is fluid (any non-solid type), from the word of the tile's
// fluid mask that holds it: bit local % 64 (solver/backends/cuda/tables.py fluid_masks).
__device__ __forceinline__ bool is_fluid(unsigned long long word, int local)
{
    return (word >> ((unsigned)local % 64u)) & 1ull;
}

// Where halo coordinate k (0..HE-1) along axis ax of the tile at tile-grid coordinates t
// lands after the per-node periodic wrap: tile-grid coordinate tt and in-tile coordinate of the
// source node; ok is false outside a non-periodic face (halfway bounce-back there), and side
// says which face: 1 below (min face), 2 above (max face). One wrap covers every source of a
// fluid node (x +- 1); positions still outside after it only neighbour tile padding (domains
// narrower than a tile) and are marked not ok, never read.
struct AxisSource {
    int tt, local;
    bool ok;
    int side;
};

__device__ __forceinline__ AxisSource axis_source(
    int ax, int k, const int (&t)[3], const int (&size)[3], const int (&off)[3], int periodic)
{
    int x = t[ax] * A - off[ax] + k - 1;
    if ((periodic >> ax) & 1) {
        x += (x < 0) ? size[ax] : 0;
        x -= (x >= size[ax]) ? size[ax] : 0;
    }
    const bool ok = x >= 0 && x < size[ax];
    const unsigned s = (unsigned)(x + off[ax]);
    const int tt = (int)(s / A);
    return {tt, (int)(s - (unsigned)tt * A), ok, x < 0 ? 1 : (x >= size[ax] ? 2 : 0)};
}

// Sources of one x-pencil of the halo (the HE halo nodes at fixed y, z): the offset in a copy
// of the node each pulls from, -1 when that node is solid or in an empty tile, or -2 - code
// outside a non-periodic face, code = sum over axes of side * 3^axis (the faces the link
// crosses, for Ladd's term). The y, z part is resolved once per pencil; a
// source tile outside the 3^D neighbourhood (periodic wrap) comes from the global tile map.
__device__ __forceinline__ void fill_pencil(
    int pencil, src_t* s_src, const int (&t)[3], const int* s_nbr,
    const int* __restrict__ tile_map, const unsigned long long* __restrict__ fluid_masks,
    const unsigned char* __restrict__ types, const int (&grid)[3], const int (&size)[3], const int (&off)[3], int periodic)
{
    bool ok = true, far = false;
    int node = 0, nbr = 0, flat = 0, edges = 0, stride = A, nstride = 3, fstride = grid[0];
    int p = pencil, code = 0, cstride = 3;
#pragma unroll
    for (int ax = 1; ax < D; ++ax) {
        const int k = p % HE;
        p /= HE;
        edges += (k == 0 || k == HE - 1) ? 1 : 0;
        const AxisSource a = axis_source(ax, k, t, size, off, periodic);
        const int dt = a.tt - t[ax];
        ok = ok && a.ok;
        far = far || dt < -1 || dt > 1;
        node += a.local * stride;
        nbr += (dt + 1) * nstride;
        flat += a.tt * fstride;
        code += a.side * cstride;
        cstride *= 3;
        stride *= A;
        nstride *= 3;
        fstride *= grid[ax];
    }
#pragma unroll
    for (int k = 0; k < HE; ++k) {
        const AxisSource a = axis_source(0, k, t, size, off, periodic);
        const int dt = a.tt - t[0];
        const bool corner = SKIP_HALO_CORNERS && edges == D - 1 && (k == 0 || k == HE - 1);
        src_t src = -1;
        if (!corner && !(ok && a.ok)) {
            src = -2 - (code + a.side);
        } else if (!corner) {
            const bool wrapped = far || dt < -1 || dt > 1;
            const int tile = wrapped ? tile_map[flat + a.tt] : s_nbr[nbr + dt + 1];
            const int local = node + a.local;
            const bool fluid = HALO_MASKS
                ? is_fluid(fluid_masks[(flat + a.tt) * MW + local / 64], local)
                : tile >= 0 && types[tile * NPT + local] != 0;
            if (fluid) src = node_source(tile, local);
        }
        s_src[k + HE * pencil] = src;
    }
}

// Whether the whole halo of the tile at tile-grid coordinates t lies inside the domain on every
// axis: no node of it is outside a face or wrapped, so fill_pencil's general path would give
// every halo node the plain tile-map neighbour. Such inner tiles take fill_inner instead.
__device__ __forceinline__ bool halo_inside(
    const int (&t)[3], const int (&size)[3], const int (&off)[3])
{
    bool inside = true;
#pragma unroll
    for (int ax = 0; ax < D; ++ax)
        inside = inside && t[ax] * A - 1 >= off[ax] && t[ax] * A + A < size[ax] + off[ax];
    return inside;
}

// Sources of the halo of an inner tile (halo_inside): node e of the halo (XYZ order, edge HE)
// is node `local` of the neighbour tile s_nbr[nb], with no per-node wrap or face logic (the
// same values as fill_pencil, which stays for the tiles at the domain's edge). Thread n fills
// halo column n along the last axis (HN / HE columns, HE entries each): only the column's
// first D - 1 coordinates are decoded at run time; along the column the neighbour and the
// in-tile offset are compile-time constants of the unrolled loop. (Every NPT-th entry per
// thread, decoded in all D axes, kept every lane busy but cost 4x the instructions.)
__device__ __forceinline__ void fill_inner(
    int n, src_t* s_src, const int* s_nbr, const unsigned long long* s_mask,
    const unsigned char* __restrict__ types)
{
    constexpr int COLUMNS = HN / HE;
    static_assert(COLUMNS <= NPT, "one halo column per thread");
    if (n >= COLUMNS) return;
    int c = n, nb = 0, local = 0, nstride = 1, stride = 1;
#pragma unroll
    for (int ax = 0; ax < D - 1; ++ax) {
        const int k = c % HE;
        c /= HE;
        const int side = (k + A - 1) / A;  // 0 the tile below, 1 this tile, 2 the one above
        nb += side * nstride;
        local += (k + A - 1 - side * A) * stride;
        nstride *= 3;
        stride *= A;
    }
    if (!HALO_MASKS) {
#pragma unroll
        for (int k = 0; k < HE; ++k) {
            const int side = (k + A - 1) / A;
            const int tile = s_nbr[nb + side * nstride];
            const int at = local + (k + A - 1 - side * A) * stride;
            // Loaded whatever the tile (tile 0 stands in for an empty one): no branch per entry.
            const bool fluid = types[(tile < 0 ? 0 : tile) * NPT + at] != 0;
            s_src[n + COLUMNS * k] = (tile >= 0 && fluid) ? node_source(tile, at) : (src_t)-1;
        }
        return;
    }
    // The column meets three tiles (below, this one, above); their indices and, with one mask
    // word per tile, their fluid bits shifted to this column's first node are read once: the
    // stores into s_src below could alias shared memory for the compiler. (Hoisting the tile
    // indices alone slowed the node-type path above by 1-2 % in float32/float64, H100.)
    int tile3[3];
    unsigned long long bits3[3];
#pragma unroll
    for (int s = 0; s < 3; ++s) {
        tile3[s] = s_nbr[nb + s * nstride];
        bits3[s] = MW == 1 ? s_mask[nb + s * nstride] >> local : 0ull;
    }
#pragma unroll
    for (int k = 0; k < HE; ++k) {
        const int side = (k + A - 1) / A;
        const int along = k + A - 1 - side * A;  // a constant of the unrolled loop
        const int at = local + along * stride;
        // An empty tile's mask is 0 (s_mask), so no test of the tile per entry.
        const bool fluid = MW == 1
            ? ((bits3[side] >> (along * stride)) & 1ull) != 0
            : is_fluid(s_mask[(nb + side * nstride) * MW + at / 64], at);
        s_src[n + COLUMNS * k] = fluid ? node_source(tile3[side], at) : (src_t)-1;
    }
}

extern "C" __global__ void ${launch_bounds}${kernel}(
    const store_t* ${restrict} fin, store_t* ${restrict} fout,
    const unsigned char* __restrict__ types, const int* __restrict__ tiles,
    const int* __restrict__ tile_map, const unsigned long long* __restrict__ fluid_masks,
    const unsigned char* __restrict__ wall_group,
    // Only tiles [first_tile, n_tiles) are stepped (a distributed rank launches its boundary
    // and interior tile ranges separately); any tile of tile_map may be read.
    const real* __restrict__ bc, const int first_tile, const int n_tiles,
    const int gx, const int gy, const int gz, const int nx, const int ny, const int nz,
    const int ox, const int oy, const int oz, const int periodic,
    const real fx, const real fy, const real fz,
    const real rest0, const real rest1, const real rest2, const real rest3,  // w_k rho0, k = |c|^2
    // Collision constants, each rounded once from double on the host (tables.physics_args),
    // then, with float16 storage, the shifts and scale of solver.storage and the two-slot step
    // counter fs_seed (cuda/storage.py).
${collision_params})
{
${storage_prologue}    extern __shared__ int lbm_smem[];
    const int n = threadIdx.x % NPT;
    const int local_tile = threadIdx.x / NPT;
    const int tile = first_tile + blockIdx.x * (blockDim.x / NPT) + local_tile;
    const size_t base = (size_t)tile * (Q * NPT);

    if (MODE == 2) {  // read/write only: same node, same slot, no neighbour access
        if (tile >= n_tiles || types[tile * NPT + n] == 0) return;
${readwrite}
        return;
    }

    // Halo sources first: src_t may be 8 bytes, so it takes the aligned start; then per warp
    // the fluid masks (HALO_MASKS only; 8 bytes each, HN src_t per tile keep them aligned) and
    // the tile indices of the 3^D neighbourhood.
    const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
    src_t* s_src = reinterpret_cast<src_t*>(lbm_smem) + local_tile * HN;
    unsigned long long* s_masks = reinterpret_cast<unsigned long long*>(
        reinterpret_cast<src_t*>(lbm_smem) + (blockDim.x / NPT) * HN);
    unsigned long long* s_mask = s_masks + warp * NB * MW;
    int* s_nbr = reinterpret_cast<int*>(s_masks + (HALO_MASKS ? warps * NB * MW : 0))
                 + warp * NB;
    const bool active = tile < n_tiles;
    if (HALO && active) {
        const int grid[3] = {gx, gy, gz};
        const int size[3] = {nx, ny, nz};
        const int off[3] = {ox, oy, oz};
        int t[3] = {0, 0, 0};
#pragma unroll
        for (int ax = 0; ax < D; ++ax) t[ax] = tiles[tile * D + ax];
        const int lane = threadIdx.x % 32;
        if (lane < NB) {  // this warp's copy of the 3^D tile-map neighbourhood
            int k = lane, flat = 0, stride = 1;
            bool inside = true;
#pragma unroll
            for (int ax = 0; ax < D; ++ax) {
                const int c = t[ax] + k % 3 - 1;
                k /= 3;
                inside = inside && c >= 0 && c < grid[ax];
                flat += c * stride;
                stride *= grid[ax];
            }
            // Both by tile-grid cell, so the two loads do not wait for each other.
            s_nbr[lane] = inside ? tile_map[flat] : -1;
#pragma unroll
            for (int w = 0; w < (HALO_MASKS ? MW : 0); ++w)
                s_mask[lane * MW + w] = inside ? fluid_masks[flat * MW + w] : 0ull;
        }
        __syncwarp();
        // Pencils spread evenly over the tile's warps: fewer idle lanes than one per thread.
        constexpr int PENCILS = HN / HE, WARPS = NPT / 32;
        constexpr int PER_WARP = (PENCILS + WARPS - 1) / WARPS;
        static_assert(PER_WARP <= 32, "a warp fills at most 32 halo pencils");
        const int pencil = (n / 32) * PER_WARP + lane;
        if (halo_inside(t, size, off))  // the same for the whole tile: no divergence
            fill_inner(n, s_src, s_nbr, s_mask, types);
        else if (lane < PER_WARP && pencil < PENCILS)
            fill_pencil(pencil, s_src, t, s_nbr, tile_map, fluid_masks, types, grid, size, off,
                        periodic);
    }
    if (HALO) __syncthreads();  // the one block barrier: halo sources are read across warps
    if (!active) return;

    int centre = 0;
    {
        int m = n, stride = 1;
#pragma unroll
        for (int ax = 0; ax < D; ++ax) {
            centre += (m % A + 1) * stride;
            m /= A;
            stride *= HE;
        }
    }
    // Solid node (tile padding included): no further work, unless the sector fill keeps it. The
    // node's own halo entry cannot tell: with periodic wrap, padding just past the last node is
    // a valid source. All lanes of a warp are alive here (inactive tiles left as whole warps).
    const int type = types[tile * NPT + n];
${solid_exit}

    // Pull: f_i from x - c_i, or f_opp(i) of this node (halfway bounce-back). Only integer
    // indices depend on the branch; every thread then issues the same loads.
${gather}
${zou_he}
${collide}
}

}  // namespace ${namespace}
