"""GELU (tanh approximation): inputs spread over the curve's bend and both tails, float64
reference, CuPy comparator: the op's ufunc expression fused by cupy.fuse into one elementwise
kernel (CuPy has no GELU; unfused, its nine ufuncs would each pass over memory). CuPy's
elementwise kernels, its own copy included, move about half the bytes a second that PyTorch's
vectorised ones do at this size on an H100 (bench/comparators.py): there, PyTorch is the
stronger comparator."""

import functools

import numpy as np

C = 0.7978845608028654  # sqrt(2 / pi)
K = 0.044715


def make_inputs(sizes, rng):
    # Scale 3: most values in the bend (-3, 3) where the output is nonlinear, and tails on both
    # sides (a kernel that returns max(x, 0) or x is wrong by much more than the tolerance).
    x = rng.standard_normal(sizes["n"], dtype=np.float32)
    x *= np.float32(3.0)
    return {"x": x}


def reference(inputs, sizes):
    x = inputs["x"].astype(np.float64)
    return {"y": 0.5 * x * (1.0 + np.tanh(C * (x + K * x**3)))}


def library(inputs, sizes):
    return {"y": _fused_gelu()(inputs["x"])}


@functools.cache
def _fused_gelu():
    import cupy as cp

    half, one, c, k = cp.float32(0.5), cp.float32(1.0), cp.float32(C), cp.float32(K)  # float32 arithmetic

    @cp.fuse(kernel_name="gelu_tanh")
    def gelu(x):
        return half * x * (one + cp.tanh(c * (x + k * x * x * x)))

    return gelu


def torch_eager(inputs, sizes):
    import torch

    return torch.nn.functional.gelu(torch.as_tensor(inputs["x"], device="cuda"), approximate="tanh")
