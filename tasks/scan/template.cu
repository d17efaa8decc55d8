/* fsr
[tunables]
BLOCK = [256, 512, 128, 64, 96]  # threads per block (a multiple of 32)
ITEMS = [32, 16, 24, 48, 64, 96, 128]  # elements per thread (a multiple of 4), at most 48 held in registers; a tile is BLOCK * ITEMS (SMEM_TILE: at most 24576, 96 KiB)
BACKOFF_NS = [512, 128, 0, 32]  # a look-back poll that finds a tile unpublished sleeps this long before the next

[features]
VEC4 = [0, 1]           # int4 loads and stores of whole tiles (the last, partial tile stays scalar)
SMEM_TILE = [0, 1]      # whole tiles copied global -> shared -> global by bulk async copies (sm_90 cp.async.bulk, any tile size): loads in flight hold no registers (STRIPED unused; VEC4 for its shared accesses)
WARP_SHUFFLE = [0, 1]   # block scan of thread totals with __shfl_up_sync (else Hillis-Steele in shared memory)
LOOKBACK_WARP = [0, 1]  # one warp inspects 32 predecessor tiles at a time (else one thread, one at a time)
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads of x
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(BLOCK, SM_THREADS / BLOCK): registers bounded for 1024 threads an SM (512 with more than 32 items held, 2048 with SMEM_TILE)
IN_ORDER = [0, 1]       # tile = block index, as CUB does (blocks start in index order), saving the ticket's atomic
STRIPED = [0, 1]        # warp-striped tile: lane l holds int4s k * 32 + l of its warp's chunk, scanned with shuffles (no shared-memory transpose)
DOUBLE_BUFFER = [0, 1]  # persistent blocks take tiles by ticket and load the next tile into registers (SMEM_TILE: a second shared buffer) before this one's look-back
STREAM = [0, 1]         # x loaded with __ldcs and y stored with __stcs (evict first), so the look-back words stay in L2
LOOKBACK_BLOCK = [0, 1] # every thread of the block inspects one predecessor tile, BLOCK at a time (over LOOKBACK_WARP's 32)

[[scratch]]
name = "state"
dtype = "int64"
count = "cdiv(n, BLOCK * min(ITEMS, SMEM_TILE * 4 * (6144 // BLOCK) + (1 - SMEM_TILE) * 48))"
zero = true

[[scratch]]
name = "ticket"
dtype = "int32"
count = "1"
zero = true

[[launch]]
kernel = "scan_template"
# DOUBLE_BUFFER: one wave of persistent blocks, 132 SMs (H100/H200) x SM_THREADS / BLOCK (bulk-copied tiles: as many
# blocks as two tiles each fit an SM's 228 KiB of shared memory); any grid is correct
grid = ["min(cdiv(n, BLOCK * min(ITEMS, SMEM_TILE * 4 * (6144 // BLOCK) + (1 - SMEM_TILE) * 48)), 1073741824 - DOUBLE_BUFFER * (1073741824 - 132 * ((1 - SMEM_TILE) * max(1, (512 + 512 * min(1, 32 // (ITEMS + DOUBLE_BUFFER * ITEMS))) // BLOCK) + SMEM_TILE * max(1, min(2048 // BLOCK, 232448 // (8 * BLOCK * min(ITEMS, SMEM_TILE * 4 * (6144 // BLOCK) + (1 - SMEM_TILE) * 48) + 1280))))))"]
block = ["BLOCK"]
smem = "SMEM_TILE * (1 + DOUBLE_BUFFER) * BLOCK * min(ITEMS, SMEM_TILE * 4 * (6144 // BLOCK) + (1 - SMEM_TILE) * 48) * 4"
args = ["x", "y", "state", "ticket", "n"]
*/
// Feature template: single-pass inclusive scan with decoupled look-back (Merrill & Garland).
// Tiles are numbered in the order blocks start (a ticket), so every predecessor of a tile is
// running or done and waiting on it cannot deadlock; with IN_ORDER the block index is the tile,
// relying on blocks being started in index order, as CUB's scans do. Each tile publishes a 64-bit word
// (flag << 32 | value): flag 1, its own sum (aggregate); flag 2, the sum of everything up to
// and including it (inclusive prefix). A tile's exclusive prefix is found by walking back over
// predecessors, adding aggregates, until one publishes an inclusive prefix.
// DOUBLE_BUFFER: a grid of about one wave loops over tiles taken by ticket (IN_ORDER is ignored:
// blockIdx order would deadlock if some block of the grid were not resident). A block claims its
// next tile before the look-back of this one and, where registers allow (PREFETCH), issues its
// loads too, so DRAM stays busy while the chain of publications catches up. No deadlock: every
// tile below a claimed one is claimed by a running block, and a block's claimed-ahead tile is
// above its current one, so the lowest unpublished tile is always some block's current tile.
// SMEM_TILE: one thread starts a bulk copy of the whole tile into (dynamic) shared memory and every
// thread waits on an mbarrier; the tile is scanned warp-striped out of shared memory, written
// back there and copied out by one bulk store. Registers no longer bound the bytes in flight: a
// block waiting in its look-back holds its tile in shared memory, and the copy engine keeps the
// other blocks' loads going. A partial last tile is loaded and stored by the threads. With
// DOUBLE_BUFFER, persistent blocks hold two tile buffers: the next tile's bulk copy is started
// before this tile's look-back, so a block waiting on its predecessors still keeps DRAM busy.
// Elements a thread takes: ITEMS, but a bulk-copied tile holds at most 24576 (96 KiB, so two of
// them fit a block's opt-in shared memory with DOUBLE_BUFFER) and a thread holding its elements
// in registers at most 48 (more would not fit 512 threads' registers); the header computes the
// same (its min(ITEMS, ...)).
#if SMEM_TILE
#define TILE_ITEMS (ITEMS < 4 * (6144 / BLOCK) ? ITEMS : 4 * (6144 / BLOCK))
#else
#define TILE_ITEMS (ITEMS < 48 ? ITEMS : 48)
#endif
#define TILE (BLOCK * TILE_ITEMS)
// The next tile is loaded into registers early where the two tiles fit the registers.
#define PREFETCH (DOUBLE_BUFFER && TILE_ITEMS <= 32)
// Threads an SM is bounded for (launch bounds) and the persistent grid assumes (header's grid).
#define SM_THREADS (SMEM_TILE ? 2048 : TILE_ITEMS * (1 + DOUBLE_BUFFER) <= 32 ? 1024 : 512)
#define SM_BLOCKS (SM_THREADS / BLOCK > 1 ? SM_THREADS / BLOCK : 1)
#define FLAG_AGG 1ull
#define FLAG_PRE 2ull

