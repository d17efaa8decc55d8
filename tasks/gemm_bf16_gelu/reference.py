"""bfloat16 GEMM with bias and GELU (tanh form): A uniform(-1, 1), B uniform(-1, 1) * sqrt(3 / K)
and bias uniform(-1, 1), all rounded to bfloat16, so that A @ B + bias (standard deviation about
0.8) spans GELU's curve at every K; float64 reference from those bfloat16 values; cuBLAS and
PyTorch's GELU kernel through torch on bfloat16 tensors (CuPy has no bfloat16: the buffers reach
`library` and `torch_eager` as CuPy uint16 arrays of bfloat16 bits, which PyTorch views without a
copy)."""

import math

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)


def make_inputs(sizes, rng):
    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    a = rng.uniform(-1.0, 1.0, size=(m, k)).astype(np.float32).astype(BF16)
    b = (rng.uniform(-1.0, 1.0, size=(k, n)) * math.sqrt(3.0 / k)).astype(np.float32).astype(BF16)
    bias = rng.uniform(-1.0, 1.0, size=n).astype(np.float32).astype(BF16)
    return {"A": a, "B": b, "bias": bias}


def gelu_tanh(x):
    """0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), in place on float64 x (one temporary:
    the reference runs at every test size of every evaluation)."""
    u = x * x
    u *= 0.044715
    u += 1.0
    u *= x
    u *= math.sqrt(2.0 / math.pi)
    np.tanh(u, out=u)
    u += 1.0
    x *= 0.5
    x *= u
    return x


def reference(inputs, sizes):
    x = inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)
    x += inputs["bias"].astype(np.float64)
    return {"C": gelu_tanh(x)}


def _bf16(a):
    """A bfloat16 tensor viewing a CuPy array of bfloat16 bits, as fsr holds such a buffer on the
    device (uint16: CuPy has no bfloat16), through int16, which both know; no copy."""
    import cupy as cp
    import torch

    return torch.as_tensor(a.view(cp.int16), device="cuda").view(torch.bfloat16)


def _bits(t):
    """A bfloat16 tensor's bits as a CuPy uint16 array, as fsr holds bfloat16 outputs."""
    import cupy as cp
    import torch

    return cp.asarray(t.view(torch.int16)).view(cp.uint16)


def _gemm_gelu(inputs):
    # addmm fuses the bias into cuBLAS's GEMM (its epilogue), as a production caller would write
    # nn.Linear; GELU is then one elementwise kernel: the library's best without a compiler
    import torch

    x = torch.addmm(_bf16(inputs["bias"]), _bf16(inputs["A"]), _bf16(inputs["B"]))
    return torch.nn.functional.gelu(x, approximate="tanh")


def library(inputs, sizes):
    return {"C": _bits(_gemm_gelu(inputs))}


def torch_eager(inputs, sizes):
    return _gemm_gelu(inputs)
