/* fsr
[tunables]
BLOCK = [256, 128, 512]  # threads per block
TPR = [8, 32, 16, 4, 2]  # consecutive threads sharing a row (a power of two up to a warp)
ITEMS = [8, 12, 16, 4]   # with MERGE: merge items (row ends and entries) per thread; a tile is BLOCK * ITEMS
ILP = [8, 1, 2, 4]       # without VEC4 or MERGE: entries a lane loads (stride TPR) before it gathers their x
CHUNK = [1, 4, 16]       # without MERGE: a block sweeps RPB * CHUNK consecutive rows, RPB at a time (x reuse in L1)
LONG = [64, 256, 128, 1024]  # with ADAPTIVE: rows longer than this many entries are summed by a whole warp
ROUNDS = [32, 16, 64, 8, 4]  # with SEGMENT: rounds of 32 * RUN entries a warp's tile
RUN = [8, 16, 4]             # with SEGMENT: consecutive entries a lane sums in a round

[features]
WARP_SHUFFLE = [0, 1]   # a row's partial sums combined with __shfl_xor_sync (else through shared memory)
VEC4 = [0, 1]           # int4 and float4 loads of col_idx and vals over each row's (MERGE: each tile's) 16-byte-aligned middle
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads (x gathers through the read-only path)
STREAM = [0, 1]         # col_idx and vals loaded with __ldcs (evict first), so x stays in the caches
UNROLL = [0, 1]         # the row loops unrolled by 2: more loads in flight per thread
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(BLOCK): registers bounded for the block size
ADAPTIVE = [0, 1]       # rows longer than LONG left by their TPR-lane group to the whole warp, one after another
MERGE = [0, 1]          # merge-path SpMV: each tile an equal share of row ends + entries, row carries across tiles by look-back (TPR unused)
AHEAD = [0, 1]          # with SEGMENT: the next round's col_idx and vals loaded into registers before this round's gathers and row work
SEGMENT = [0, 1]        # warp tiles of ROUNDS rounds of RUN consecutive entries a lane, rows closed in the lane, joined across lanes by a segmented warp scan and across tiles by look-back (with WARP_SHUFFLE and UNROLL; over MERGE; TPR unused)

[[scratch]]
name = "state"
dtype = "int64"
count = "MERGE * cdiv(rows + nnz, BLOCK * ITEMS) + SEGMENT * WARP_SHUFFLE * UNROLL * cdiv(nnz + 1, 32 * RUN * ROUNDS) + 1"
zero = true

[[scratch]]
name = "ticket"
dtype = "int32"
count = "1"
zero = true

[[launch]]
kernel = "spmv_template"
grid = ["SEGMENT * WARP_SHUFFLE * UNROLL * cdiv(cdiv(nnz + 1, 32 * RUN * ROUNDS), BLOCK // 32) + (1 - SEGMENT * WARP_SHUFFLE * UNROLL) * (MERGE * cdiv(rows + nnz, BLOCK * ITEMS) + (1 - MERGE) * cdiv(rows, BLOCK // TPR * CHUNK))"]
block = ["BLOCK"]
args = ["row_ptr", "col_idx", "vals", "x", "y", "state", "ticket", "rows", "nnz"]
*/
// Feature template: CSR SpMV with TPR threads per row (vector CSR): lane l of a row's group
// sums entries l, l + TPR, ... (with VEC4, four consecutive entries at a time over the row's
// 16-byte-aligned middle); the group adds its partial sums. No thread returns early: groups
// past the last row run empty, so every lane reaches each shuffle and barrier.
#define RPB (BLOCK / TPR)  // rows per block
#define SEG (SEGMENT && WARP_SHUFFLE && UNROLL)  // SEGMENT shuffles, and unrolls its loops over register arrays
// Loops of a fixed trip count over register arrays: unrolled on request with UNROLL (the
// compiler unrolls such short loops of its own accord too).
#if UNROLL
#define FIXED_LOOP _Pragma("unroll")
#else
#define FIXED_LOOP
#endif

#if READONLY
#define RESTRICT __restrict__
#define LOAD(p) __ldg(p)
#else
#define RESTRICT
#define LOAD(p) (*(p))
#endif

#if STREAM
#define LOAD_STREAM(p) __ldcs(p)
#else
#define LOAD_STREAM(p) LOAD(p)
#endif

