"""The report page in a real browser (Debian's chromium, headless): it loads with no errors, every
plot draws, and what a reader relies on holds as drawn: legend entries, islands and reference
lines in distinct colours, a latency axis that covers the best kernel's curve, contents links
that land on a section. Skipped where chromium is absent; .ci/run installs it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fsr import cli
from tests.support.lineage_rows import small_run
from tests.support.report_campaign import write_campaign, write_pair

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")

# Put first in <head>: collects uncaught errors and console.error calls; once the page has
# loaded, writes what it saw (and, per plot, whether it drew its axes and traces) into the DOM
# for --dump-dom to show.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message)));
const __consoleError = console.error;
console.error = (...a) => { window.__errors.push(a.join(' ')); __consoleError(...a); };
window.addEventListener('load', () => setTimeout(() => {
  const plots = [...document.querySelectorAll('.plotly-graph-div')];
  const out = document.createElement('pre');
  out.id = 'fsr-probe';
  const latency = p => /best so far|runs compared/.test((p.layout.title || {}).text);
  out.textContent = JSON.stringify({errors: window.__errors, plots: plots.length,
    drawn: plots.filter(p => p.querySelector('.main-svg') && p.querySelector('.trace')).length,
    figures: plots.filter(p => p.layout && p._fullData).map(p => ({title: (p.layout.title || {}).text,
      legend: [...p.querySelectorAll('.legendtext')].map(t => t.textContent),
      traces: p._fullData.map(d => ({name: d.name, colour: (d.line && d.line.color) || String((d.marker || {}).color),
                                     y: latency(p) ? Array.from(d.y) : []})),
      yaxis: {type: p._fullLayout.yaxis.type, range: p._fullLayout.yaxis.range,
              ticks: [...p.querySelectorAll('.ytick text')].map(t => t.textContent)}})),
    links: [...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute('href').slice(1)),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id)});
  document.body.appendChild(out);
}, 500));
</script>"""


def open_in_chromium(page: Path, tmp_path: Path) -> dict:
    """What the probe saw in `page`, and the console errors chromium logged."""
    probed = tmp_path / f"probed-{page.name}"
    probed.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
    done = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="fsr-probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"the page never finished loading: {done.stderr[-2000:]}"
    seen = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    seen["console"] = [line for line in done.stderr.splitlines() if "CONSOLE" in line and "Uncaught" in line]
    return seen


def test_report_page_loads_without_errors_and_every_plot_draws(tmp_path: Path) -> None:
    a, b = small_run(tmp_path / "a"), small_run(tmp_path / "b", slower=1.5)
    page = tmp_path / "page.html"
    assert cli.main(["report", str(a), str(b), "-o", str(page)]) == 0
    seen = open_in_chromium(page, tmp_path)
    assert seen["errors"] == [] and seen["console"] == []
    assert seen["plots"] >= 20  # comparison, per run and task, and the run-wide plots
    assert seen["drawn"] == seen["plots"]


def test_the_probe_sees_a_script_error_and_an_undrawn_plot(tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    assert cli.main(["report", str(small_run(tmp_path / "a")), "-o", str(page)]) == 0
    text = page.read_text()
    broken = text.replace("</body>", "<div class='plotly-graph-div'></div><script>undefinedCall()</script></body>")
    page.write_text(broken)
    seen = open_in_chromium(page, tmp_path)
    assert any("undefinedCall" in e for e in seen["errors"])
    assert seen["drawn"] == seen["plots"] - 1


REFERENCES = ("baseline", "library", "PyTorch eager", "torch.compile", "roofline")


def figure(seen: dict, title: str) -> dict:
    return next(f for f in seen["figures"] if f["title"] == title)


def test_best_so_far_plots_read_as_drawn(tmp_path: Path) -> None:
    run = write_campaign(tmp_path / "bench", ["gelu", "sgemm", "softmax"], islands=4)
    page = tmp_path / "page.html"
    assert cli.main(["report", str(run), "-o", str(page)]) == 0
    seen = open_in_chromium(page, tmp_path)
    assert seen["errors"] == [] and seen["drawn"] == seen["plots"]
    for task in ("gelu", "sgemm", "softmax"):
        for x in ("evaluations", "wall time since the run began"):
            f = figure(seen, f"{task}: best so far against {x}")
            assert {"all islands", "island 0", "island 3"} <= set(f["legend"])
            assert all(any(e.startswith(r + " ") and e.endswith((" us", "plot)")) for e in f["legend"])
                       for r in REFERENCES)
            islands = {t["colour"] for t in f["traces"] if t["name"].startswith("island")}
            references = {t["colour"] for t in f["traces"] if t["name"].startswith(REFERENCES)}
            assert len(islands) == 4 and len(references) == 5 and not islands & references
            best = next(t["y"] for t in f["traces"] if t["name"] == "all islands")
            low, high = (10**v for v in f["yaxis"]["range"])
            assert f["yaxis"]["type"] == "log" and low <= min(best) and max(best) <= high
            assert len(f["yaxis"]["ticks"]) >= 4
    gelu = figure(seen, "gelu: best so far against evaluations")
    assert "library 2,880.4 us (above the plot)" in gelu["legend"]  # off the range, still named
    assert 10 ** gelu["yaxis"]["range"][1] < 1000  # the library did not set the range
    assert figure(seen, "gelu: verdicts over time")["legend"] == ["OK"]  # one verdict, still a legend
    assert not set(seen["links"]) - set(seen["ids"])  # every contents link lands somewhere
    assert {"run-1-gelu", "run-1-sgemm", "run-1-softmax", "top"} <= set(seen["links"])


def test_the_comparison_plots_only_tasks_several_runs_timed(tmp_path: Path) -> None:
    a, b = write_pair(tmp_path)
    page = tmp_path / "compare.html"
    assert cli.main(["report", str(a), str(b), "-o", str(page)]) == 0
    seen = open_in_chromium(page, tmp_path)
    assert seen["errors"] == [] and seen["drawn"] == seen["plots"]
    compared = {f["title"].split(":")[0] for f in seen["figures"] if "runs compared" in f["title"]}
    assert compared == {"gelu", "layernorm", "sgemm", "softmax"}  # not histogram, scan, transpose
    f = figure(seen, "gelu: runs compared, against evaluations")
    assert len({t["colour"] for t in f["traces"]}) == 2 and all("best " in e for e in f["legend"])
    low, high = (10**v for v in f["yaxis"]["range"])
    assert all(low <= y <= high for t in f["traces"] for y in t["y"])
    assert not set(seen["links"]) - set(seen["ids"]) and "compare-gelu" in seen["links"]
    assert "Timed by one run only, so not plotted here: histogram, scan, transpose." in page.read_text()
