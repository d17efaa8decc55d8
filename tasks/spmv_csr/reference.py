"""CSR SpMV: row lengths from a lognormal spread (empty rows to thousands of entries), columns
mostly in a band around the diagonal (as in meshes and most real matrices) with some anywhere,
positive values, float64 reference, cuSPARSE comparator through cupyx."""

import numpy as np

BAND = 128.0  # spread (standard deviation) of a row's columns around its diagonal position
FAR = 0.1  # fraction of entries at uniformly random columns


def make_inputs(sizes, rng):
    rows, cols, nnz = sizes["rows"], sizes["cols"], sizes["nnz"]
    weights = rng.lognormal(0.0, 1.0, size=rows)
    lengths = rng.multinomial(nnz, weights / weights.sum())
    row_ptr = np.zeros(rows + 1, np.int32)
    np.cumsum(lengths, out=row_ptr[1:])
    rows_of = np.repeat(np.arange(rows, dtype=np.int64), lengths)
    near = rows_of * cols // rows + np.rint(rng.standard_normal(nnz, dtype=np.float32) * np.float32(BAND)).astype(np.int64)
    far = np.flatnonzero(rng.random(nnz, dtype=np.float32) < FAR)
    near[far] = rng.integers(0, cols, size=far.size)
    col_idx = (near % cols).astype(np.int32)
    vals = rng.random(nnz, dtype=np.float32)
    vals *= np.float32(0.75)
    vals += np.float32(0.25)
    x = rng.random(cols, dtype=np.float32)
    x += np.float32(0.5)
    return {"row_ptr": row_ptr, "col_idx": col_idx, "vals": vals, "x": x}


def reference(inputs, sizes):
    row_ptr = inputs["row_ptr"]
    rows_of = np.repeat(np.arange(sizes["rows"]), np.diff(row_ptr))
    terms = inputs["vals"].astype(np.float64) * inputs["x"].astype(np.float64)[inputs["col_idx"]]
    return {"y": np.bincount(rows_of, weights=terms, minlength=sizes["rows"])}


def library(inputs, sizes):
    import cupyx.scipy.sparse as sparse

    a = sparse.csr_matrix((inputs["vals"], inputs["col_idx"], inputs["row_ptr"]),
                          shape=(sizes["rows"], sizes["cols"]))
    return {"y": a @ inputs["x"]}


def torch_eager(inputs, sizes):
    import torch

    a = torch.sparse_csr_tensor(torch.as_tensor(inputs["row_ptr"], device="cuda"),
                                torch.as_tensor(inputs["col_idx"], device="cuda"),
                                torch.as_tensor(inputs["vals"], device="cuda"), size=(sizes["rows"], sizes["cols"]))
    torch.mv(a, torch.as_tensor(inputs["x"], device="cuda"))