#if LAUNCH_BOUNDS && SEG && AHEAD && RUN > 8
// SEGMENT with AHEAD holds a second round of col_idx and vals: at RUN 16, 96 registers, which a
// tighter bound would spill.
#define KERNEL_BOUNDS __launch_bounds__(BLOCK, 1)
#elif LAUNCH_BOUNDS && SEG
// SEGMENT: at least 32 warps an SM (64 registers a thread, no spills). With (BLOCK, 1) ptxas
// takes 70 and leaves 24 warps an SM; with the one-argument form it caps at 32 and spills.
#define KERNEL_BOUNDS __launch_bounds__(BLOCK, 1024 / BLOCK)
#elif LAUNCH_BOUNDS && ADAPTIVE
// The same bound, but ptxas then leaves the warp pass its few registers above 32 (with the
// one-argument form it caps at 32 for BLOCK = 128 and spills 8 bytes).
#define KERNEL_BOUNDS __launch_bounds__(BLOCK, 1)
#elif LAUNCH_BOUNDS
#define KERNEL_BOUNDS __launch_bounds__(BLOCK)
#else
#define KERNEL_BOUNDS
#endif

#if UNROLL
#define ROW_LOOP _Pragma("unroll 2")
#else
#define ROW_LOOP
#endif

// Sum of v over a group of G consecutive lanes (G a power of two up to 32), in every lane.
#if WARP_SHUFFLE
template <int G>
__device__ __forceinline__ float group_sum(float v, float*) {
FIXED_LOOP
    for (int mask = G / 2; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, mask);
    return v;
}
#else
// A group lies within one warp (G <= 32), so warp barriers suffice; the last one keeps the next
// call's writes from overtaking a lane still reading r[0].
template <int G>
__device__ __forceinline__ float group_sum(float v, float* red) {
    const int l = threadIdx.x % G;
    float* r = red + (threadIdx.x - l);
    r[l] = v;
    __syncwarp();
    for (int half = G / 2; half > 0; half >>= 1) {
        if (l < half) r[l] += r[l + half];
        __syncwarp();
    }
    const float total = r[0];
    __syncwarp();
    return total;
}
#endif

// Entry k's product vals[k] * x[col_idx[k]].
__device__ __forceinline__ float entry(const int* RESTRICT col_idx, const float* RESTRICT vals,
                                       const float* RESTRICT x, int k) {
    return LOAD_STREAM(vals + k) * LOAD(x + LOAD_STREAM(col_idx + k));
}

// Lane l's partial sum of entries start .. end - 1 of a row shared by G lanes: entries l, l + G,
// ... (VEC4: four consecutive entries at a time over the row's 16-byte-aligned middle; else ILP
// entries at a time, their col_idx and vals loaded before any of their x gathers).
template <int G>
__device__ __forceinline__ float row_part(const int* RESTRICT col_idx, const float* RESTRICT vals,
                                          const float* RESTRICT x, int start, int end, int l) {
    float s = 0.0f;
#if VEC4
    const int body = min((start + 3) & ~3, end);  // entries before it: scalar head
    ROW_LOOP
    for (int k = start + l; k < body; k += G) s += entry(col_idx, vals, x, k);
    ROW_LOOP
    for (int q = body / 4 + l; q < end / 4; q += G) {
        const int4 c = LOAD_STREAM(reinterpret_cast<const int4*>(col_idx) + q);
        const float4 v = LOAD_STREAM(reinterpret_cast<const float4*>(vals) + q);
        s += v.x * LOAD(x + c.x) + v.y * LOAD(x + c.y) + v.z * LOAD(x + c.z) + v.w * LOAD(x + c.w);
    }
    ROW_LOOP
    for (int k = max(body, end & ~3) + l; k < end; k += G) s += entry(col_idx, vals, x, k);
#else
    const int stride = ILP * G;
    ROW_LOOP
    for (int k = start + l; k < end; k += stride) {
        // entry k + i * G where below end (else column 0, value 0: x[0] is read, adds nothing)
        int c[ILP];
        float v[ILP];
#pragma unroll
        for (int i = 0; i < ILP; ++i) {
            const bool has = i == 0 || k + i * G < end;
            c[i] = has ? LOAD_STREAM(col_idx + k + i * G) : 0;
            v[i] = has ? LOAD_STREAM(vals + k + i * G) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < ILP; ++i) s += v[i] * LOAD(x + c[i]);
    }
#endif
    return s;
}

