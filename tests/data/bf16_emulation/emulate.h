// CPU emulation of the CUDA subset that tasks/gemm_bf16*/template.cu and
// tasks/attention_bf16*/template.cu use, for tests/unit/test_bf16_gemm_emulation.py and
// test_attention_bf16_emulation.py: one block at a time, each CUDA thread a coroutine;
// __syncthreads is a block barrier, ldmatrix, mma.sync, __shfl_xor_sync and __syncwarp are warp
// collectives run once all 32 lanes have arrived, with the PTX ISA's fragment layouts. cp.async copies land at issue
// (LATE = 0: a stage overwritten while other warps still read it shows) or at the wait_group that
// must cover them (LATE = 1: a stage read before it landed shows). ORDER 1 and 2 run one warp at a
// time up to its next barrier, first to last or last to first, so that a missing barrier shows.
// Shared memory starts NaN-filled, accesses past the launch's bytes and cp.async reads outside
// the inputs stop the run.
// The scheduler and the launch are compiled once, apart (this file with EMULATE_IMPLEMENTATION
// defined); a kernel's program includes the declarations and links that object.
// A thread's stack is set up with makecontext; switches between a thread and the scheduler
// are _setjmp/_longjmp, which leave the signal mask alone (swapcontext makes two system calls a
// switch, and a warp collective switches once a lane).
#pragma once
#undef _FORTIFY_SOURCE  // its longjmp check refuses a jump to another stack
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using std::min;
using std::max;

#define __device__
#define __host__
#define __forceinline__ inline
#define __global__
#define __shared__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct __nv_bfloat16 {
    uint16_t bits;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
struct uint4 {
    unsigned x, y, z, w;
};
inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fc0};
    u += 0x7fffu + ((u >> 16) & 1u);
    return {(uint16_t)(u >> 16)};
}
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
inline float __expf(float x) { return expf(x); }
inline float __fdividef(float a, float b) { return a / b; }

struct Dim {
    unsigned x = 1, y = 1, z = 1;
};
extern Dim threadIdx, blockIdx, gridDim, blockDim;

constexpr size_t SMEM_CAP = 256 * 1024;
extern unsigned char smem_raw[SMEM_CAP];
inline size_t __cvta_generic_to_shared(const void* p) {
    const unsigned char* q = (const unsigned char*)p;
    if (q < smem_raw || q >= smem_raw + SMEM_CAP) {
        fprintf(stderr, "shared address outside shared memory\n");
        exit(3);
    }
    return (size_t)(q - smem_raw);
}

// ---- the scheduler -------------------------------------------------------------------------
enum State { RUN, AT_SYNC, AT_WARP, DONE };
enum Coll { LDM, LDM_T, MMA, SHFL, SYNCW };
struct Copy {
    unsigned dst;
    unsigned char data[16];
};
struct Thread {
    jmp_buf jb;  // where the thread continues
    State state = RUN;
    Coll coll;
    unsigned addr;
    unsigned out[4];
    unsigned a[4], b[2];
    float c[4];
    float shfl;  // __shfl_xor_sync: the value given, then the value received
    int shfl_mask;
    std::vector<std::vector<Copy>> groups{1};  // committed groups, then the open one
};
extern std::vector<Thread> threads;
extern jmp_buf sched_jb;
extern int cur;
extern bool LATE;
extern int ORDER;
extern size_t smem_bytes;  // the launch's dynamic shared memory: accesses past it fail
extern void (*kernel_entry)();
extern std::vector<std::pair<const unsigned char*, size_t>> inputs;  // cp.async may read only inside these

inline Thread& me() { return threads[cur]; }
inline void yield_to_sched() {
    if (!_setjmp(threads[cur].jb)) _longjmp(sched_jb, 1);
}
inline void check_smem(unsigned off, unsigned n) {
    if (off + n > smem_bytes) {
        fprintf(stderr, "shared access [%u, %u) past the launch's %zu bytes\n", off, off + n, smem_bytes);
        exit(3);
    }
}

inline void __syncthreads() {
    me().state = AT_SYNC;
    yield_to_sched();
}