#if READONLY
#define RESTRICT __restrict__
#else
#define RESTRICT
#endif
// x and y are touched once each. STREAM's evict-first load wins over READONLY's __ldg: the
// read-only cache has no reuse to serve here, while the eviction hint keeps x out of the way of
// the look-back words (READONLY still gives the __restrict__ pointers). The PTX is __ldcs's and
// __stcs's, but a partial tile's loads and stores are predicated inside the asm (an asm statement
// cannot be if-converted: a branch around each more than doubles the registers of some
// combinations), and the asm is neither volatile nor clobbers memory where it need not: x is
// never written and y never read while the kernel runs, so any order of them is right.
#if STREAM
__device__ __forceinline__ int load_cs(const int* p) {
    int v;
    asm("ld.global.cs.s32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
#if VEC4
__device__ __forceinline__ int4 load_cs(const int4* p) {
    int4 v;
    asm("ld.global.cs.v4.s32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
#endif
__device__ __forceinline__ int load_cs_if(bool c, const int* p) {  // 0 where !c, and p is not read
    int v = 0;
    asm("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\t@q ld.global.cs.s32 %0, [%1];\n\t}"
        : "+r"(v) : "l"(p), "r"((unsigned)c));
    return v;
}
__device__ __forceinline__ void store_cs(int* p, int v) { asm volatile("st.global.cs.s32 [%0], %1;" ::"l"(p), "r"(v)); }
#if VEC4
__device__ __forceinline__ void store_cs(int4* p, int4 v) {
    asm volatile("st.global.cs.v4.s32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
#endif
__device__ __forceinline__ void store_cs_if(bool c, int* p, int v) {
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\t@q st.global.cs.s32 [%0], %1;\n\t}"
                 ::"l"(p), "r"(v), "r"((unsigned)c));
}
#define LOAD(p) load_cs(p)
#define STORE(p, v) store_cs(p, v)
#define LOAD_IF(c, p) load_cs_if(c, p)
#define STORE_IF(c, p, v) store_cs_if(c, p, v)
#else
#if READONLY
#define LOAD(p) __ldg(p)
#else
#define LOAD(p) (*(p))
#endif
#define STORE(p, v) (*(p) = (v))
#define LOAD_IF(c, p) ((c) ? LOAD(p) : 0)
#define STORE_IF(c, p, v) \
    do {                  \
        if (c) STORE(p, v); \
    } while (0)
#endif

#if LAUNCH_BOUNDS
#define KERNEL_BOUNDS __launch_bounds__(BLOCK, SM_BLOCKS)
#else
#define KERNEL_BOUNDS
#endif

typedef unsigned long long word_t;

__device__ __forceinline__ word_t read_state(const word_t* p) { return *(const volatile word_t*)p; }

// Polls until the tile has published something; the sleep keeps waiting lanes from flooding L2
// with polls while the tile ahead is still loading.
__device__ __forceinline__ word_t wait_state(const word_t* p) {
    word_t s = read_state(p);
    while ((s >> 32) == 0) {
#if BACKOFF_NS > 0
        __nanosleep(BACKOFF_NS);
#endif
        s = read_state(p);
    }
    return s;
}
__device__ __forceinline__ void write_state(word_t* p, word_t flag, int value) {
    *(volatile word_t*)p = (flag << 32) | (unsigned)value;  // one aligned 64-bit store: never torn
}

// ---- load and store this thread's TILE_ITEMS consecutive elements --------------------------------

__device__ __forceinline__ void load_items(const int* RESTRICT x, int base, int n, int* v) {
    const bool full = base + TILE <= n;
    const int first = base + threadIdx.x * TILE_ITEMS;
#if VEC4
    if (full) {
#pragma unroll
        for (int k = 0; k < TILE_ITEMS; k += 4) {
            const int4 q = LOAD(reinterpret_cast<const int4*>(x + first + k));
            v[k] = q.x; v[k + 1] = q.y; v[k + 2] = q.z; v[k + 3] = q.w;
        }
        return;
    }
#endif
#pragma unroll
    for (int k = 0; k < TILE_ITEMS; ++k) v[k] = LOAD_IF(full || first + k < n, x + first + k);
}

__device__ __forceinline__ void store_items(int* RESTRICT y, int base, int n, const int* v) {
    const bool full = base + TILE <= n;
    const int first = base + threadIdx.x * TILE_ITEMS;
#if VEC4
    if (full) {
#pragma unroll
        for (int k = 0; k < TILE_ITEMS; k += 4)
            STORE(reinterpret_cast<int4*>(y + first + k), make_int4(v[k], v[k + 1], v[k + 2], v[k + 3]));
        return;
    }
#endif
#pragma unroll
    for (int k = 0; k < TILE_ITEMS; ++k)
        STORE_IF(full || first + k < n, y + first + k, v[k]);
}

// ---- exclusive scan of one value per thread across the block; *total gets the block's sum ---

#if WARP_SHUFFLE
// Inclusive scan of one value per lane across the warp, by shuffles (call with the whole warp).
__device__ __forceinline__ int shfl_inclusive(int value) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
        const int up = __shfl_up_sync(0xffffffffu, value, d);
        if (lane >= d) value += up;
    }
    return value;
}

__device__ __forceinline__ int block_exclusive(int value, int* total, int* warp_sums) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int inc = shfl_inclusive(value);
    if (lane == 31) warp_sums[warp] = inc;
    __syncthreads();
    if (warp == 0) warp_sums[lane] = shfl_inclusive(lane < BLOCK / 32 ? warp_sums[lane] : 0);  // inclusive over warps
    __syncthreads();
    *total = warp_sums[BLOCK / 32 - 1];
    return inc - value + (warp > 0 ? warp_sums[warp - 1] : 0);
}
#else
__device__ __forceinline__ int block_exclusive(int value, int* total, int* part) {
    const int t = threadIdx.x;
    part[t] = value;
    __syncthreads();
    for (int d = 1; d < BLOCK; d *= 2) {
        const int add = t >= d ? part[t - d] : 0;
        __syncthreads();
        part[t] += add;
        __syncthreads();
    }
    *total = part[BLOCK - 1];
    return part[t] - value;
}
#endif

// ---- STRIPED: warp w's chunk is elements base + w * CHUNK .. + CHUNK - 1; lane l holds v[4k + c] =
// element (k * 32 + l) * 4 + c of it, so every load and store of a warp is 512 contiguous bytes.

#if STRIPED || SMEM_TILE
#define CHUNK (32 * TILE_ITEMS)

__device__ __forceinline__ void striped_load(const int* RESTRICT x, int base, int n, int* v) {
    const int first = base + (threadIdx.x / 32) * CHUNK + (threadIdx.x % 32) * 4;
#if VEC4
    if (base + TILE <= n && ((size_t)x & 15) == 0) {
#pragma unroll
        for (int k = 0; k < TILE_ITEMS / 4; ++k) {
            const int4 q = LOAD(reinterpret_cast<const int4*>(x + first + k * 128));
            v[4 * k] = q.x; v[4 * k + 1] = q.y; v[4 * k + 2] = q.z; v[4 * k + 3] = q.w;
        }
        return;
    }
#endif
#pragma unroll
    for (int k = 0; k < TILE_ITEMS / 4; ++k)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int i = first + k * 128 + c;
            v[4 * k + c] = LOAD_IF(i < n, x + i);
        }
}