#if MERGE || SEG
// The first p in [lo, hi) with after(p) (hi if none), for a predicate false then true along p; a
// warp, every lane gets it: 32-ary search, 4 rounds for 2^20 candidates.
template <typename After>
__device__ __forceinline__ int warp_search(int lo, int hi, After after) {
    const int lane = threadIdx.x % 32;
    while (lo < hi) {
        const int step = (hi - lo + 31) / 32, p = lo + lane * step;
        const unsigned ballot = __ballot_sync(0xffffffffu, p >= hi || after(p));
        const int f = ballot ? __ffs(ballot) - 1 : 32;
        if (f == 0) break;  // p_0 = lo
        const int new_hi = f < 32 ? min(lo + f * step, hi) : hi;
        lo = lo + (f - 1) * step + 1;
        hi = new_hi;
    }
    return lo;
}

// Decoupled look-back over `state` (one word a tile, zeroed before the launch): a tile publishes
// (flag << 32 | float bits) of its tail sum, FLAG_PRE once that includes every earlier tile's share
// of its last row, FLAG_AGG before its own look-back.
#define FLAG_AGG 1ull
#define FLAG_PRE 2ull
typedef unsigned long long word_t;

__device__ __forceinline__ word_t read_state(const word_t* p) { return *(const volatile word_t*)p; }
__device__ __forceinline__ void write_state(word_t* p, word_t flag, float value) {
    *(volatile word_t*)p = (flag << 32) | __float_as_uint(value);  // one 64-bit store: never torn
}

// Sum of the tail sums of the tiles before `tile` that share its first row (tile > 0).
__device__ __forceinline__ float carry_before(const word_t* state, int tile) {
    float sum = 0.0f;
    for (int b = tile - 1;; --b) {
        word_t s = read_state(state + b);
        while ((s >> 32) == 0) {
            __nanosleep(64);
            s = read_state(state + b);
        }
        sum += __uint_as_float((unsigned)(s & 0xffffffffu));
        if ((s >> 32) == FLAG_PRE) return sum;
    }
}

// Publishes the tile's tail sum (of its entries after its last row end: all of them if none
// ended); returns the earlier tiles' share of the row open at its start (0 for tile 0). A tile
// that ended a row looks back only if `needed`; one that did not must, to publish FLAG_PRE.
__device__ __forceinline__ float publish(word_t* state, int tile, bool ended, float tail, bool needed) {
    if (tile == 0 || ended) {
        write_state(state + tile, FLAG_PRE, tail);
        return tile > 0 && needed ? carry_before(state, tile) : 0.0f;
    }
    write_state(state + tile, FLAG_AGG, tail);
    const float carry = carry_before(state, tile);
    write_state(state + tile, FLAG_PRE, carry + tail);
    return carry;
}
#endif

#if MERGE
// ---- MERGE: merge-path SpMV (Merrill & Garland). The merge of row ends (row p ends after entry
// row_ptr[p + 1] - 1) with entries is cut into tiles of TILE items; tile t is diagonals
// t * TILE .. (t + 1) * TILE. A diagonal d's coordinate is (i row ends, d - i entries) with i the
// number of rows p < rows with row_ptr[p + 1] + p + 1 <= d. Each thread consumes ITEMS items in
// order; partial sums of a row cut by thread boundaries are joined by a segmented block scan, and
// by tile boundaries through the look-back above (`publish`). Tiles are numbered by a ticket in
// start order, so every tile waited on is running or done.
#define TILE (BLOCK * ITEMS)
#if UNROLL
#define MERGE_LOAD_LOOP _Pragma("unroll 8")
#define MERGE_FIXED_LOOP _Pragma("unroll")
#else
#define MERGE_LOAD_LOOP
#define MERGE_FIXED_LOOP
#endif

// Row ends before diagonal d (a warp, every lane gets it).
__device__ __forceinline__ int rows_before(const int* RESTRICT row_ptr, int rows, int nnz, int d) {
    return warp_search(max(0, d - nnz), min(d, rows), [&](int p) { return LOAD(row_ptr + p + 1) + p + 1 > d; });
}

struct Seg {
    bool ended;  // a row ended in this span
    float sum;   // the sum after the last row end in the span (all of it if none)
};
__device__ __forceinline__ Seg seg_join(Seg a, Seg b) { return {a.ended || b.ended, b.ended ? b.sum : a.sum + b.sum}; }