// cp.async.cg 16 bytes, zero-filled where !ok
inline void emu_copy16(unsigned dst, const void* src, bool ok) {
    check_smem(dst, 16);
    if (dst % 16) {
        fprintf(stderr, "cp.async destination not 16-byte aligned\n");
        exit(3);
    }
    Copy c;
    c.dst = dst;
    if (ok) {
        if ((uintptr_t)src % 16) {
            fprintf(stderr, "cp.async source not 16-byte aligned\n");
            exit(3);
        }
        bool inside = false;
        for (auto& [p, n] : inputs)
            inside |= (const unsigned char*)src >= p && (const unsigned char*)src + 16 <= p + n;
        if (!inside) {
            fprintf(stderr, "cp.async reads outside the input buffers\n");
            exit(3);
        }
        memcpy(c.data, src, 16);
    } else {
        memset(c.data, 0, 16);
    }
    if (LATE) me().groups.back().push_back(c);
    else memcpy(smem_raw + dst, c.data, 16);
}
inline void emu_commit() { me().groups.emplace_back(); }
inline void emu_wait(int n) {
    auto& g = me().groups;  // the last is the open group; committed ones before it
    int committed = (int)g.size() - 1;
    int land = committed - n;
    for (int i = 0; i < land; ++i)
        for (auto& c : g[i]) memcpy(smem_raw + c.dst, c.data, 16);
    if (land > 0) g.erase(g.begin(), g.begin() + land);
}

inline void emu_ldmatrix(unsigned* r, unsigned addr, bool trans) {
    check_smem(addr, 16);
    if (addr % 16) {
        fprintf(stderr, "ldmatrix row address not 16-byte aligned\n");
        exit(3);
    }
    me().coll = trans ? LDM_T : LDM;
    me().addr = addr;
    me().state = AT_WARP;
    yield_to_sched();
    for (int i = 0; i < 4; ++i) r[i] = me().out[i];
}
inline void emu_mma(float* c, const unsigned* a, const unsigned* b) {
    Thread& t = me();
    memcpy(t.a, a, 16);
    memcpy(t.b, b, 8);
    memcpy(t.c, c, 16);
    t.coll = MMA;
    t.state = AT_WARP;
    yield_to_sched();
    memcpy(c, me().c, 16);
}

inline float __shfl_xor_sync(unsigned, float v, int mask) {
    me().shfl = v;
    me().shfl_mask = mask;
    me().coll = SHFL;
    me().state = AT_WARP;
    yield_to_sched();
    return me().shfl;
}
inline void __syncwarp() {
    me().coll = SYNCW;
    me().state = AT_WARP;
    yield_to_sched();
}

// ---- the launch's declarations --------------------------------------------------------------
void run_block(unsigned bx, unsigned by, unsigned nt);
std::vector<uint16_t> read_file(const char* path, size_t n);
__nv_bfloat16* aligned_copy(const std::vector<uint16_t>& v);
int emulate_main(int argc, char** argv, void (*entry)(), bool has_bias);
extern const __nv_bfloat16 *gA, *gB, *gBias;
extern __nv_bfloat16* gC;
extern int gM, gN, gK;

#ifdef EMULATE_IMPLEMENTATION
Dim threadIdx, blockIdx, gridDim, blockDim;
alignas(1024) unsigned char smem_raw[SMEM_CAP];
std::vector<Thread> threads;
std::vector<char*> stacks;  // one a thread, kept from block to block (malloc: pages a thread never touches stay untouched)
constexpr size_t STACK_BYTES = 1 << 17;
jmp_buf sched_jb;
ucontext_t sched_ctx, start_ctx;  // only to enter a new thread's stack
int cur = 0;
bool LATE = false;
int ORDER = 0;
size_t smem_bytes = 0;
void (*kernel_entry)() = nullptr;
std::vector<std::pair<const unsigned char*, size_t>> inputs;

inline float lo_f(unsigned w) { return __bfloat162float({(uint16_t)(w & 0xffff)}); }
inline float hi_f(unsigned w) { return __bfloat162float({(uint16_t)(w >> 16)}); }

