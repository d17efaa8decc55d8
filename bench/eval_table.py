"""Markdown table from `fsr eval --json --repeat 2` outputs (one JSON per line on stdin, each
prefixed by `task kernel-path|`): verdict, both medians and their difference, spread, speedups,
roofline figures, resources."""

from __future__ import annotations

import json
import sys


def main() -> None:
    print("| task | kernel | verdict | median us (run 1 / run 2, diff) | p10-p90 us | vs baseline | vs library "
          "| GB/s | TFLOP/s | of ceiling | regs / spills / smem B |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for line in sys.stdin:
        if "|" not in line:
            continue
        label, payload = line.split("|", 1)
        task, kernel = label.split()
        runs = [json.loads(x) for x in payload.strip().split("\t")]
        r = runs[-1]
        t = r.get("timing") or {}
        meds = [x["timing"]["median_us"] for x in runs if x.get("timing")]
        diff = f"{100 * abs(meds[0] - meds[-1]) / meds[0]:.1f}%" if len(meds) > 1 else ""
        lib = f"{r['library_us'] / t['median_us']:.2f}x" if r.get("library_us") and t else ""
        res = r["resources"]
        print(f"| {task} | {kernel} | {r['verdict']} | {' / '.join(f'{m:.1f}' for m in meds)} ({diff}) "
              f"| {t.get('p10_us', 0):.1f}-{t.get('p90_us', 0):.1f} | {r['speedup'] or 0:.2f}x | {lib} "
              f"| {t.get('gbps', 0):.0f} | {t.get('tflops', 0):.2f} | {100 * t.get('ceiling_fraction', 0):.1f}% "
              f"| {res['registers']} / {res['spill_bytes']} / {res['smem_static_bytes']} |")


if __name__ == "__main__":
    main()
