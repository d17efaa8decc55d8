"""Max pooling 3x3, stride 2, padding 1: normal inputs with a per-channel offset, float64
reference, CuPy (ndimage) comparator."""

import numpy as np


def make_inputs(sizes, rng):
    n, c, h, w = sizes["N"], sizes["C"], sizes["H"], sizes["W"]
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    x += rng.uniform(-4.0, 4.0, size=(1, c, 1, 1)).astype(np.float32)  # all-negative planes too
    return {"x": x}


def reference(inputs, sizes):
    x = inputs["x"].astype(np.float64)
    h, w = sizes["H"], sizes["W"]
    ho, wo = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    padded = np.full(x.shape[:2] + (h + 3, w + 3), -np.inf)
    padded[:, :, 1:h + 1, 1:w + 1] = x
    y = np.full(x.shape[:2] + (ho, wo), -np.inf)
    for di in range(3):
        for dj in range(3):
            np.maximum(y, padded[:, :, di:di + 2 * ho:2, dj:dj + 2 * wo:2], out=y)
    return {"y": y}


def library(inputs, sizes):
    import cupy as cp
    import cupyx.scipy.ndimage as ndimage

    full = ndimage.maximum_filter(inputs["x"], size=(1, 1, 3, 3), mode="constant", cval=-cp.inf)
    return {"y": full[:, :, ::2, ::2]}


def torch_eager(inputs, sizes):
    import torch

    return torch.nn.functional.max_pool2d(torch.as_tensor(inputs["x"], device="cuda"), 3, stride=2, padding=1)