// PTX ISA fragment layouts: ldmatrix gives lane l of matrix j the pair at row l / 4, columns
// 2 (l % 4) and + 1 (.trans: rows 2 (l % 4) and + 1 of column l / 4), rows addressed by lanes
// 8 j .. 8 j + 7. mma m16n8k16 .row.col: g = l / 4, t = l % 4; a0 = A[g][2t..], a1 = A[g + 8][2t..],
// a2 = A[g][2t + 8..], a3 = A[g + 8][2t + 8..]; b0 = B[2t..][g], b1 = B[2t + 8..][g];
// c0, c1 = C[g][2t], C[g][2t + 1]; c2, c3 = C[g + 8][2t], C[g + 8][2t + 1].
void run_collective(int w) {
    Thread* L = &threads[32 * w];
    Coll k = L[0].coll;
    for (int l = 0; l < 32; ++l)
        if (L[l].coll != k) {
            fprintf(stderr, "warp %d: lanes at different collectives\n", w);
            exit(3);
        }
    if (k == SHFL) {
        float given[32];
        for (int l = 0; l < 32; ++l) given[l] = L[l].shfl;
        for (int l = 0; l < 32; ++l) L[l].shfl = given[(l ^ L[l].shfl_mask) & 31];
    } else if (k == SYNCW) {
    } else if (k == LDM || k == LDM_T) {
        for (int l = 0; l < 32; ++l)
            for (int j = 0; j < 4; ++j) {
                uint16_t e0, e1;
                if (k == LDM) {
                    const unsigned row = L[8 * j + l / 4].addr;
                    memcpy(&e0, smem_raw + row + 4 * (l % 4), 2);
                    memcpy(&e1, smem_raw + row + 4 * (l % 4) + 2, 2);
                } else {
                    memcpy(&e0, smem_raw + L[8 * j + 2 * (l % 4)].addr + 2 * (l / 4), 2);
                    memcpy(&e1, smem_raw + L[8 * j + 2 * (l % 4) + 1].addr + 2 * (l / 4), 2);
                }
                L[l].out[j] = (unsigned)e0 | (unsigned)e1 << 16;
            }
    } else {
        double A[16][16], B[16][8], C[16][8];
        for (int l = 0; l < 32; ++l) {
            const int g = l / 4, t = l % 4;
            const int ar[4] = {g, g + 8, g, g + 8}, ac[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
            for (int i = 0; i < 4; ++i) {
                A[ar[i]][ac[i]] = lo_f(L[l].a[i]);
                A[ar[i]][ac[i] + 1] = hi_f(L[l].a[i]);
            }
            for (int i = 0; i < 2; ++i) {
                B[2 * t + 8 * i][g] = lo_f(L[l].b[i]);
                B[2 * t + 8 * i + 1][g] = hi_f(L[l].b[i]);
            }
            C[g][2 * t] = L[l].c[0];
            C[g][2 * t + 1] = L[l].c[1];
            C[g + 8][2 * t] = L[l].c[2];
            C[g + 8][2 * t + 1] = L[l].c[3];
        }
        float D[16][8];
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 8; ++j) {
                double s = C[i][j];
                for (int q = 0; q < 16; ++q) s += A[i][q] * B[q][j];
                D[i][j] = (float)s;
            }
        for (int l = 0; l < 32; ++l) {
            const int g = l / 4, t = l % 4;
            L[l].c[0] = D[g][2 * t];
            L[l].c[1] = D[g][2 * t + 1];
            L[l].c[2] = D[g + 8][2 * t];
            L[l].c[3] = D[g + 8][2 * t + 1];
        }
    }
    for (int l = 0; l < 32; ++l) L[l].state = RUN;
}

// Entered once on the thread's own stack: saves where the thread starts and returns to the
// scheduler; the scheduler's first jump there runs the kernel. It never returns.
void thread_main() {
    if (!_setjmp(me().jb)) swapcontext(&start_ctx, &sched_ctx);
    kernel_entry();
    me().state = DONE;
    _longjmp(sched_jb, 1);
}

void run_block(unsigned bx, unsigned by, unsigned nt) {
    threads.assign(nt, Thread());
    while (stacks.size() < nt) stacks.push_back((char*)malloc(STACK_BYTES));
    for (unsigned i = 0; i < nt; ++i) {
        getcontext(&start_ctx);
        start_ctx.uc_stack.ss_sp = stacks[i];
        start_ctx.uc_stack.ss_size = STACK_BYTES;
        start_ctx.uc_link = nullptr;
        makecontext(&start_ctx, thread_main, 0);
        cur = (int)i;
        swapcontext(&sched_ctx, &start_ctx);
    }
    blockIdx.x = bx;
    blockIdx.y = by;
    const unsigned nw = nt / 32;
    for (;;) {
        // ORDER 0: every thread in turn, then what can be resolved (warps in near lockstep); 1 (2):
        // one warp at a time, first (last) to last (first), each run until it waits at a barrier
        // or ends, so warps drift as far apart as the barriers allow.
        bool any = false, resolved = false;
        for (unsigned k = 0; k < nw; ++k) {
            const unsigned w = ORDER == 2 ? nw - 1 - k : k;
            for (;;) {
                bool ran = false;
                for (unsigned l = 0; l < 32; ++l) {
                    const unsigned i = 32 * w + l;
                    if (threads[i].state != RUN) continue;
                    cur = (int)i;
                    threadIdx.x = i;
                    if (!_setjmp(sched_jb)) _longjmp(threads[i].jb, 1);
                    any = ran = true;
                }
                unsigned at = 0;
                for (int l = 0; l < 32; ++l) at += threads[32 * w + l].state == AT_WARP;
                if (at == 32 && ORDER != 0) {
                    run_collective((int)w);
                    resolved = true;
                    continue;
                }
                if (!ran || ORDER == 0) break;
            }
        }
        unsigned done = 0, sync = 0;
        for (auto& t : threads) done += t.state == DONE, sync += t.state == AT_SYNC;
        if (done == nt) break;
        for (unsigned w = 0; w < nw; ++w) {
            unsigned at = 0;
            for (int l = 0; l < 32; ++l) at += threads[32 * w + l].state == AT_WARP;
            if (at == 32) run_collective((int)w), resolved = true;
        }
        if (!resolved && sync == nt) {
            for (auto& t : threads) t.state = RUN;
            resolved = true;
        }
        if (!any && !resolved) {
            fprintf(stderr, "deadlock: %u done, %u at a barrier of %u threads\n", done, sync, nt);
            exit(3);
        }
    }
}

