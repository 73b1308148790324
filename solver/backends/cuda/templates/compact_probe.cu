// Compact-addressing kernel: the pull of a tiled step (propagation probe) or the whole step (pull
// and BGK/TRT/MRT collision with Guo forcing, the tiled kernel's code) on storage that holds
// only the fluid nodes of each tile (issue 20: throughput that follows the fluid, not the tiles).
//
// A template: solver/backends/cuda/compact_source.py fills it per lattice, precision, storage,
// padding and offset type (${offset}: long long in the wide kernels, copies of 2^31+ values).
// A stored value is a store_t: the arithmetic type, or with float16 storage the binary16 bits
// of the tiled kernel (solver/backends/cuda/storage.py: decoded on load, rounded stochastically
// on store with random bits keyed by the node's tiled identity tile * 64 + n and the step
// counter fs_seed, exactly as the tiled kernel draws them).
//
// Storage (one copy): tile t owns the values [Q * base[t], Q * (base[t] + P_t)), P_t = its fluid
// count popc(mask[t]) rounded up to PAD; direction i of its fluid node of rank r (the number of
// fluid nodes before it in XYZ order, popc(mask & ((1 << n) - 1))) sits at
//     Q * base[t] + i * P_t + r.
// mask[t] is the tile's 64-bit occupancy (bit n = XYZ node n is fluid); base is the prefix sum
// of P_t. No per-node index list: a node's slot is two popcounts away from the mask. PAD = 1
// packs the fluid nodes exactly; PAD = the values per 32-byte sector starts every direction
// block on a sector, so no sector is shared by two blocks (written whole by one warp).
//
// One thread per node of the tile (solid ones stop after the barrier), blockDim.x / NPT tiles
// per block. The masks and bases of the 3^3 tile neighbourhood are copied to shared memory;
// a source across a periodic face whose tile lies outside it reads the global tables (the same
// per-node wrap as the tiled kernel). A source that is solid, in an empty tile or outside a
// non-periodic face gives halfway bounce-back: the node's own value of the opposite direction.
namespace ${namespace} {

typedef ${real} real;
${storage_code}  // store_t: a stored value (real, or float16 storage's binary16 bits)
typedef unsigned long long mask_t;

constexpr int Q = ${q};      // discrete velocities
constexpr int A = 4;         // tile edge: 64 nodes, one 64-bit mask
constexpr int NPT = 64;      // nodes per tile
constexpr int NB = 27;       // tiles of the 3^3 neighbourhood
constexpr int PAD = ${pad};  // a tile's direction block is its fluid count rounded up to PAD
constexpr bool HALO = ${halo};  // sources located once per tile halo node, not per pull
constexpr int HE = A + 2;    // edge of the tile with its one-node halo
constexpr int HN = HE * HE * HE;
// Inner tiles (halo inside the domain) locate their halo by columns (fill_column), others
// entry by entry with the general wrap and face logic (locate).
constexpr bool INNER = ${inner};
// Whether a velocity has three non-zero components (reads the 8 corner nodes of the halo).
constexpr bool CORNERS = ${corners};

// Values of one direction block of a tile with occupancy m (its padded fluid count).
__device__ __forceinline__ int padded(mask_t m)
{
    const int c = __popcll(m);
    return PAD == 1 ? c : (c + PAD - 1) & ~(PAD - 1);
}

// Source of in-tile coordinate x of the tile at tile-grid coordinate t, shifted by d (-1, 0, 1)
// along one axis: the source's tile-grid coordinate tt, in-tile coordinate, tile step dt and
// whether it lies in the domain (after the periodic wrap).
struct AxisSrc {
    int tt, local, dt;
    bool ok;
};

__device__ __forceinline__ AxisSrc axis_src(int t, int x, int d, int size, int off, bool wrap)
{
    int X = t * A - off + x + d;  // domain coordinate of the source
    if (wrap) {
        X += X < 0 ? size : 0;
        X -= X >= size ? size : 0;
    }
    const bool ok = X >= 0 && X < size;
    const int s = ok ? X + off : 0;
    const int tt = s / A;
    return {tt, s - tt * A, tt - t, ok};
}

// A pull's source (axis sources sx, sy, sz): at0 = Q * base + rank, its value of direction 0
// (direction i adds i * pc, an int product), and pc its tile's padded count (<= 64), or at0 = -1
// where it is not fluid (solid, empty tile, outside a non-periodic face).
struct Found {
    ${found_fields};
};

__device__ __forceinline__ Found locate(
    const AxisSrc& sx, const AxisSrc& sy, const AxisSrc& sz, const mask_t* s_mask,
    const ${offset}* s_base, const mask_t* __restrict__ masks, const ${offset}* __restrict__ base,
    const int* __restrict__ tile_map, int gx, int gy)
{
    if (!(sx.ok && sy.ok && sz.ok)) return {-1, 0};
    mask_t m = 0ull;
    ${offset} b = 0;
    if (sx.dt >= -1 && sx.dt <= 1 && sy.dt >= -1 && sy.dt <= 1 && sz.dt >= -1 && sz.dt <= 1) {
        const int nb = (sx.dt + 1) + 3 * (sy.dt + 1) + 9 * (sz.dt + 1);
        m = s_mask[nb];
        b = s_base[nb];
    } else {  // across a periodic face: outside the neighbourhood
        const int idx = tile_map[sx.tt + gx * (sy.tt + gy * sz.tt)];
        if (idx >= 0) {
            m = masks[idx];
            b = base[idx];
        }
    }
    const int k = sx.local + A * sy.local + A * A * sz.local;
    if (!((m >> k) & 1ull)) return {-1, 0};
    return {Q * b + __popcll(m & ((1ull << k) - 1ull)), padded(m)};
}

// Slot of direction i at a located source, or `own` (the node's own value of the opposite
// direction: halfway bounce-back).
__device__ __forceinline__ ${offset} source_slot(int i, const Found& s, ${offset} own)
{
    return s.at0 >= 0 ? s.at0 + i * s.pc : own;
}

// The located sources of a tile's halo in shared memory: HN at0 (offsets), then HN pc (ints).
__device__ __forceinline__ void put_src(${offset}* s_halo, int h, ${offset} at0, ${pc_type} pc)
{
    s_halo[h] = at0;
    ${halo_pc_put} = pc;
}

__device__ __forceinline__ Found halo_src(const ${offset}* s_halo, int h)
{
    return {s_halo[h], ${halo_pc_get}};
}

// Whether the whole halo of the tile at tile-grid coordinate t lies inside the domain (no wrap,
// no face): then every halo node lies in the 3^3 neighbourhood and fill_column applies.
__device__ __forceinline__ bool halo_inside(int tx, int ty, int tz, int sizex, int sizey,
                                            int sizez, int offx, int offy, int offz)
{
    return tx * A - 1 >= offx && tx * A + A < sizex + offx && ty * A - 1 >= offy
           && ty * A + A < sizey + offy && tz * A - 1 >= offz && tz * A + A < sizez + offz;
}

// Sources of halo column c (< HE^2: x and y of the halo, z = -1..A) of an inner tile: only x and
// y are decoded at run time; along the column the neighbour tile and the 16-node z plane are
// compile-time constants of the unrolled loop, so an entry is a bit test and the popcounts of
// 32-bit words (the planes below, then this plane's nodes below the node). The column's 3
// neighbour masks are read before any store (shared stores would otherwise force reloads).
__device__ __forceinline__ void fill_column(int c, const mask_t* s_mask, const ${offset}* s_base,
                                            ${offset}* s_halo)
{
    const int hx = c % HE - 1, hy = c / HE - 1;
    const int sx = (hx + A) / A, sy = (hy + A) / A;  // 0 the tile below, 1 this one, 2 above
    const int kxy = (hx + A - sx * A) + A * (hy + A - sy * A);  // node in its 16-node plane
    const unsigned below = (1u << kxy) - 1u;
    const int nbxy = sx + 3 * sy;
    unsigned lo[3], hi[3];
    ${offset} at[3], pc[3];
#pragma unroll
    for (int sz = 0; sz < 3; ++sz) {
        const mask_t m = s_mask[nbxy + 9 * sz];
        lo[sz] = (unsigned)m;
        hi[sz] = (unsigned)(m >> 32);
        at[sz] = Q * s_base[nbxy + 9 * sz];
        pc[sz] = padded(m);
    }
#pragma unroll
    for (int hz = -1; hz <= A; ++hz) {
        const int sz = (hz + A) / A, lz = hz + A - sz * A;  // compile-time
        const unsigned word = lz < 2 ? lo[sz] : hi[sz];
        const unsigned plane = lz & 1 ? word >> 16 : word & 0xffffu;
        int rank = __popc(plane & below);
        if (lz == 1) rank += __popc(lo[sz] & 0xffffu);
        if (lz >= 2) rank += __popc(lo[sz]);
        if (lz == 3) rank += __popc(hi[sz] & 0xffffu);
        const bool fluid = (plane >> kxy) & 1u;
        put_src(s_halo, c + HE * HE * (hz + 1), fluid ? at[sz] + rank : -1, pc[sz]);
    }
}

// Entry j of the 4 corner columns (x and y of the halo both outside the tile) of an inner tile,
// one per thread: z = 0..A-1, or -1..A where a velocity has three non-zero components (CORNERS;
// else the 8 corner nodes of the halo are never read). A general entry, decoded at run time.
__device__ __forceinline__ void fill_corner(int j, const mask_t* s_mask, const ${offset}* s_base,
                                            ${offset}* s_halo)
{
    const int cc = j & 3, hz = (j >> 2) - (CORNERS ? 1 : 0);
    const int sx = (cc & 1) * 2, sy = (cc >> 1) * 2;  // the tile below (0) or above (2)
    const int sz = (hz + A) / A;
    const int nb = sx + 3 * sy + 9 * sz;
    const int k = (sx ? 0 : A - 1) + A * (sy ? 0 : A - 1) + A * A * (hz + A - sz * A);
    const mask_t m = s_mask[nb];
    const bool fluid = (m >> k) & 1ull;
    put_src(s_halo, (sx ? HE - 1 : 0) + HE * (sy ? HE - 1 : 0) + HE * HE * (hz + 1),
            fluid ? Q * s_base[nb] + __popcll(m & ((1ull << k) - 1ull)) : -1, padded(m));
}

// The halo of an inner tile by its 64 threads, one warp each: the first warp fills the 32
// columns that are not corner columns (fill_column, 6 entries each), the second the corner
// columns' entries (fill_corner, one each). 36 columns over the first 36 threads would make the
// second warp run a whole column pass for 4 lanes.
__device__ __forceinline__ void fill_inner(int n, const mask_t* s_mask, const ${offset}* s_base,
                                           ${offset}* s_halo)
{
    if (n < 32)  // column index (x + 1) + HE (y + 1), skipping 0, HE - 1, HE (HE - 1), HE^2 - 1
        fill_column(n + 1 + (n >= A ? 1 : 0) + (n >= HE * A + A ? 1 : 0), s_mask, s_base, s_halo);
    else if (n < 32 + 4 * (CORNERS ? HE : A))
        fill_corner(n - 32, s_mask, s_base, s_halo);
}

// Sources of halo entries h0, h0 + step, ... (< HN) of the tile at tile-grid coordinate t, each
// located in full (periodic wrap per node, faces, the global tables across a periodic face).
__device__ __forceinline__ void fill_general(
    int h0, int step, int tx, int ty, int tz, ${offset}* s_halo, const mask_t* s_mask,
    const ${offset}* s_base, const mask_t* __restrict__ masks, const ${offset}* __restrict__ base,
    const int* __restrict__ tile_map, int gx, int gy, int sizex, int sizey, int sizez,
    int offx, int offy, int offz, int periodic)
{
    for (int h = h0; h < HN; h += step) {
        const int hx = h % HE - 1, hy = (h / HE) % HE - 1, hz = h / (HE * HE) - 1;
        const Found s = locate(axis_src(tx, hx, 0, sizex, offx, periodic & 1),
                               axis_src(ty, hy, 0, sizey, offy, (periodic >> 1) & 1),
                               axis_src(tz, hz, 0, sizez, offz, (periodic >> 2) & 1),
                               s_mask, s_base, masks, base, tile_map, gx, gy);
        put_src(s_halo, h, s.at0, s.pc);
    }
}

extern "C" __global__ void ${kernel}(
    const store_t* ${restrict} fin, store_t* ${restrict} fout,
    const mask_t* __restrict__ masks, const ${offset}* __restrict__ base,
    const int* __restrict__ tiles, const int* __restrict__ tile_map,
    int n_tiles, int gx, int gy, int gz, int sizex, int sizey, int sizez,
    int offx, int offy, int offz, int periodic${real_params})
{
${storage_prologue}    extern __shared__ int lbm_smem[];
    const int n = threadIdx.x % NPT;
    const int local_tile = threadIdx.x / NPT;
    const int tile = blockIdx.x * (blockDim.x / NPT) + local_tile;
    mask_t* s_mask = reinterpret_cast<mask_t*>(lbm_smem) + local_tile * NB;
    ${offset}* s_base = reinterpret_cast<${offset}*>(reinterpret_cast<mask_t*>(lbm_smem)
                                         + (blockDim.x / NPT) * NB) + local_tile * NB;
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
    const int x = n & 3, y = (n >> 2) & 3, z = n >> 4;
    ${offset}* s_halo = reinterpret_cast<${offset}*>(reinterpret_cast<mask_t*>(lbm_smem)
                                         + (blockDim.x / NPT) * NB)
                  + (blockDim.x / NPT) * NB + local_tile * ${halo_offsets};
    if (HALO) {  // the tile's threads locate its halo (tile nodes included) once
        if (active) {
            if (INNER && halo_inside(t[0], t[1], t[2], sizex, sizey, sizez, offx, offy, offz)) {
                fill_inner(n, s_mask, s_base, s_halo);
            } else {
                fill_general(n, NPT, t[0], t[1], t[2], s_halo, s_mask, s_base, masks, base,
                             tile_map, gx, gy, sizex, sizey, sizez, offx, offy, offz, periodic);
            }
        }
        __syncthreads();
    }
    if (!active) return;
    const mask_t mine = s_mask[13];
    if (!((mine >> n) & 1ull)) return;
    const int stride = padded(mine);
    const ${offset} own = Q * s_base[13] + __popcll(mine & ((1ull << n) - 1ull));
    const int hn = (x + 1) + HE * (y + 1) + HE * HE * (z + 1);  // the node in the halo block
${axis_tables}
${pulls}
${collide}
}

}  // namespace ${namespace}
