// Packed variant of the compact kernel (appended to compact_probe.cu's helpers by compact.py):
// a block steps K consecutive tiles with fewer threads than their 64 K nodes, and thread j
// steps the block's fluid nodes j, j + blockDim.x, ... (tile by tile, each tile's in rank
// order). In the per-node kernel a thread per tile node idles where the node is solid, so at
// eta_t 0.5 half the lanes of a warp issue loads; here every lane of a warp works on a fluid
// node, the warps that stay resident move twice the bytes, and the K tiles' neighbourhoods and
// halos are located once per block in shared memory as before.
extern "C" __global__ void ${kernel}(
    const real* ${restrict} fin, real* ${restrict} fout,
    const mask_t* __restrict__ masks, const int* __restrict__ base,
    const int* __restrict__ tiles, const int* __restrict__ tile_map,
    int n_tiles, int gx, int gy, int gz, int sizex, int sizey, int sizez,
    int offx, int offy, int offz, int periodic${real_params})
{
    constexpr int K = ${packed};  // tiles per block
    extern __shared__ int lbm_smem[];
    mask_t* s_mask = reinterpret_cast<mask_t*>(lbm_smem);
    int* s_base = reinterpret_cast<int*>(s_mask + K * NB);
    int* s_at_all = s_base + K * NB;
    int* s_pc_all = s_at_all + K * HN;
    unsigned char* s_node = reinterpret_cast<unsigned char*>(s_pc_all + K * HN);
    const int first_tile = blockIdx.x * K;
    const int nk = n_tiles - first_tile < K ? n_tiles - first_tile : K;
    for (int e = threadIdx.x; e < nk * NB; e += blockDim.x) {
        const int k = e / NB, j = e % NB, tile = first_tile + k;
        const int u = tiles[3 * tile] + j % 3 - 1, v = tiles[3 * tile + 1] + (j / 3) % 3 - 1,
                  w = tiles[3 * tile + 2] + j / 9 - 1;
        const bool in = u >= 0 && u < gx && v >= 0 && v < gy && w >= 0 && w < gz;
        const int idx = in ? tile_map[u + gx * (v + gy * w)] : -1;
        s_mask[e] = idx >= 0 ? masks[idx] : 0ull;
        s_base[e] = idx >= 0 ? base[idx] : 0;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < nk * HN; e += blockDim.x) {
        const int k = e / HN, h = e % HN, tile = first_tile + k;
        const int hx = h % HE - 1, hy = (h / HE) % HE - 1, hz = h / (HE * HE) - 1;
        const Found s = locate(
            axis_src(tiles[3 * tile], hx, 0, sizex, offx, periodic & 1),
            axis_src(tiles[3 * tile + 1], hy, 0, sizey, offy, (periodic >> 1) & 1),
            axis_src(tiles[3 * tile + 2], hz, 0, sizez, offz, (periodic >> 2) & 1),
            s_mask + k * NB, s_base + k * NB, masks, base, tile_map, gx, gy);
        s_at_all[e] = s.at0;
        s_pc_all[e] = s.pc;
    }
    int first[K + 1];  // fluid nodes of the block's tiles before tile k (unrolled: registers)
    first[0] = 0;
#pragma unroll
    for (int k = 0; k < K; ++k)
        first[k + 1] = first[k] + (k < nk ? __popcll(s_mask[k * NB + 13]) : 0);
    for (int e = threadIdx.x; e < nk * NPT; e += blockDim.x) {  // rank -> node of each tile
        const int k = e / NPT, n = e % NPT;
        const mask_t m = s_mask[k * NB + 13];
        if ((m >> n) & 1ull) s_node[first[k] + __popcll(m & ((1ull << n) - 1ull))] = n;
    }
    __syncthreads();
    for (int j = threadIdx.x; j < first[K]; j += blockDim.x) {
        int k = 0;
#pragma unroll
        for (int kk = 1; kk < K; ++kk) k += j >= first[kk] ? 1 : 0;
        const int n = s_node[j];
        const mask_t mine = s_mask[k * NB + 13];
        const int stride = padded(mine);
        const int own = Q * s_base[k * NB + 13] + (j - first[k]);
        const int* s_at = s_at_all + k * HN;
        const int* s_pc = s_pc_all + k * HN;
        const int x = n & 3, y = (n >> 2) & 3, z = n >> 4;
        const int hn = (x + 1) + HE * (y + 1) + HE * HE * (z + 1);
${pulls}
${collide}
    }
}

}  // namespace ${namespace}
