"""Axis scales of the report's figures: the latency range a reader came for, ticks that let the
final value be read off, whole-number count ticks."""

from __future__ import annotations

import math

import pytest

from fsr.report.scales import count_dtick, latency_scale, latency_ticks, tick_text

GELU = {"baseline": 260.3, "library": 2880.4, "PyTorch eager": 176.1, "roofline": 178.0}


def test_a_slow_library_does_not_set_the_range_it_is_noted_off_the_chart() -> None:
    scale = latency_scale([301.8, 240.0, 190.0, 174.2], GELU)
    assert scale.low_us < 174.2 and 301.8 < scale.high_us < 400  # the curve, not 2,880 us
    assert scale.off_chart == {"library": "above"}
    assert all(scale.low_us <= GELU[n] <= scale.high_us for n in ("baseline", "PyTorch eager", "roofline"))
    # a plot 250 px tall: the kernel, PyTorch and the roofline are apart by several pixels each
    px = 250 / (math.log10(scale.high_us) - math.log10(scale.low_us))
    assert px * (math.log10(176.1) - math.log10(174.2)) > 3.0  # under 1 px with 2,880 us in range


def test_a_reference_far_below_the_curve_is_off_the_chart_below() -> None:
    scale = latency_scale([6384.4, 9000.0], {"roofline": 100.0, "library": 2679.6})
    assert scale.off_chart == {"roofline": "below"}
    assert scale.low_us <= 2679.6  # near enough to draw


def test_a_flat_curve_gets_a_range_wide_enough_for_ticks() -> None:
    scale = latency_scale([174.2, 174.2])
    assert scale.high_us / scale.low_us >= 1.12
    assert len(scale.ticks_us) >= 4
    assert all(scale.low_us <= t <= scale.high_us for t in scale.ticks_us)


def test_no_curve_takes_the_references_and_nothing_gives_a_valid_range() -> None:
    assert latency_scale([], {"baseline": 100.0}).low_us < 100.0 < latency_scale([], {"baseline": 100.0}).high_us
    assert latency_scale([None, float("nan")]).low_us > 0


@pytest.mark.parametrize(("low", "high"), [(165.0, 310.0), (5500.0, 30000.0), (102.0, 6857.0), (5.0, 5.5),
                                           (0.9, 1e6), (1.1, 1.3)])
def test_ticks_are_several_inside_the_range_and_increasing(low: float, high: float) -> None:
    ticks = latency_ticks(low, high)
    assert len(ticks) >= 4
    assert ticks == sorted(set(ticks)) and low <= ticks[0] and ticks[-1] <= high


def test_a_range_under_a_decade_gets_more_than_its_powers_of_ten() -> None:
    assert latency_ticks(5500.0, 30000.0) == [7000.0, 10000.0, 15000.0, 20000.0, 30000.0]
    assert latency_ticks(165.0, 310.0) == [175.0, 200.0, 225.0, 250.0, 275.0, 300.0]


def test_tick_labels_are_in_full() -> None:
    assert [tick_text(v) for v in (2500.0, 172.5, 0.25, 20000.0)] == ["2,500", "172.5", "0.25", "20,000"]


@pytest.mark.parametrize(("tallest", "step"), [(1, 1), (2, 1), (6, 1), (7, 2), (13, 5), (40, 10), (1000, 200)])
def test_count_ticks_are_whole_numbers(tallest: int, step: int) -> None:
    assert count_dtick(tallest) == step