__device__ __forceinline__ void striped_store(int* RESTRICT y, int base, int n, const int* v) {
    const int first = base + (threadIdx.x / 32) * CHUNK + (threadIdx.x % 32) * 4;
#if VEC4
    if (base + TILE <= n && ((size_t)y & 15) == 0) {
#pragma unroll
        for (int k = 0; k < TILE_ITEMS / 4; ++k)
            STORE(reinterpret_cast<int4*>(y + first + k * 128),
                  make_int4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]));
        return;
    }
#endif
#pragma unroll
    for (int k = 0; k < TILE_ITEMS / 4; ++k)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int i = first + k * 128 + c;
            STORE_IF(i < n, y + i, v[4 * k + c]);
        }
}

// Inclusive scan of one value per lane across the warp (with shuffles, else through `lanes`,
// this warp's 32 shared slots); *sum gets the warp's total.
__device__ __forceinline__ int warp_inclusive(int value, int* sum, int* lanes) {
#if WARP_SHUFFLE
    value = shfl_inclusive(value);
    *sum = __shfl_sync(0xffffffffu, value, 31);
#else
    const int lane = threadIdx.x % 32;
    lanes[lane] = value;
    __syncwarp();
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
        const int up = lane >= d ? lanes[lane - d] : 0;
        __syncwarp();  // every lane has read before any writes
        value += up;
        lanes[lane] = value;
        __syncwarp();
    }
    *sum = lanes[31];
    __syncwarp();  // read before the slots are written again
