// Packed compact kernel (appended to compact_probe.cu's helpers by compact_source.py): a block
// runs K consecutive tiles with fewer threads than their 64 K nodes, and thread j
// steps the block's fluid nodes j, j + blockDim.x, ... (tile by tile, each tile's in rank
// order). In the per-node kernel a thread per tile node idles where the node is solid, so at
// eta_t 0.5 half the lanes of a warp issue loads; here every lane of a warp works on a fluid
// node, the warps that stay resident move twice the bytes, and the K tiles' neighbourhoods and
// halos are located once per block in shared memory as before.
extern "C" __global__ void ${kernel}(
    const store_t* ${restrict} fin, store_t* ${restrict} fout,
    const mask_t* __restrict__ masks, const ${offset}* __restrict__ base,
    const int* __restrict__ tiles, const int* __restrict__ tile_map,
    int n_tiles, int gx, int gy, int gz, int sizex, int sizey, int sizez,
    int offx, int offy, int offz, int periodic${real_params})
{
${storage_prologue}    constexpr int K = ${packed};  // tiles per block
    extern __shared__ int lbm_smem[];
    mask_t* s_mask = reinterpret_cast<mask_t*>(lbm_smem);
    ${offset}* s_base = reinterpret_cast<${offset}*>(s_mask + K * NB);
    ${offset}* s_halo_all = s_base + K * NB;  // ${halo_offsets} offsets per tile (put_src)
    unsigned char* s_node = reinterpret_cast<unsigned char*>(s_halo_all + K * ${halo_offsets});
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
    if (INNER) {  // one halo column per thread: fill_column on inner tiles, else in full
        for (int e = threadIdx.x; e < nk * HE * HE; e += blockDim.x) {
            const int k = e / (HE * HE), c = e % (HE * HE), tile = first_tile + k;
            const int tx = tiles[3 * tile], ty = tiles[3 * tile + 1], tz = tiles[3 * tile + 2];
            if (halo_inside(tx, ty, tz, sizex, sizey, sizez, offx, offy, offz))
                fill_column(c, s_mask + k * NB, s_base + k * NB, s_halo_all + k * ${halo_offsets});
            else
                fill_general(c, HE * HE, tx, ty, tz, s_halo_all + k * ${halo_offsets}, s_mask + k * NB,
                             s_base + k * NB, masks, base, tile_map, gx, gy, sizex, sizey,
                             sizez, offx, offy, offz, periodic);
        }
    } else {
        for (int e = threadIdx.x; e < nk * HN; e += blockDim.x) {
            const int k = e / HN, tile = first_tile + k;
            fill_general(e % HN, HN, tiles[3 * tile], tiles[3 * tile + 1], tiles[3 * tile + 2],
                         s_halo_all + k * ${halo_offsets}, s_mask + k * NB, s_base + k * NB, masks, base,
                         tile_map, gx, gy, sizex, sizey, sizez, offx, offy, offz, periodic);
        }
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
        // j's tile k and the block's fluid nodes before it, by selects (first[k] with k known
        // at run time only would put first[] in local memory)
        int k = 0, before = 0;
#pragma unroll
        for (int kk = 1; kk < K; ++kk) {
            k = j >= first[kk] ? kk : k;
            before = j >= first[kk] ? first[kk] : before;
        }
        const int n = s_node[j];
        const int tile = first_tile + k;  // float16 storage: keys the node's random bits
        const mask_t mine = s_mask[k * NB + 13];
        const int stride = padded(mine);
        const ${offset} own = Q * s_base[k * NB + 13] + (j - before);
        const ${offset}* s_halo = s_halo_all + k * ${halo_offsets};
        const int x = n & 3, y = (n >> 2) & 3, z = n >> 4;
        const int hn = (x + 1) + HE * (y + 1) + HE * HE * (z + 1);
${pulls}
${collide}
    }
}

}  // namespace ${namespace}