__device__ __forceinline__ void spmv_merge(const int* RESTRICT row_ptr, const int* RESTRICT col_idx,
                                           const float* RESTRICT vals, const float* RESTRICT x, float* RESTRICT y,
                                           word_t* state, int* ticket, int rows, int nnz) {
    __shared__ int s_items[TILE + 1];  // row ends of the tile's rows, then the tile's products
    __shared__ int s_coord[4], s_tile;
    __shared__ bool s_wended[BLOCK / 32];
    __shared__ float s_wsum[BLOCK / 32], s_carry;
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    if (t == 0) s_tile = atomicAdd(ticket, 1);
    __syncthreads();
    const int tile = s_tile;
    if (warp < 2) {  // warp 0: the tile's start, warp 1: its end
        const int d = min((tile + warp) * TILE, rows + nnz);
        const int i = rows_before(row_ptr, rows, nnz, d);
        if (lane == 0) {
            s_coord[2 * warp] = i;
            s_coord[2 * warp + 1] = d - i;
        }
    }
    __syncthreads();
    const int i0 = s_coord[0], j0 = s_coord[1], n_rows = s_coord[2] - i0, n_nz = s_coord[3] - j0;
    int* s_end = s_items;  // s_end[k] = row_ptr[i0 + k + 1], k <= n_rows (nnz past the last row)
    float* s_prod = reinterpret_cast<float*>(s_items + n_rows + 1);
    for (int k = t; k <= n_rows; k += BLOCK) s_end[k] = i0 + k < rows ? LOAD(row_ptr + i0 + k + 1) : nnz;
#if VEC4
    {  // four consecutive entries a thread at a time (int4, float4) over the tile's 16-byte-aligned middle
        static_assert(ITEMS % 4 == 0, "MERGE with VEC4: whole quads of items per thread");
        const int end = j0 + n_nz, body = min((j0 + 3) & ~3, end);  // scalar head before body
        for (int k = j0 + t; k < body; k += BLOCK) s_prod[k - j0] = entry(col_idx, vals, x, k);
MERGE_FIXED_LOOP
        for (int u = 0; u < ITEMS / 4; ++u) {  // at most TILE / 4 quads in a tile
            const int q = body / 4 + u * BLOCK + t;
            if (q < end / 4) {
                const int4 c = LOAD_STREAM(reinterpret_cast<const int4*>(col_idx) + q);
                const float4 v = LOAD_STREAM(reinterpret_cast<const float4*>(vals) + q);
                float* out = s_prod + 4 * q - j0;
                out[0] = v.x * LOAD(x + c.x);
                out[1] = v.y * LOAD(x + c.y);
                out[2] = v.z * LOAD(x + c.z);
                out[3] = v.w * LOAD(x + c.w);
            }
        }
        for (int k = max(body, end & ~3) + t; k < end; k += BLOCK) s_prod[k - j0] = entry(col_idx, vals, x, k);
    }
#else
MERGE_LOAD_LOOP
    for (int q = 0; q < ITEMS; ++q) {  // UNROLL: up to 8 entries' loads in flight a thread (more spill under launch bounds)
        const int k = q * BLOCK + t;
        if (k < n_nz) s_prod[k] = LOAD_STREAM(vals + j0 + k) * LOAD(x + LOAD_STREAM(col_idx + j0 + k));
    }
#endif
    __syncthreads();

    // This thread's items: local diagonals dt .. dt + ITEMS - 1 (those below n_rows + n_nz).
    const int dt = min(t * ITEMS, n_rows + n_nz);
    int lo = max(0, dt - n_nz), hi = min(dt, n_rows);
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (s_end[mid] + mid + 1 <= j0 + dt) lo = mid + 1;
        else hi = mid;
    }
    // Rows after the thread's first row end are whole here and written at once; the first one
    // waits for the sums before it (earlier threads and tiles).
    int ri = lo, zi = dt - lo;
    const int first_row = ri;
    float run = 0.0f, first_sum = 0.0f;
    bool ended = false;
MERGE_FIXED_LOOP
    for (int k = 0; k < ITEMS; ++k) {
        if (dt + k < n_rows + n_nz) {
            if (j0 + zi < s_end[ri]) {
                run += s_prod[zi];
                ++zi;
            } else {
                if (ended) y[i0 + ri] = run;
                else first_sum = run;
                ended = true;
                run = 0.0f;
                ++ri;
            }
        }
    }

    // Segmented exclusive scan of (ended, tail sum) over the block's threads: `exc` joins the
    // threads before this one, `all` the whole block.
    Seg inc = {ended, run}, exc, all;
