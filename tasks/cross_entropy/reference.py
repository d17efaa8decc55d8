"""Cross-entropy per row: logits of their own scale and offset, targets anywhere (the row's
argmax for some rows, so that small losses are checked too), float64 reference, CuPy
comparator."""

import numpy as np

ROWS_PER_BLOCK = 512


def make_inputs(sizes, rng):
    rows, classes = sizes["rows"], sizes["classes"]
    # Offsets make the max subtraction matter; scales spread the losses over two decades.
    offset = rng.uniform(-10.0, 10.0, size=(rows, 1)).astype(np.float32)
    scale = rng.uniform(0.5, 4.0, size=(rows, 1)).astype(np.float32)
    logits = rng.standard_normal((rows, classes), dtype=np.float32)
    logits *= scale
    logits += offset
    target = rng.integers(0, classes, size=rows, dtype=np.int64)
    best = rng.random(rows) < 0.25  # a quarter of the rows: the most likely class, a small loss
    target[best] = logits[best].argmax(axis=1)
    return {"logits": logits, "target": target}


def reference(inputs, sizes):
    logits, target = inputs["logits"], inputs["target"]
    loss = np.empty(logits.shape[0], np.float64)
    for r in range(0, logits.shape[0], ROWS_PER_BLOCK):  # the benchmark's logits in float64: 2 GiB
        x = logits[r:r + ROWS_PER_BLOCK].astype(np.float64)
        m = x.max(axis=1)
        lse = m + np.log(np.exp(x - m[:, None]).sum(axis=1))
        loss[r:r + ROWS_PER_BLOCK] = lse - x[np.arange(x.shape[0]), target[r:r + ROWS_PER_BLOCK]]
    return {"loss": loss}


def library(inputs, sizes):
    import cupy as cp

    x = inputs["logits"]
    m = x.max(axis=1)
    lse = m + cp.log(cp.exp(x - m[:, None]).sum(axis=1))
    return {"loss": lse - x[cp.arange(x.shape[0]), inputs["target"]]}


def torch_eager(inputs, sizes):
    import torch

    x = torch.as_tensor(inputs["logits"], device="cuda")
    t = torch.as_tensor(inputs["target"], device="cuda")
    return torch.nn.functional.cross_entropy(x, t, reduction="none")
