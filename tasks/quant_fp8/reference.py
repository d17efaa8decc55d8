"""Per-row quantisation of bfloat16 to float8_e4m3fn: inputs drawn in float32 and rounded to
bfloat16 (ml_dtypes), rows of their own magnitude, some with one large outlier, and a row of
zeros; float64 reference; PyTorch comparators (CuPy has neither bfloat16 nor fp8).

The reference gives q as the exact quotient x / scale (saturated, not rounded to e4m3): task.toml
says why the check needs it so. A bfloat16 or fp8 buffer reaches `library` and `torch_eager` as a
CuPy array of its bits (uint16, uint8; fsr.dtypes.device_dtype): they view it as torch.bfloat16
without a copy and return q's bits the same way.
"""

import ml_dtypes
import numpy as np

E4M3_MAX = 448.0  # the largest finite float8_e4m3fn value


def make_inputs(sizes, rng):
    rows, cols = sizes["rows"], sizes["cols"]
    # Row maxima span two decades (a kernel with one scale for all rows, or none, is wrong; a
    # wider span would leave the smallest scales under the magnitude floor: task.toml). About a
    # quarter of the rows hold one element 30 to 1000 times their spread, so the rest of such a
    # row quantises to small values, subnormals among them.
    top = (4.0 * 10.0 ** rng.uniform(-1.0, 1.0, size=rows)).astype(np.float32)
    spread = top / 4.0
    outliers = np.flatnonzero(rng.random(rows) < 0.25)
    spread[outliers] = top[outliers] / rng.uniform(30.0, 1000.0, size=outliers.size).astype(np.float32)
    x = rng.standard_normal((rows, cols), dtype=np.float32) * spread[:, None]
    sign = rng.choice(np.array([-1.0, 1.0], np.float32), size=outliers.size)
    x[outliers, rng.integers(0, cols, size=outliers.size)] = sign * top[outliers]
    if rows > 1:  # one row of zeros: its scale is 1 (a kernel dividing by its max writes NaN)
        x[rng.integers(0, rows)] = 0.0
    return {"x": x.astype(ml_dtypes.bfloat16)}


def reference(inputs, sizes):
    x = inputs["x"].astype(np.float64)
    amax = np.abs(x).max(axis=1)
    scale = np.where(amax > 0, amax / E4M3_MAX, 1.0)
    q = np.clip(x / scale[:, None], -E4M3_MAX, E4M3_MAX)
    return {"q": q, "scale": scale}


def _bf16(a):
    """A bfloat16 tensor viewing the CuPy array of bfloat16 bits (through int16, which both know)."""
    import cupy as cp
    import torch

    return torch.as_tensor(a.view(cp.int16), device="cuda").view(torch.bfloat16)


def _quantise(x):
    """PyTorch's quantisation of a bfloat16 tensor: (q as float8_e4m3fn, scale as float32). The
    clamp saturates: PyTorch's conversion to float8_e4m3fn gives NaN above 448."""
    import torch

    amax = x.abs().amax(dim=1, keepdim=True).float()
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    q = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale.squeeze(1)


def library(inputs, sizes):
    import cupy as cp
    import torch

    q, scale = _quantise(_bf16(inputs["x"]))
    return {"q": cp.asarray(q.view(torch.uint8)), "scale": cp.asarray(scale)}  # q's bits, as fsr holds them


def torch_eager(inputs, sizes):
    return _quantise(_bf16(inputs["x"]))