#if WARP_SHUFFLE
MERGE_FIXED_LOOP
    for (int dd = 1; dd < 32; dd *= 2) {
        const bool up_e = __shfl_up_sync(0xffffffffu, inc.ended, dd);
        const float up_s = __shfl_up_sync(0xffffffffu, inc.sum, dd);
        if (lane >= dd) inc = seg_join({up_e, up_s}, inc);
    }
    exc = {__shfl_up_sync(0xffffffffu, inc.ended, 1), __shfl_up_sync(0xffffffffu, inc.sum, 1)};
    if (lane == 0) exc = {false, 0.0f};
    if (lane == 31) {
        s_wended[warp] = inc.ended;
        s_wsum[warp] = inc.sum;
    }
    __syncthreads();
    Seg before = {false, 0.0f};
    all = {false, 0.0f};
MERGE_FIXED_LOOP
    for (int w = 0; w < BLOCK / 32; ++w) {
        const Seg ws = {s_wended[w], s_wsum[w]};
        if (w < warp) before = seg_join(before, ws);
        all = seg_join(all, ws);
    }
    exc = seg_join(before, exc);
#else
    // Hillis-Steele over the block in shared memory (read, barrier, write, barrier).
    __shared__ bool s_ended[BLOCK];
    __shared__ float s_sum[BLOCK];
    s_ended[t] = inc.ended;
    s_sum[t] = inc.sum;
    __syncthreads();
    for (int dd = 1; dd < BLOCK; dd *= 2) {
        const Seg up = {t >= dd && s_ended[t - dd], t >= dd ? s_sum[t - dd] : 0.0f};
        __syncthreads();
        inc = seg_join(up, inc);
        s_ended[t] = inc.ended;
        s_sum[t] = inc.sum;
        __syncthreads();
    }
    exc = t > 0 ? Seg{s_ended[t - 1], s_sum[t - 1]} : Seg{false, 0.0f};
    all = {s_ended[BLOCK - 1], s_sum[BLOCK - 1]};
#endif

    if (t == 0) s_carry = publish(state, tile, all.ended, all.sum, true);
    __syncthreads();
    // The thread's first row end closes the row open at its start: it adds the sums before it.
    if (ended) y[i0 + first_row] = first_sum + exc.sum + (exc.ended ? 0.0f : s_carry);
}
#endif

#if SEG
// ---- SEGMENT: warp tiles of ROUNDS rounds of 32 * RUN consecutive entries; in a round lane l sums
// the RUN entries from base + RUN l on (RUN / 4 int4 and float4 loads, then RUN gathers of x),
// closing each row whose end falls in its run. Its first row is found among a window of 32
// row ends held one a lane. Partial sums of rows cut by lane boundaries are joined by a
// segmented warp scan (a row's head in an earlier lane, and the carry from earlier rounds). Tile t
// owns entries [t E, (t + 1) E) and the rows that end in (t E, (t + 1) E] (tile 0 also the empty
// rows before any entry); the row running into a tile from before it is finished by the look-back
// of MERGE, over `state`, in ticket order (a block's warps take consecutive tiles by one ticket).
// With AHEAD the next round's loads are in flight while a round is summed.
#define SEG_ROUND (32 * RUN)
#define SEG_E (SEG_ROUND * ROUNDS)
#define NO_ROW 0x7fffffff  // the end of a row past the last

__device__ __forceinline__ int row_end(const int* RESTRICT row_ptr, int rows, int r) {
    return r < rows ? LOAD(row_ptr + r + 1) : NO_ROW;
}