#endif
    return value;
}

// v becomes the inclusive scan of the warp's chunk; returns the chunk's sum. The TILE_ITEMS / 4 rows
// of 128 elements are scanned (with shuffles, independent chains the compiler interleaves), then
// chained by row totals.
__device__ __forceinline__ int striped_warp_scan(int* v, int* lanes) {
    int s[TILE_ITEMS / 4], row_total[TILE_ITEMS / 4];
#pragma unroll
    for (int k = 0; k < TILE_ITEMS / 4; ++k) {
        v[4 * k + 1] += v[4 * k];
        v[4 * k + 2] += v[4 * k + 1];
        v[4 * k + 3] += v[4 * k + 2];
        s[k] = v[4 * k + 3];
    }
#pragma unroll
    for (int k = 0; k < TILE_ITEMS / 4; ++k) s[k] = warp_inclusive(s[k], &row_total[k], lanes);
    int carry = 0;
#pragma unroll
    for (int k = 0; k < TILE_ITEMS / 4; ++k) {
        const int add = carry + s[k] - v[4 * k + 3];  // lanes below in this row, and the rows before
        carry += row_total[k];
#pragma unroll
        for (int c = 0; c < 4; ++c) v[4 * k + c] += add;
    }
    return carry;
}

// The sum of the warps before this one (returned) and of all warps (*total), from warp_sums.
__device__ __forceinline__ int striped_block_offset(int warp_total, int* total, int* warp_sums) {
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) warp_sums[warp] = warp_total;
    __syncthreads();
    int before = 0, all = 0;
#pragma unroll
    for (int w = 0; w < BLOCK / 32; ++w) {
        const int t = warp_sums[w];
        all += t;
        if (w < warp) before += t;
    }
    *total = all;
    return before;
}
#endif

