"""bfloat16 causal attention forward (key j > query i excluded): q and k of a per-head
scale (scores from flat to peaked), v around a per-head offset, all rounded to bfloat16; a float64
reference from those bfloat16 values, a block of heads or of query rows at a time (the benchmark's
scores in float64 at once would take 16 GiB). The library comparator is PyTorch's
scaled_dot_product_attention with is_causal pinned to cuDNN's fused attention, PyTorch eager the
same call with the backend PyTorch picks; both on bfloat16 tensors (CuPy has no bfloat16: the
buffers reach `library` and `torch_eager` as CuPy uint16 arrays of bfloat16 bits, which PyTorch
views without a copy)."""

import ml_dtypes
import numpy as np

D = 128  # head dimension: the literal in task.toml's shapes
BF16 = np.dtype(ml_dtypes.bfloat16)
SCORES = 1 << 23  # float64 scores held at once: 64 MiB


def make_inputs(sizes, rng):
    bh, seq = sizes["bh"], sizes["seq"]
    q, k, v = (rng.standard_normal((bh, seq, D), dtype=np.float32) for _ in range(3))
    # Score standard deviation u in [0.5, 2.5] (q and k scaled by sqrt(u)): some heads nearly
    # uniform, some peaked.
    scale = np.sqrt(rng.uniform(0.5, 2.5, size=(bh, 1, 1))).astype(np.float32)
    v += rng.uniform(-1.0, 1.0, size=(bh, 1, D)).astype(np.float32)
    return {"q": (q * scale).astype(BF16), "k": (k * scale).astype(BF16), "v": v.astype(BF16)}


def _attend(q, k, v, first):
    """softmax(q k^T / sqrt(D)) v in float64 for a block of heads, causal: q's rows are queries
    first, first + 1, ... and key j is excluded past query i's position."""
    s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1)
    s *= 1.0 / np.sqrt(D)
    query = np.arange(first, first + q.shape[1])[:, None]
    # a masked copy, not s[:, mask] = -inf: the same values, 20 times faster over 2048 x 4096 scores
    np.copyto(s, -np.inf, where=(np.arange(k.shape[1])[None, :] > query)[None])
    s -= s.max(axis=2, keepdims=True)
    np.exp(s, out=s)
    return (s @ v.astype(np.float64)) / s.sum(axis=2, keepdims=True)


def reference(inputs, sizes):
    """q may hold the last rows of the queries only (a test's slice): the mask is aligned to the
    last key, as FlashAttention-2 aligns it where there are fewer queries than keys."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    bh, rows, keys = q.shape[0], q.shape[1], k.shape[1]
    o = np.empty(q.shape, np.float64)
    heads = max(1, SCORES // max(1, rows * keys))  # heads at a time
    block = max(1, SCORES // max(1, keys))  # query rows at a time where one head's scores exceed it
    for h in range(0, bh, heads):
        hs = slice(h, h + heads)
        for i in range(0, rows, block):
            rs = slice(i, i + block)
            o[hs, rs] = _attend(q[hs, rs], k[hs], v[hs], keys - rows + i)
    return {"o": o}


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

    return cp.asarray(t.contiguous().view(torch.int16)).view(cp.uint16)


def _views(inputs):
    """q, k and v as (1, bh, seq, 128) bfloat16 tensors: SDPA's fused backends (cuDNN, flash) take
    4-dimensional inputs only, a 3-dimensional call would run the unfused math path."""
    return tuple(_bf16(inputs[n]).unsqueeze(0) for n in ("q", "k", "v"))


class CudnnRefused(RuntimeError):
    """cuDNN's fused attention refused a call: the library comparator has no figure there."""


def cudnn_attention(q, k, v):
    """PyTorch's causal attention pinned to cuDNN's fused kernel (sdpa_kernel(CUDNN_ATTENTION)), the
    library the table names (task.toml `library`). Where cuDNN attention refuses the call (an old
    PyTorch or cuDNN, a GPU before sm_80, a shape it does not take) it raises CudnnRefused, with
    PyTorch's reason: no other backend is timed as "cuDNN SDPA". PyTorch's own choice of backend
    is the same call as torch_eager, already the table's PyTorch eager figure; the library's is
    then left out, the refusal its reason."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(q, k, v, is_causal=True)
    except (ImportError, AttributeError, RuntimeError) as e:  # RuntimeError: "No available kernel"
        why = " ".join(str(e).split())[:300] or type(e).__name__
        raise CudnnRefused(f"cuDNN attention refused or failed at q {tuple(q.shape)} under PyTorch "
                           f"{torch.__version__} ({why}); no other backend stands in for it") from e


def library(inputs, sizes):
    return {"o": _bits(cudnn_attention(*_views(inputs)).squeeze(0))}


def torch_eager(inputs, sizes):
    """PyTorch eager as a user calls it: SDPA with the backend PyTorch picks."""
    import torch

    return torch.nn.functional.scaled_dot_product_attention(*_views(inputs), is_causal=True).squeeze(0)