// A lane's run: entries k0 .. k0 + RUN - 1 (past nnz: column 0, value 0).
__device__ __forceinline__ void load_run(const int* RESTRICT col_idx, const float* RESTRICT vals, int k0, int nnz,
                                         int* col, float* val) {
    if (k0 + RUN <= nnz) {
#pragma unroll
        for (int q = 0; q < RUN / 4; ++q) {
#if VEC4
            const int4 c = LOAD_STREAM(reinterpret_cast<const int4*>(col_idx + k0) + q);
            const float4 v = LOAD_STREAM(reinterpret_cast<const float4*>(vals + k0) + q);
            col[4 * q] = c.x, col[4 * q + 1] = c.y, col[4 * q + 2] = c.z, col[4 * q + 3] = c.w;
            val[4 * q] = v.x, val[4 * q + 1] = v.y, val[4 * q + 2] = v.z, val[4 * q + 3] = v.w;
#else
#pragma unroll
            for (int i = 4 * q; i < 4 * q + 4; ++i) {
                col[i] = LOAD_STREAM(col_idx + k0 + i);
                val[i] = LOAD_STREAM(vals + k0 + i);
            }
#endif
        }
    } else {
#pragma unroll
        for (int i = 0; i < RUN; ++i) {
            col[i] = k0 + i < nnz ? LOAD_STREAM(col_idx + k0 + i) : 0;
            val[i] = k0 + i < nnz ? LOAD_STREAM(vals + k0 + i) : 0.0f;
        }
    }
}

__device__ __forceinline__ void spmv_segment(const int* RESTRICT row_ptr, const int* RESTRICT col_idx,
                                             const float* RESTRICT vals, const float* RESTRICT x, float* RESTRICT y,
                                             word_t* state, int* ticket, int rows, int nnz) {
    static_assert(RUN % 4 == 0, "SEGMENT: whole quads of entries a lane");
    const int lane = threadIdx.x % 32;
    // The block takes BLOCK / 32 consecutive tiles by one ticket: one atomic on the ticket a block
    // rather than a warp (over 4000 warps start at once on an H200, and their atomics on one word
    // held back the first wave by about 5 us).
    __shared__ int s_ticket;
    if (threadIdx.x == 0) s_ticket = atomicAdd(ticket, 1);
    __syncthreads();
    const int tile = s_ticket * (BLOCK / 32) + threadIdx.x / 32;
    if (tile >= (nnz + SEG_E) / SEG_E) return;  // a warp past the last tile (cdiv(nnz + 1, SEG_E) of them)
    const int first = tile * SEG_E, last = min(first + SEG_E, nnz);
#if AHEAD
    // The next round's run in flight while this one is summed; the first goes out before the search.
    int ncol[RUN];
    float nval[RUN];
    load_run(col_idx, vals, first + RUN * lane, nnz, ncol, nval);
#endif
    // R: the first row not yet written (rows ending by `first` belong to earlier tiles)
    int R = warp_search(0, rows, [&](int p) { return LOAD(row_ptr + p + 1) > first; });
    if (tile == 0)
        for (int r = lane; r < R; r += 32) y[r] = 0.0f;  // empty rows before any entry
    float carry = 0.0f;      // the row open at base: its sum over this tile's entries before base
    float first_val = 0.0f;  // the lane with the end of the row begun before this tile: its sum here
    int first_row = -1;
    bool ended = false;  // a row ended in this tile before base
    for (int base = first; base < last; base += SEG_ROUND) {
        const int k0 = base + RUN * lane;
        float prod[RUN];
        {
            int col[RUN];
            float val[RUN];
#if AHEAD
#pragma unroll
            for (int i = 0; i < RUN; ++i) col[i] = ncol[i], val[i] = nval[i];
            if (base + SEG_ROUND < last) load_run(col_idx, vals, k0 + SEG_ROUND, nnz, ncol, nval);
#else
            load_run(col_idx, vals, k0, nnz, col, val);
#endif
#pragma unroll
            for (int i = 0; i < RUN; ++i) prod[i] = val[i] * LOAD(x + col[i]);
        }
        // The lane's first row: the first with its end past k0. Rows R .. R + 31 one a lane, then
        // a search of row_ptr where the run lies beyond them.
        const int e = row_end(row_ptr, rows, R + lane);
        int n = 0;  // window rows ending by k0
        for (int step = 16; step > 0; step /= 2)
            if (__shfl_sync(0xffffffffu, e, n + step - 1) <= k0) n += step;
        int end = __shfl_sync(0xffffffffu, e, n);
        int r = R + n;
        if (end <= k0) {  // all 32 end by k0
            int lo = R + 32, hi = rows;
            while (lo < hi) {
                const int mid = (lo + hi) / 2;
                if (LOAD(row_ptr + mid + 1) > k0) hi = mid;
                else lo = mid + 1;
            }
            r = lo;
            end = row_end(row_ptr, rows, r);
        }
        // Sum the run, closing rows whose end falls in it: (k0, k0 + RUN].
        float sum = 0.0f, head = 0.0f;  // head: the first row closed here, its sum over this run
        int head_row = -1;
#pragma unroll
        for (int i = 0; i <= RUN; ++i) {
            while (end <= k0 + i) {
                if (head_row < 0) {
                    head_row = r;
                    head = sum;
                } else {
                    y[r] = sum;
                }
                sum = 0.0f;
                end = row_end(row_ptr, rows, ++r);
            }
            if (i < RUN) sum += prod[i];
        }
        // Across lanes: each lane's tail sum, back to the last lane at or before it that closed a row.
        const unsigned closers = __ballot_sync(0xffffffffu, head_row >= 0);
        const unsigned upto = closers & (0xffffffffu >> (31 - lane));
        const int from = upto ? 31 - __clz(upto) : 0;
        float run = sum;
        for (int d = 1; d < 32; d *= 2) {
            const float up = __shfl_up_sync(0xffffffffu, run, d);
            if (lane - d >= from) run += up;
        }
        float before = __shfl_up_sync(0xffffffffu, run, 1);  // the lanes before this one, same row
        if (lane == 0) before = 0.0f;
        const bool closed_before = (closers & ((1u << lane) - 1u)) != 0u;
        if (head_row >= 0) {
            const float value = head + before + (closed_before ? 0.0f : carry);
            if (!closed_before && !ended) {  // begun before this tile: finished after the look-back
                first_row = head_row;
                first_val = value;
            } else {
                y[head_row] = value;
            }
        }
        const float out = __shfl_sync(0xffffffffu, run, 31);
        carry = closers ? out : carry + out;
        ended = ended || closers != 0u;
        R = __shfl_sync(0xffffffffu, r, 31);
    }
    // Publish the tile's tail sum (the row open at its end); add the earlier tiles' share of the
    // row begun before it.
    const bool needed = __any_sync(0xffffffffu, first_row >= 0);
    float prev = 0.0f;
    if (lane == 0) prev = publish(state, tile, ended, carry, needed);
    prev = __shfl_sync(0xffffffffu, prev, 0);
    if (first_row >= 0) y[first_row] = first_val + prev;
}
#endif