// ---- look-back: the sum of every tile before `tile` (tile > 0) -------------------------------

#if LOOKBACK_WARP
// Warp 0: lane l inspects tile window - l; the nearest inclusive prefix in the window ends the
// walk, else all 32 aggregates are added and the window moves back. The lanes' values are summed
// with __reduce_add_sync (every lane gets the sum), without WARP_SHUFFLE by atomics on *sum_s.
__device__ __forceinline__ int look_back(const word_t* state, int tile, int* sum_s) {
    const int lane = threadIdx.x;
#if WARP_SHUFFLE
    int sum = 0;
#else
    if (lane == 0) *sum_s = 0;
    __syncwarp();
#endif
    for (int window = tile - 1;; window -= 32) {
        const int j = window - lane;
        const word_t s = j >= 0 ? wait_state(state + j) : 0;
        const unsigned done = __ballot_sync(0xffffffffu, j >= 0 && (s >> 32) == FLAG_PRE);
        const int last = done ? __ffs(done) - 1 : 31;
#if WARP_SHUFFLE
        sum += (int)__reduce_add_sync(0xffffffffu, j >= 0 && lane <= last ? (unsigned)(s & 0xffffffffu) : 0u);
#else
        if (j >= 0 && lane <= last) atomicAdd(sum_s, (int)(unsigned)(s & 0xffffffffu));
#endif
        if (done) break;
    }
#if WARP_SHUFFLE
    return sum;
#else
    __syncwarp();
    return *sum_s;
#endif
}
#else
__device__ __forceinline__ int look_back(const word_t* state, int tile, int*) {
    int prefix = 0;
    for (int j = tile - 1;; --j) {
        const word_t s = wait_state(state + j);
        prefix += (int)(unsigned)(s & 0xffffffffu);
        if ((s >> 32) == FLAG_PRE) return prefix;
    }
}
#endif

#if LOOKBACK_BLOCK
// The whole block: thread t inspects tile window - t, so one round of loads usually reaches back
// past every tile still in flight (with many tiles resident, a warp's 32 took several rounds,
// each an L2 round trip). The nearest inclusive prefix ends the walk (its thread index found by
// ballots and a shared atomicMin), else all BLOCK aggregates are added and the window moves
// back (the sum by warp reductions, without WARP_SHUFFLE by shared atomics). Two sets of slots
// alternate by window, so a slot is reset only once every thread has read it. Every thread gets
// the sum; call with the whole block, tile > 0.
__device__ __forceinline__ int look_back_block(const word_t* state, int tile) {
    __shared__ int slots_s[4];  // the nearest inclusive prefix's thread, the window's sum: by window parity
    int* const nearest_s = slots_s;
    int* const sum_s = slots_s + 2;
    const int t = threadIdx.x, lane = t % 32;
    if (t == 0) {
        nearest_s[0] = nearest_s[1] = BLOCK;
        sum_s[0] = sum_s[1] = 0;
    }
    __syncthreads();
    int prefix = 0;
    for (int window = tile - 1, p = 0;; window -= BLOCK, p ^= 1) {
        const int j = window - t;
        const word_t s = j >= 0 ? wait_state(state + j) : 0;
        const unsigned pre = __ballot_sync(0xffffffffu, j >= 0 && (s >> 32) == FLAG_PRE);
        if (lane == 0 && pre) atomicMin(&nearest_s[p], t + __ffs(pre) - 1);
        __syncthreads();
        const int last = nearest_s[p];
        if (t == 0) {
            nearest_s[p ^ 1] = BLOCK;  // the next window's slots: every thread read them last window
            sum_s[p ^ 1] = 0;
        }
        const unsigned mine = j >= 0 && t <= last ? (unsigned)(s & 0xffffffffu) : 0u;
#if WARP_SHUFFLE
        const unsigned w = __reduce_add_sync(0xffffffffu, mine);
        if (lane == 0 && w) atomicAdd(&sum_s[p], (int)w);
#else
        if (mine) atomicAdd(&sum_s[p], (int)mine);
#endif
        __syncthreads();
        prefix += sum_s[p];
        if (last < BLOCK) return prefix;
    }
}
#endif

// ---- one tile: local scan, then look-back, add and store ---------------------------------------

