"""The importer's pure parts (no torch): a file's sizes, and shapes fitted as expressions."""

from __future__ import annotations

import pytest

from fsr import expr
from fsr.kernelbench import fit, poly, sizes

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


CHANNELS = [{"a": 192, "b": 208, "c": 48, "d": 64, "H": 224}, {"a": 7, "b": 11, "c": 3, "d": 5, "H": 17},
            {"a": 8, "b": 11, "c": 3, "d": 5, "H": 17}, {"a": 7, "b": 12, "c": 3, "d": 5, "H": 17},
            {"a": 7, "b": 11, "c": 4, "d": 5, "H": 17}, {"a": 7, "b": 11, "c": 3, "d": 6, "H": 17},
            {"a": 7, "b": 11, "c": 3, "d": 5, "H": 18}, {"a": 1, "b": 1, "c": 1, "d": 1, "H": 1}]


@pytest.mark.parametrize(("truth", "text"), [
    (lambda s: s["a"] + s["b"] + s["c"] + s["d"], "a + b + c + d"),  # an Inception module's branches concatenated
    (lambda s: s["a"] + 6 * s["b"], "a + 6*b"),                      # a dense block's `in + 6 * growth`
    (lambda s: 2 * s["a"] - s["c"] + 3, "2*a + 3 - c"),
])
def test_integer_combinations_of_several_sizes_are_fitted(truth, text):
    points = [(p, truth(p)) for p in CHANNELS]
    found = fit.fit(points, ["a", "b", "c", "d", "H"])
    assert found == text and fit.check(found, points)
    assert fit.check(found, [({"a": 100, "b": 3, "c": 41, "d": 9, "H": 2}, truth({"a": 100, "b": 3, "c": 41, "d": 9}))])


def test_a_combination_is_refused_where_no_integer_one_is_exact_or_the_points_cannot_pin_it():
    assert fit.fit([(p, p["a"] * p["b"] + p["c"]) for p in CHANNELS], ["a", "b", "c", "d", "H"]) is None
    assert fit.fit([(p, (p["a"] + p["b"]) // 2 + p["c"] * 3 // 2) for p in CHANNELS], ["a", "b", "c", "d", "H"]) is None
    few = CHANNELS[:4]  # a, b and the constant: three unknowns from four points is no evidence
    assert fit.fit([(p, p["a"] + p["b"]) for p in few], ["a", "b"]) is None


def test_bytes_collect_into_one_polynomial_with_floor_divisions_kept_whole():
    layers = [poly.product([{(): 4}, poly.of(f"c + {i}*g")]) for i in range(6)]
    pooled = poly.product([{(): 4}, poly.of("B"), poly.of("(H - 3) // 2 + 1")])
    text = poly.text(poly.total([*layers, pooled, {(): 12}]))
    assert text == "4*((H - 3) // 2)*B + 4*B + 24*c + 60*g + 12"
    for at in ({"B": 3, "H": 17, "c": 5, "g": 7}, {"B": 1, "H": 4, "c": 1, "g": 2}):
        want = sum(4 * (at["c"] + i * at["g"]) for i in range(6)) + 4 * at["B"] * ((at["H"] - 3) // 2 + 1) + 12
        assert expr.evaluate(text, at) == want


def test_each_size_is_also_varied_alone_so_a_module_that_takes_one_image_extent_keeps_five_sizes():
    bench = {"batch": 10, "height": 224, "classes": 1000}
    large = {"batch": 1, "height": 224, "classes": 1}  # a deep convnet: the image shrinks no further
    tried = sizes.candidates(bench, list(bench), large, {})
    runs = [s for s in tried if s["height"] == 224]
    assert len(runs) >= 5 and bench not in tried and len(set(map(str, tried))) == len(tried)
    assert all(sum(s[n] != large[n] for n in bench) <= 1 for s in runs[1:])  # one size alone past large itself
    assert {s["batch"] for s in runs} >= {1, 3, 5, 7} and {s["classes"] for s in runs} >= {1, 3, 5, 7, 13}
    assert all(1 <= s[n] <= bench[n] for s in tried for n in bench)


def test_a_size_varied_alone_keeps_its_step_and_its_followers():
    bench = {"C": 64, "D": 64, "H": 32}
    tried = sizes.candidates(bench, ["C", "H"], {"C": 16, "D": 16, "H": 16}, {"C": 8}, {"D": "C"})
    assert all(s["C"] % 8 == 0 and s["D"] == s["C"] for s in tried)
    assert {"C": 16, "D": 16, "H": 5} in tried and {"C": 8, "D": 8, "H": 16} in tried


def test_the_integer_elements_of_a_top_level_list_are_sizes_and_follow_when_the_file_runs():
    from fsr.kernelbench import runtime

    source = "layer_sizes = [400, 300]\nwidths = [64] * 3\nN = 9\nshape = [N, 2]\nsizes = list(layer_sizes)\n"
    assert sizes.constants(source) == {"layer_sizes_0": 400, "layer_sizes_1": 300, "N": 9}
    namespace = runtime.load(source, {"layer_sizes_1": 7, "N": 9})
    assert namespace["layer_sizes"] == [400, 7] and namespace["sizes"] == [400, 7] and namespace["widths"] == [64] * 3
