"""Axis scales of the report's figures, as pure functions of the figures' data: which latency
range a best-so-far plot shows, its ticks, which reference lines lie off it, and count ticks.

Why a latency range of its own: plotly's autorange covers every trace, so one slow comparator
(a library at 2,880 us against kernels at 174-178 us) squeezes the lines a reader came for into
a few pixels. The range covers the best kernel's curve and the references close to it; a far
reference is named at the plot's edge instead, with its value in the legend.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

NEAR = 3.0  # a reference within this factor of the curve's range is drawn on the plot
MIN_SPAN = 1.12  # the narrowest range shown (high / low): a flat curve still gets readable ticks
PAD = 0.06  # of the range's log span, added on each side so no line sits on the frame
STEPS = (1.0, 2.0, 2.5, 5.0)  # nice tick steps, times a power of ten


@dataclass(frozen=True)
class LatencyScale:
    """A log latency axis: its range in microseconds, its tick values, and the references that
    lie off it ("above" or "below")."""

    low_us: float
    high_us: float
    ticks_us: tuple[float, ...]
    off_chart: Mapping[str, str]

    @property
    def log_range(self) -> list[float]:
        """The range as plotly wants it for a log axis: powers of ten."""
        return [math.log10(self.low_us), math.log10(self.high_us)]


def _positive(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and v == v and math.isfinite(v) and v > 0]


def latency_scale(curve_us: Iterable[float | None], references: Mapping[str, float | None] | None = None,
                  near: float = NEAR) -> LatencyScale:
    """The range that shows the whole of `curve_us` (the best kernel's best-so-far latencies)
    and every reference within a factor `near` of it, widened to at least MIN_SPAN and padded;
    references beyond it are `off_chart`. With no curve, the references set the range."""
    refs = {name: _positive([v])[0] for name, v in (references or {}).items() if _positive([v])}
    curve = _positive(curve_us) or list(refs.values()) or [1.0]
    low, high = min(curve), max(curve)
    close = [v for v in refs.values() if low / near <= v <= high * near]
    low, high = min([low, *close]), max([high, *close])
    if high / low < MIN_SPAN:
        centre = math.sqrt(low * high)
        low, high = centre / math.sqrt(MIN_SPAN), centre * math.sqrt(MIN_SPAN)
    pad = (math.log10(high) - math.log10(low)) * PAD
    low, high = low / 10**pad, high * 10**pad
    off = {name: ("above" if v > high else "below") for name, v in refs.items() if not low <= v <= high}
    return LatencyScale(low, high, tuple(latency_ticks(low, high)), off)


# Tick multiples of each power of ten, coarse to fine; the first that gives enough ticks is used.
MULTIPLES = ((1.0,), (1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0),
             (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0))


def latency_ticks(low: float, high: float, want: int = 6) -> list[float]:
    """Tick values inside [low, high] for a log axis, so that the value at any point can be
    read off: the coarsest of MULTIPLES times each power of ten that gives at least `want` - 2
    ticks, and where even the finest gives fewer (a range under a factor of about 1.5), about
    `want` evenly spaced nice numbers (1, 2, 2.5 or 5 times a power of ten)."""
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for multiples in MULTIPLES:
        ticks = [float(f"{m * 10**e:.10g}") for e in decades for m in multiples if low <= m * 10**e <= high]
        if len(ticks) >= want - 2:
            return ticks
    return _linear_ticks(low, high, want)


def _linear_ticks(low: float, high: float, want: int) -> list[float]:
    raw = (high - low) / want
    power = 10 ** math.floor(math.log10(raw))
    step = next((s * power for s in STEPS if s * power >= raw), 10 * power)
    for _ in range(3):  # a coarse step may leave fewer than three ticks: halve it
        first = math.ceil(low / step) * step
        ticks = [round(first + i * step, 10) for i in range(int((high - first) / step) + 1)]
        if len(ticks) >= 3:
            break
        step /= 2
    return ticks


def tick_text(value_us: float) -> str:
    """A latency tick's label: thousands separated, no trailing zeros ("2,500", "172.5", "0.25")."""
    if value_us >= 1000:
        return f"{value_us:,.0f}"
    return f"{value_us:.4g}"


def count_dtick(max_count: float, most: int = 6) -> int:
    """The step between ticks of a count axis reaching `max_count`: a whole number (1, 2 or 5
    times a power of ten) that gives at most `most` ticks, so no tick is a half evaluation."""
    for exponent in range(16):
        for multiple in (1, 2, 5):
            if max_count / (multiple * 10**exponent) <= most:
                return multiple * 10**exponent
    return 10**16
