"""bfloat16 GEMM: uniform(-1, 1) inputs rounded to bfloat16 (outputs vary in sign and size),
float64 reference from those bfloat16 values, cuBLAS through torch.matmul on bfloat16 tensors."""

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)


def make_inputs(sizes, rng):
    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    a = rng.uniform(-1.0, 1.0, size=(m, k)).astype(np.float32).astype(BF16)
    b = rng.uniform(-1.0, 1.0, size=(k, n)).astype(np.float32).astype(BF16)
    return {"A": a, "B": b}


def reference(inputs, sizes):
    return {"C": inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)}


def _bf16_tensor(a):
    """A bfloat16 CUDA tensor viewing device array `a` (no copy): a tensor already, an array that
    speaks DLPack in bfloat16, or 16-bit integers holding bfloat16 bits."""
    import torch

    if isinstance(a, torch.Tensor):
        t = a
    elif hasattr(a, "__dlpack__"):
        t = torch.from_dlpack(a)
    else:
        t = torch.as_tensor(a, device="cuda")
    return t if t.dtype == torch.bfloat16 else t.view(torch.bfloat16)


def library(inputs, sizes):
    import torch

    return {"C": torch.matmul(_bf16_tensor(inputs["A"]), _bf16_tensor(inputs["B"]))}


def torch_eager(inputs, sizes):
    import torch

    return torch.matmul(_bf16_tensor(inputs["A"]), _bf16_tensor(inputs["B"]))
