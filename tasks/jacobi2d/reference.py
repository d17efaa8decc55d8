"""Jacobi sweep: a smooth field plus noise, float64 reference, CuPy comparator."""

import numpy as np


def make_inputs(sizes, rng):
    ny, nx = sizes["ny"], sizes["nx"]
    # Noise in (-1, 1) on a smooth ramp in (-0.5, 0.5): neighbours differ, so a kernel that
    # reads the wrong neighbour or skips the boundary copy is wrong by far more than the tolerance.
    u = rng.uniform(-1.0, 1.0, size=(ny, nx)).astype(np.float32)
    u += np.linspace(-0.5, 0.5, nx, dtype=np.float32)[None, :] * np.float32(rng.uniform(-1.0, 1.0))
    return {"u": u}


def reference(inputs, sizes):
    u = inputs["u"].astype(np.float64)
    v = u.copy()
    v[1:-1, 1:-1] = 0.25 * ((u[:-2, 1:-1] + u[2:, 1:-1]) + (u[1:-1, :-2] + u[1:-1, 2:]))
    return {"v": v}


def library(inputs, sizes):
    import cupy as cp

    u = inputs["u"]
    v = u.copy()
    v[1:-1, 1:-1] = cp.float32(0.25) * ((u[:-2, 1:-1] + u[2:, 1:-1]) + (u[1:-1, :-2] + u[1:-1, 2:]))
    return {"v": v}


def torch_eager(inputs, sizes):
    import torch

    u = torch.as_tensor(inputs["u"], device="cuda")
    v = u.clone()
    v[1:-1, 1:-1] = 0.25 * ((u[:-2, 1:-1] + u[2:, 1:-1]) + (u[1:-1, :-2] + u[1:-1, 2:]))
    return v
