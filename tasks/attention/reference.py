"""Attention: q and k of a per-head scale (scores from flat to peaked), v around a per-head
offset, float64 reference a few heads at a time (the benchmark's scores in float64 at once would
take 1 GiB), cuBLAS-backed CuPy comparator."""

import numpy as np

D = 64  # head dimension: the literal in task.toml's shapes


def make_inputs(sizes, rng):
    bh, seq = sizes["bh"], sizes["seq"]
    out = {}
    for name in ("q", "k", "v"):
        out[name] = rng.standard_normal((bh, seq, D), dtype=np.float32)
    # Score standard deviation scale^2 in [0.5, 2.5]: some heads nearly uniform, some peaked.
    scale = np.sqrt(rng.uniform(0.5, 2.5, size=(bh, 1, 1))).astype(np.float32)
    out["q"] *= scale
    out["k"] *= scale
    out["v"] += rng.uniform(-1.0, 1.0, size=(bh, 1, D)).astype(np.float32)
    return out


def reference(inputs, sizes):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    o = np.empty(q.shape, np.float64)
    seq = q.shape[1]
    step = max(1, (1 << 22) // (seq * seq))  # heads at a time: scores of at most 32 MiB
    for h in range(0, q.shape[0], step):
        part = slice(h, h + step)
        s = q[part].astype(np.float64) @ k[part].astype(np.float64).transpose(0, 2, 1)
        s *= 1.0 / np.sqrt(D)
        s -= s.max(axis=2, keepdims=True)
        np.exp(s, out=s)
        o[part] = (s @ v[part].astype(np.float64)) / s.sum(axis=2, keepdims=True)
    return {"o": o}


def library(inputs, sizes):
    import cupy as cp

    s = cp.matmul(inputs["q"], inputs["k"].transpose(0, 2, 1)) * cp.float32(1.0 / np.sqrt(D))
    s = cp.exp(s - s.max(axis=2, keepdims=True))
    return {"o": cp.matmul(s, inputs["v"]) / s.sum(axis=2, keepdims=True)}


def torch_eager(inputs, sizes):
    import torch

    q, k, v = (torch.as_tensor(inputs[n], device="cuda") for n in ("q", "k", "v"))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
