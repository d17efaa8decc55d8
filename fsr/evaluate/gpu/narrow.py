"""Device code for the low-precision floats (bfloat16, float16, fp8 e4m3fn and e5m2) as fsr's own
check and decoy kernels read and write them (fsr.evaluate.gpu.timed_runs).

CuPy holds such buffers as raw bits (fsr.dtypes.device_dtype), and CuPy compiles fsr's kernels
without an include path fsr controls, so the conversions are written out here in plain C with no
header and no inline PTX (tests/unit/evaluate/gpu/test_narrow_floats.py compiles them for the host and checks
every code against ml_dtypes). To float: exact. From double: to the nearest value, ties to even,
through float (a double rounding no decoy cares about); float16 and fp8 saturate past their
largest finite value (decoys only need a finite, spoiled one), bfloat16 rounds as float does. No cupy import: the source is data.
"""

LOW_PRECISION_SOURCE = r"""
// kind: 0 float16, 1 float8_e4m3fn, 2 float8_e5m2 (bfloat16 is a float's top half: no table).
__device__ __forceinline__ float fsr_narrow_float(unsigned b, int kind) {
    const int mant_bits = kind == 0 ? 10 : kind == 1 ? 3 : 2, exp_bits = kind == 0 ? 5 : kind == 1 ? 4 : 5;
    const unsigned width = 1u + exp_bits + mant_bits, e_max = (1u << exp_bits) - 1u;
    const unsigned e = (b >> mant_bits) & e_max, m = b & ((1u << mant_bits) - 1u);
    const int bias = (1 << (exp_bits - 1)) - 1;
    const bool negative = (b >> (width - 1)) & 1u;
    float magnitude;
    if (kind != 1 && e == e_max) magnitude = m ? __int_as_float(0x7fc00000) : __int_as_float(0x7f800000);
    else if (kind == 1 && e == e_max && m == 7u) magnitude = __int_as_float(0x7fc00000);
    else if (e == 0) magnitude = ldexpf((float)m, 1 - bias - mant_bits);
    else magnitude = ldexpf((float)((1u << mant_bits) | m), (int)e - bias - mant_bits);
    return negative ? -magnitude : magnitude;
}
__device__ __forceinline__ unsigned fsr_narrow_bits(float v, int kind) {
    const unsigned sign_bit = kind == 0 ? 0x8000u : 0x80u;
    const int largest = kind == 0 ? 0x7bff : kind == 1 ? 0x7e : 0x7b;  // the largest finite magnitudes
    if (v != v) return kind == 0 ? 0x7e00u : 0x7fu;
    const unsigned sign = (__float_as_uint(v) >> 31) ? sign_bit : 0u;  // -0 keeps its sign
    const float a = fabsf(v);
    int lo = 0, hi = largest;
    if (a >= fsr_narrow_float((unsigned)hi, kind)) return sign | (unsigned)hi;
    while (hi - lo > 1) {  // magnitudes grow with the code: value(lo) <= a < value(hi)
        const int mid = (lo + hi) / 2;
        if (fsr_narrow_float((unsigned)mid, kind) <= a) lo = mid; else hi = mid;
    }
    const float below = a - fsr_narrow_float((unsigned)lo, kind), above = fsr_narrow_float((unsigned)hi, kind) - a;
    const int code = below < above ? lo : above < below ? hi : ((lo & 1) ? hi : lo);
    return sign | (unsigned)code;
}
__device__ __forceinline__ unsigned short fsr_bf16_bits(float f) {
    const unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
struct fsr_bf16 {
    unsigned short bits;
    __device__ operator float() const { return __uint_as_float((unsigned)bits << 16); }
    __device__ fsr_bf16(double v) : bits(fsr_bf16_bits((float)v)) {}
};
struct fsr_f16 {
    unsigned short bits;
    __device__ operator float() const { return fsr_narrow_float(bits, 0); }
    __device__ fsr_f16(double v) : bits((unsigned short)fsr_narrow_bits((float)v, 0)) {}
};
struct fsr_e4m3 {
    unsigned char bits;
    __device__ operator float() const { return fsr_narrow_float(bits, 1); }
    __device__ fsr_e4m3(double v) : bits((unsigned char)fsr_narrow_bits((float)v, 1)) {}
};
struct fsr_e5m2 {
    unsigned char bits;
    __device__ operator float() const { return fsr_narrow_float(bits, 2); }
    __device__ fsr_e5m2(double v) : bits((unsigned char)fsr_narrow_bits((float)v, 2)) {}
};

// A decoy's spoiled value, `delta` away from the answer v: beyond it for the full-range types;
// across zero for the low-precision ones, where a step beyond v could saturate back onto v.
template <typename T> __device__ __forceinline__ double fsr_spoiled(double v, double delta, const T*) { return v + delta; }
__device__ __forceinline__ double fsr_mirrored(double v, double delta) { return v >= 0.0 ? v - delta : v + delta; }
__device__ __forceinline__ double fsr_spoiled(double v, double delta, const fsr_bf16*) { return fsr_mirrored(v, delta); }
__device__ __forceinline__ double fsr_spoiled(double v, double delta, const fsr_f16*) { return fsr_mirrored(v, delta); }
__device__ __forceinline__ double fsr_spoiled(double v, double delta, const fsr_e4m3*) { return fsr_mirrored(v, delta); }
__device__ __forceinline__ double fsr_spoiled(double v, double delta, const fsr_e5m2*) { return fsr_mirrored(v, delta); }
"""