// ---- the launch ----------------------------------------------------------------------------
const __nv_bfloat16 *gA, *gB, *gBias;
__nv_bfloat16* gC;
int gM, gN, gK;

std::vector<uint16_t> read_file(const char* path, size_t n) {
    std::vector<uint16_t> v(n);
    FILE* f = fopen(path, "rb");
    if (n && fread(v.data(), 2, n, f) != n) exit(4);
    fclose(f);
    return v;
}
__nv_bfloat16* aligned_copy(const std::vector<uint16_t>& v) {
    const size_t bytes = (v.size() * 2 + 255) / 256 * 256 + 256;
    void* p = aligned_alloc(256, bytes);
    memset(p, 0xff, bytes);  // NaN past the end: a stray read that counts shows in C
    memcpy(p, v.data(), v.size() * 2);
    inputs.push_back({(const unsigned char*)p, v.size() * 2});
    return (__nv_bfloat16*)p;
}
// The run: argv = M N K grid.x grid.y threads smem_bytes LATE folder ORDER; reads folder/A, B and
// bias (raw bfloat16), writes folder/C. C starts NaN-filled between guard elements.
int emulate_main(int argc, char** argv, void (*entry)(), bool has_bias) {
    if (argc != 11) return 5;
    gM = atoi(argv[1]); gN = atoi(argv[2]); gK = atoi(argv[3]);
    const unsigned gx = atoi(argv[4]), gy = atoi(argv[5]), nt = atoi(argv[6]);
    smem_bytes = atoi(argv[7]);
    LATE = atoi(argv[8]);
    ORDER = atoi(argv[10]);
    const std::string dir = argv[9];
    if (smem_bytes > SMEM_CAP) { fprintf(stderr, "smem %zu too big\n", smem_bytes); return 3; }
    gA = aligned_copy(read_file((dir + "/A").c_str(), (size_t)gM * gK));
    gB = aligned_copy(read_file((dir + "/B").c_str(), (size_t)gK * gN));
    gBias = aligned_copy(read_file((dir + "/bias").c_str(), has_bias ? gN : 0));
    const size_t nc = (size_t)gM * gN, guard = 64;
    std::vector<uint16_t> cbuf(nc + 2 * guard, 0x7fc0);  // NaN: an unwritten element fails
    for (size_t i = 0; i < guard; ++i) cbuf[i] = cbuf[nc + guard + i] = 0x1234;
    __nv_bfloat16* cmem = aligned_copy(cbuf);
    gC = cmem + guard;
    gridDim.x = gx; gridDim.y = gy; blockDim.x = nt;
    kernel_entry = entry;
    for (unsigned by = 0; by < gy; ++by)
        for (unsigned bx = 0; bx < gx; ++bx) {
            memset(smem_raw, 0xff, smem_bytes);  // NaN bf16: a read of what no copy wrote shows
            memset(smem_raw + smem_bytes, 0xa5, SMEM_CAP - smem_bytes);
            run_block(bx, by, nt);
            for (size_t i = smem_bytes; i < SMEM_CAP; ++i)
                if (smem_raw[i] != 0xa5) { fprintf(stderr, "shared byte %zu past the launch's written\n", i); return 3; }
        }
    memcpy(cbuf.data(), cmem, cbuf.size() * 2);
    for (size_t i = 0; i < guard; ++i)
        if (cbuf[i] != 0x1234 || cbuf[nc + guard + i] != 0x1234) { fprintf(stderr, "write outside C\n"); return 3; }
    FILE* f = fopen((dir + "/C").c_str(), "wb");
    fwrite(cbuf.data() + guard, 2, nc, f);
    fclose(f);
    return 0;
}
#endif  // EMULATE_IMPLEMENTATION
