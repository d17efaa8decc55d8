"""Histogram: clustered int32 values (half uniform, half in a narrow band around a random bin),
exact reference, CuPy comparator."""

import numpy as np


def make_inputs(sizes, rng):
    n, bins = sizes["n"], sizes["bins"]
    x = rng.integers(0, bins, size=n, dtype=np.int32)
    # About half the values in a band of about bins / 16 around a random centre: hot bins that
    # many threads of a warp hit at once, and counts far from uniform.
    # The centre keeps four widths from either end where bins allow: a band clipped at an end would
    # pile a quarter of all values on one bin in about one draw of ten (the hottest bin's share
    # from 2.7% to 26%), and a kernel's time would depend on the draw, not on the kernel (a
    # certification on fresh inputs against a screening on others).
    width = max(bins / 32, 0.5)
    margin = min(int(4 * width), (bins - 1) // 2)
    hot = np.flatnonzero(rng.random(n, dtype=np.float32) < 0.5)
    band = rng.standard_normal(hot.size, dtype=np.float32) * width + rng.integers(margin, bins - margin)
    x[hot] = np.clip(np.rint(band), 0, bins - 1).astype(np.int32)
    return {"x": x}


def reference(inputs, sizes):
    return {"counts": np.bincount(inputs["x"], minlength=sizes["bins"]).astype(np.int64)}


def library(inputs, sizes):
    import cupy as cp

    return {"counts": cp.bincount(inputs["x"], minlength=sizes["bins"])}


def torch_eager(inputs, sizes):
    import torch

    return torch.bincount(torch.as_tensor(inputs["x"], device="cuda"), minlength=sizes["bins"])
