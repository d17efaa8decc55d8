"""The importer's pure parts (no torch): a file's sizes, and shapes fitted as expressions."""

from __future__ import annotations

import pytest

from fsr.kernelbench import fit, sizes

POINTS = [{"H": 224, "B": 256}, {"H": 33, "B": 3}, {"H": 17, "B": 5}, {"H": 64, "B": 1},
          {"H": 101, "B": 7}, {"H": 102, "B": 7}, {"H": 103, "B": 7}, {"H": 104, "B": 7}]


def test_sizes_are_integers_from_literals_and_derived_names_are_not():
    source = ("import torch\nN = 2048 * 2\nheight = width = 128\nshape = (N, 1)\nM = N + 1\n"
              "scale = 0.5\nflag = True\nneg = -3\nbig = 2**40\ndepth, rows = 16, 2 * 8\na, b = N, 3\n")
    assert sizes.constants(source) == {"N": 4096, "height": 128, "width": 128, "depth": 16, "rows": 16, "b": 3}


def test_scaling_sizes_leave_out_axes_and_kernel_geometry():
    bench = {"batch_size": 16, "dim": 1, "kernel_size": 11, "stride": 4, "in_channels": 3, "features": 64,
             "dim1": 4096, "groups": 8}
    assert sizes.scaling(bench) == ["batch_size", "features", "dim1"]


@pytest.mark.parametrize("truth", [
    lambda s: (s["H"] + 2 * 2 - 11) // 4 + 1,      # strided convolution, padded
    lambda s: (s["H"] - 1) * 2 - 2 + 3 + 1,          # transposed convolution
    lambda s: s["B"] * s["H"] * s["H"],              # a flattened feature count
    lambda s: ((s["H"] - 2) // 2 + 1 - 3) // 2 + 1,  # pooling, then a strided convolution
    lambda s: 7,
])
def test_fitted_expression_gives_every_value(truth):
    points = [(p, truth(p)) for p in POINTS]
    found = fit.fit(points, ["B", "H"])
    assert found is not None and fit.check(found, points)
    unseen = [{"H": h, "B": 9} for h in range(40, 60)]
    assert fit.check(found, [(p, truth(p)) for p in unseen]), found


def test_a_constant_is_named_after_the_one_fixed_size_with_its_value():
    points = [(p, 64) for p in POINTS]
    assert fit.fit(points, ["B", "H", "C"], fixed={"C": 64}) == "C"
    assert fit.fit(points, ["B", "H", "C", "D"], fixed={"C": 64, "D": 64}) == "64"


def test_no_expression_for_values_outside_the_family():
    points = [(p, (p["H"] * 7919) % 101 + p["B"] % 3) for p in POINTS]
    assert fit.fit(points, ["B", "H"]) is None