// The tile's inclusive local scan in v; returns the sum of the threads before this one in the
// tile, *total the tile's sum. Ends after a __syncthreads.
__device__ __forceinline__ int scan_local(int* v, int* total, int* part, int* lanes) {
#if STRIPED
    return striped_block_offset(striped_warp_scan(v, lanes), total, part);
#else
#pragma unroll
    for (int k = 1; k < TILE_ITEMS; ++k) v[k] += v[k - 1];
    return block_exclusive(v[TILE_ITEMS - 1], total, part);
#endif
}

__device__ __forceinline__ void load_tile(const int* RESTRICT x, int base, int n, int* v) {
#if STRIPED
    striped_load(x, base, n, v);
#else
    load_items(x, base, n, v);
#endif
}

// Publish the tile's aggregate (tile 0: its inclusive prefix) as soon as its sum is known.
__device__ __forceinline__ void publish_aggregate(word_t* state, int tile, int total) {
    if (threadIdx.x == 0) write_state(state + tile, tile == 0 ? FLAG_PRE : FLAG_AGG, total);
}

// Look back and publish the inclusive prefix; returns the sum of the tiles before this one (to
// every thread: ends after a __syncthreads).
__device__ __forceinline__ int tile_prefix(word_t* state, int tile, int total, int* prefix_s, int* sum_s) {
#if LOOKBACK_BLOCK
    const int prefix = tile == 0 ? 0 : look_back_block(state, tile);  // tile is the same for the whole block
    if (threadIdx.x == 0 && tile > 0) write_state(state + tile, FLAG_PRE, prefix + total);
    __syncthreads();
    return prefix;
#else
#if LOOKBACK_WARP
    const bool walker = threadIdx.x < 32;
#else
    const bool walker = threadIdx.x == 0;
#endif
    if (walker) {
        if (tile == 0) {
            if (threadIdx.x == 0) *prefix_s = 0;
        } else {
            const int prefix = look_back(state, tile, sum_s);
            if (threadIdx.x == 0) {
                write_state(state + tile, FLAG_PRE, prefix + total);
                *prefix_s = prefix;
            }
        }
    }
    __syncthreads();
    return *prefix_s;
#endif
}

// Look back, publish the inclusive prefix, add the exclusive prefix and store the tile.
__device__ __forceinline__ void finish_tile(int* RESTRICT y, word_t* state, int tile, int n, int* v, int offset,
                                            int total, int* prefix_s, int* sum_s) {
    const int add = tile_prefix(state, tile, total, prefix_s, sum_s) + offset;
#pragma unroll
    for (int k = 0; k < TILE_ITEMS; ++k) v[k] += add;
#if STRIPED
    striped_store(y, tile * TILE, n, v);
#else
    store_items(y, tile * TILE, n, v);
#endif
}

#if SMEM_TILE
// ---- SMEM_TILE: bulk async copies (cp.async.bulk) between global and shared memory, an mbarrier -----

__device__ __forceinline__ unsigned shared_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bulk_barrier_init(unsigned bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // visible to the copy engine
}

// One thread: the barrier's phase completes once `bytes` have landed at dst.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

__device__ __forceinline__ void bulk_wait(unsigned bar, unsigned phase) {
    unsigned done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(bar), "r"(phase) : "memory");
    } while (!done);
}