extern "C" __global__ void KERNEL_BOUNDS spmv_template(const int* RESTRICT row_ptr, const int* RESTRICT col_idx,
                                                      const float* RESTRICT vals, const float* RESTRICT x,
                                                      float* RESTRICT y, unsigned long long* state, int* ticket,
                                                      int rows, int nnz) {
#if SEG
    spmv_segment(row_ptr, col_idx, vals, x, y, state, ticket, rows, nnz);
    return;
#elif MERGE
    spmv_merge(row_ptr, col_idx, vals, x, y, state, ticket, rows, nnz);
    return;
#endif
    __shared__ float red[BLOCK];
    const int g = threadIdx.x / TPR, l = threadIdx.x % TPR;
    const int block_first = blockIdx.x * (RPB * CHUNK);  // rows <= 2^20: no overflow
    for (int c = 0; c < CHUNK; ++c) {
        const int row = block_first + c * RPB + g;
        int start = 0, end = 0;
        if (row < rows) {
            start = LOAD(row_ptr + row);
            end = LOAD(row_ptr + row + 1);
        }
#if ADAPTIVE
        const bool is_long = end - start > LONG;  // summed below by the whole warp
        float s = row_part<TPR>(col_idx, vals, x, start, is_long ? start : end, l);
#else
        const bool is_long = false;
        float s = row_part<TPR>(col_idx, vals, x, start, end, l);
#endif
        s = group_sum<TPR>(s, red);
        if (l == 0 && row < rows && !is_long) y[row] = s;
#if ADAPTIVE
        // The warp's long rows, one at a time (the ballot is the same in every lane).
        // A leader lane src (a multiple of TPR) holds row + (src - leader) / TPR, an exact division.
        const int lane = threadIdx.x % 32;
        for (unsigned pending = __ballot_sync(0xffffffffu, is_long && l == 0); pending; pending &= pending - 1) {
            const int long_row = row + (__ffs(pending) - 1 - (lane - l)) / TPR;
            const float w = group_sum<32>(row_part<32>(col_idx, vals, x, LOAD(row_ptr + long_row),
                                                       LOAD(row_ptr + long_row + 1), lane), red);
            if (lane == 0) y[long_row] = w;
        }
#endif
    }
}
