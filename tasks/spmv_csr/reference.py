"""CSR SpMV: row lengths from a lognormal spread (empty rows to thousands of entries), columns
mostly in a band around the diagonal (as in meshes and most real matrices) with some anywhere,
positive values, float64 reference, cuSPARSE comparator through cupyx.

The comparators time the product alone: the sparse matrix (for cupyx, in the canonical form its
product needs: columns sorted within each row, duplicates summed) is built by the first call with
an input set and reused by every later one, as a caller that multiplies by one matrix many times
would; cupyx's product then goes straight to cuSPARSE's SpMV."""

import numpy as np

BAND = 128.0  # spread (standard deviation) of a row's columns around its diagonal position
FAR = 0.1  # fraction of entries at uniformly random columns

# Comparator matrices by input set: (ids of row_ptr, col_idx, vals, rows, cols) -> (those arrays,
# the matrix). Holding the arrays keeps their ids from being reused for other arrays while cached;
# the key is by identity, so a caller that rewrites an array in place gets the matrix it first made.
_MATRICES: dict = {}
_TENSORS: dict = {}


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
    return {"y": _cached(_MATRICES, inputs, sizes, _cupyx_matrix) @ inputs["x"]}


def torch_eager(inputs, sizes):
    import torch

    return torch.mv(_cached(_TENSORS, inputs, sizes, _torch_matrix), torch.as_tensor(inputs["x"], device="cuda"))


def _cached(cache, inputs, sizes, build):
    arrays = (inputs["row_ptr"], inputs["col_idx"], inputs["vals"])
    key = (*map(id, arrays), sizes["rows"], sizes["cols"])
    if key not in cache:
        cache[key] = (arrays, build(*arrays, (sizes["rows"], sizes["cols"])))
    return cache[key][1]


def _cupyx_matrix(row_ptr, col_idx, vals, shape):
    import cupyx.scipy.sparse as sparse

    a = sparse.csr_matrix((vals, col_idx, row_ptr), shape=shape)  # views the arrays, no copy
    # cupyx's product first makes the matrix canonical (a sort of every entry, tens of ms at the
    # benchmark size) unless it is known to be: do it here, once. It copies, never writes the inputs.
    a.sum_duplicates()
    return a


def _torch_matrix(row_ptr, col_idx, vals, shape):
    import torch

    return torch.sparse_csr_tensor(torch.as_tensor(row_ptr, device="cuda"), torch.as_tensor(col_idx, device="cuda"),
                                   torch.as_tensor(vals, device="cuda"), size=shape)