// One thread, after every thread's fence.proxy.async and a barrier: copy out, and wait until the
// copy has read shared memory (before the tile's buffer is written again or the block exits).
__device__ __forceinline__ void bulk_store(void* dst, unsigned src, unsigned bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Four consecutive elements of a tile in shared memory: one 128-bit access with VEC4, else four
// scalar ones (lanes 16 bytes apart: 4-way bank conflicts).
#if VEC4
typedef int4 quad;
__device__ __forceinline__ quad quad_get(const int* p) { return *reinterpret_cast<const int4*>(p); }
__device__ __forceinline__ void quad_put(int* p, quad q) { *reinterpret_cast<int4*>(p) = q; }
#else
struct quad {
    int x, y, z, w;
};
__device__ __forceinline__ quad quad_get(const int* p) { return quad{p[0], p[1], p[2], p[3]}; }
__device__ __forceinline__ void quad_put(int* p, quad q) {
    p[0] = q.x; p[1] = q.y; p[2] = q.z; p[3] = q.w;
}
#endif

// One tile through shared memory. Warp w's chunk is tile_s[w * CHUNK ..], read as rows of 128
// elements (lane l holds elements 4l .. 4l + 3 of each row: with VEC4 every shared access of a warp
// is conflict-free).
// Few registers, whatever TILE_ITEMS is: a first pass sums the chunk for the tile's aggregate, a second
// scans it row by row in place while the look-back's predecessors may still be publishing (this
// order read 306-315 us against 322-326 us, the scan after the look-back, on an H200), a third adds
// the tiles before.
__device__ __forceinline__ void bulk_tile(const int* RESTRICT x, int* RESTRICT y, word_t* state, int tile, int n,
                                          int* tile_s, unsigned bar, unsigned* phases, int which, int* part,
                                          int* lanes, int* prefix_s, int* sum_s, bool started) {
    const int base = tile * TILE;
    const bool full = n - base >= TILE;
    if (full) {
        if (threadIdx.x == 0 && !started) bulk_load(shared_address(tile_s), x + base, TILE * 4, bar);
        bulk_wait(bar, (*phases >> which) & 1);  // bit `which` of *phases: this buffer's barrier phase
        *phases ^= 1u << which;
    } else {
        for (int i = threadIdx.x; i < TILE; i += BLOCK) tile_s[i] = LOAD_IF(base + i < n, x + base + i);
        __syncthreads();
    }
    int* const mine = tile_s + (threadIdx.x / 32) * CHUNK + (threadIdx.x % 32) * 4;  // row k at mine + 128 k
    // Pass 1: the tile's sum, published as soon as it is known (successors wait on it).
    int lane_sum = 0;
#pragma unroll 4
    for (int k = 0; k < TILE_ITEMS / 4; ++k) {
        const quad q = quad_get(mine + 128 * k);
        lane_sum += q.x + q.y + q.z + q.w;
    }
    int warp_total, total;
    warp_inclusive(lane_sum, &warp_total, lanes);
    int carry = striped_block_offset(warp_total, &total, part);  // the warps before this one
    publish_aggregate(state, tile, total);
    // Pass 2, before the look-back, while predecessors may still be publishing: the scan within
    // the tile, in place (two rows at a time with shuffles; the shared-memory warp scan would spill).
#if WARP_SHUFFLE
#pragma unroll 2
#else
#pragma unroll 1
#endif
    for (int k = 0; k < TILE_ITEMS / 4; ++k) {
        quad q = quad_get(mine + 128 * k);
        q.y += q.x;
        q.z += q.y;
        q.w += q.z;
        int row_total;
        const int add = carry + warp_inclusive(q.w, &row_total, lanes) - q.w;  // rows before, lanes before
        carry += row_total;
        quad_put(mine + 128 * k, quad{q.x + add, q.y + add, q.z + add, q.w + add});
    }
    // Pass 3: the tiles before this one.
    const int add = tile_prefix(state, tile, total, prefix_s, sum_s);
#pragma unroll 4
    for (int k = 0; k < TILE_ITEMS / 4; ++k) {
        const quad q = quad_get(mine + 128 * k);
        quad_put(mine + 128 * k, quad{q.x + add, q.y + add, q.z + add, q.w + add});
    }
    if (full) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // these writes, before the copy engine reads
        __syncthreads();
        if (threadIdx.x == 0) bulk_store(y + base, shared_address(tile_s), TILE * 4);
    } else {
        __syncthreads();
        for (int i = threadIdx.x; i < n - base; i += BLOCK) STORE(y + base + i, tile_s[i]);
    }
}
#endif

extern "C" __global__ void KERNEL_BOUNDS scan_template(const int* RESTRICT x, int* RESTRICT y, word_t* state,
                                                      int* ticket, int n) {
    __shared__ int tile_id, prefix_s, sum_s;
#if WARP_SHUFFLE
    __shared__ int part[32];
#else
    __shared__ int part[BLOCK];
#endif
#if (STRIPED || SMEM_TILE) && !WARP_SHUFFLE
    __shared__ int lanes_s[BLOCK];  // apart from part: a warp may write its total while others scan
    int* lanes = lanes_s + (threadIdx.x / 32) * 32;
#else
    int* lanes = nullptr;
#endif
#if SMEM_TILE
    extern __shared__ __align__(128) int bulk_s[];  // TILE ints (two buffers with DOUBLE_BUFFER): the launch's dynamic shared memory
#if DOUBLE_BUFFER
    __shared__ __align__(8) unsigned long long bars_s[2];
    __shared__ int next_s[2];  // by buffer: a slot is written again two tiles later, long after every thread read it
    unsigned phases = 0;
    const int tiles = (n - 1) / TILE + 1;
    if (threadIdx.x == 0) {
        bulk_barrier_init(shared_address(&bars_s[0]));
        bulk_barrier_init(shared_address(&bars_s[1]));
        tile_id = atomicAdd(ticket, 1);
        if (tile_id < tiles && n - tile_id * TILE >= TILE)
            bulk_load(shared_address(bulk_s), x + tile_id * TILE, TILE * 4, shared_address(&bars_s[0]));
    }
    __syncthreads();
    int tile = tile_id;  // written once
    if (tile >= tiles) return;
    for (int b = 0;; b ^= 1) {
        int* const next_buf = bulk_s + (b ^ 1) * TILE;
        if (threadIdx.x == 0) {  // this block's last bulk store has read next_buf (thread 0 waited on it)
            const int next = atomicAdd(ticket, 1);
            next_s[b] = next;
            if (next < tiles && n - next * TILE >= TILE)
                bulk_load(shared_address(next_buf), x + next * TILE, TILE * 4, shared_address(&bars_s[b ^ 1]));
        }
        bulk_tile(x, y, state, tile, n, bulk_s + b * TILE, shared_address(&bars_s[b]), &phases, b, part, lanes,
                  &prefix_s, &sum_s, true);  // its barriers publish next_s[b]
        tile = next_s[b];  // the next tile's buffer was last used two tiles ago, its waits all passed
        if (tile >= tiles) return;
    }
#else
    __shared__ __align__(8) unsigned long long bar_s;
    const unsigned bar = shared_address(&bar_s);
    unsigned phase = 0;
    if (threadIdx.x == 0) bulk_barrier_init(bar);
#if IN_ORDER
    __syncthreads();
    bulk_tile(x, y, state, blockIdx.x, n, bulk_s, bar, &phase, 0, part, lanes, &prefix_s, &sum_s, false);
#else
    // Tiles by ticket until none is left.
    const int tiles = (n - 1) / TILE + 1;
    for (;;) {
        if (threadIdx.x == 0) tile_id = atomicAdd(ticket, 1);
        __syncthreads();  // also: the last tile's bulk store has read bulk_s (thread 0 waited on it)
        const int tile = tile_id;
        if (tile >= tiles) return;
        bulk_tile(x, y, state, tile, n, bulk_s, bar, &phase, 0, part, lanes, &prefix_s, &sum_s, false);
    }
#endif
#endif
#else
    int v[TILE_ITEMS];
    int total;

#if DOUBLE_BUFFER
    __shared__ int next_s;
    const int tiles = (n - 1) / TILE + 1;  // n >= 1; n + TILE could overflow
    if (threadIdx.x == 0) tile_id = atomicAdd(ticket, 1);
    __syncthreads();
    int tile = tile_id;  // tile_id is written once: no later write races this read
    if (tile >= tiles) return;
    load_tile(x, tile * TILE, n, v);
    for (;;) {
        // next_s of the last round was read before finish_tile's __syncthreads: safe to overwrite
        if (threadIdx.x == 0) next_s = atomicAdd(ticket, 1);
        const int offset = scan_local(v, &total, part, lanes);  // its __syncthreads publishes next_s
        const int next = next_s;
        publish_aggregate(state, tile, total);
#if PREFETCH
        int w[TILE_ITEMS];
        if (next < tiles) load_tile(x, next * TILE, n, w);  // in flight during the look-back
#endif
        finish_tile(y, state, tile, n, v, offset, total, &prefix_s, &sum_s);
        if (next >= tiles) return;
#if PREFETCH
#pragma unroll
        for (int k = 0; k < TILE_ITEMS; ++k) v[k] = w[k];
#else
        load_tile(x, next * TILE, n, v);
#endif
        tile = next;
    }
#else
#if IN_ORDER
    const int tile = blockIdx.x;
#else
    if (threadIdx.x == 0) tile_id = atomicAdd(ticket, 1);
    __syncthreads();
    const int tile = tile_id;
#endif
    load_tile(x, tile * TILE, n, v);
    const int offset = scan_local(v, &total, part, lanes);
    publish_aggregate(state, tile, total);
    finish_tile(y, state, tile, n, v, offset, total, &prefix_s, &sum_s);
#endif
#endif
}
