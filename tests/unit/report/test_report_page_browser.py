"""The report page read in a real browser (Debian's chromium, headless), as a user reads it: the
summary leads with the comparator that matters and says where one was not timed, shows each
best kernel's rate and spread and the ceiling its roofline fraction is of, flags an impossible
worker share in red, draws every plot with no error, and the page is under 1.5 MB (plotly.js
embedded once). Skipped where chromium is absent; .ci/run installs it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fsr import cli
from tests.support.report_imported_run import write_imported_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")

# First in <head>: collects errors; once the page has loaded, writes the tables as shown (each
# cell's text and class, each row's class and background), the plots' legends and whether each
# drew, into the DOM for --dump-dom to show.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message)));
window.addEventListener('load', () => setTimeout(() => {
  const cells = r => [...r.children].map(c => ({text: c.textContent, cls: c.className}));
  const tables = [...document.querySelectorAll('table.fsr')].map(t => ({
    head: [...t.querySelectorAll('thead th')].map(h => h.textContent),
    rows: [...t.querySelectorAll('tbody tr')].map(r => ({cls: r.className, cells: cells(r),
      background: getComputedStyle(r.children[0]).backgroundColor}))}));
  const plots = [...document.querySelectorAll('.plotly-graph-div')];
  const out = document.createElement('pre');
  out.id = 'fsr-probe';
  out.textContent = JSON.stringify({errors: window.__errors, tables, plots: plots.length,
    drawn: plots.filter(p => p.querySelector('.main-svg') && p.querySelector('.trace')).length,
    legends: plots.filter(p => p.layout).map(p => ({title: (p.layout.title || {}).text,
      entries: [...p.querySelectorAll('.legendtext')].map(t => t.textContent),
      labels: [...p.querySelectorAll('.bartext')].map(t => t.textContent)})),
    text: document.body.innerText});
  document.body.appendChild(out);
}, 500));
</script>"""


def read_in_chromium(page: Path, tmp_path: Path) -> dict:
    probed = tmp_path / f"probed-{page.name}"
    probed.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
    done = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
         "--virtual-time-budget=20000", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="fsr-probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"the page never finished loading: {done.stderr[-2000:]}"
    text = found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return json.loads(text)


def by_task(table: dict) -> dict[str, dict[str, dict]]:
    """A table's rows by their first cell, each row's cells by column heading."""
    return {r["cells"][0]["text"]: dict(zip(table["head"], r["cells"], strict=True)) for r in table["rows"]}


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp_path = tmp_path_factory.mktemp("page")
    page = tmp_path / "report.html"
    assert cli.main(["report", str(write_imported_run(tmp_path / "run")), "-o", str(page)]) == 0
    found = read_in_chromium(page, tmp_path)
    found["bytes"] = page.stat().st_size
    return found


def test_the_page_is_small_and_every_plot_draws_without_an_error(seen: dict) -> None:
    assert seen["bytes"] < 1.5 * 2**20, seen["bytes"]
    assert seen["errors"] == [] and seen["plots"] >= 12 and seen["drawn"] == seen["plots"]


def test_the_summary_leads_with_the_comparator_that_matters_and_says_what_was_not_timed(seen: dict) -> None:
    summary = seen["tables"][0]
    head = summary["head"]
    assert head.index("vs fastest of library and PyTorch") < head.index("vs PyTorch eager") \
        < head.index("vs torch.compile") < head.index("vs baseline (plain kernel)")
    rows = by_task(summary)
    gemm, conv = rows["kb_matmul_bf16"], rows["kb_conv"]
    assert gemm["vs fastest of library and PyTorch"]["text"] == "1.18x (torch.compile)"
    assert gemm["vs PyTorch eager"]["text"] == "1.32x" and gemm["vs torch.compile"]["text"] == "1.18x"
    for column in ("vs fastest of library and PyTorch", "vs PyTorch eager", "vs torch.compile"):
        assert conv[column] == {"text": "not timed", "cls": "not-timed"}
    assert "PyTorch eager and torch.compile, for kb_conv: no comparator of the task came back" in seen["text"]


def test_the_summary_shows_rates_spread_and_the_ceiling_of_each_fraction(seen: dict) -> None:
    rows = by_task(seen["tables"][0])
    assert rows["kb_matmul_bf16"]["rate"]["text"] == "422 TFLOP/s"
    assert rows["kb_conv"]["rate"]["text"] == "1,950 GB/s"
    assert rows["kb_conv"]["p10-p90 us"]["text"] == "97.0-105.0"
    assert rows["kb_matmul_bf16"]["of roofline"]["text"] == "60.3% of bf16 tensor-core rate"
    gemm = next(p for p in seen["legends"] if p["title"] == "kb_matmul_bf16: best so far against evaluations")
    assert any(e.startswith("roofline (bf16 tensor-core rate) ") for e in gemm["entries"])
    assert any(e.startswith("torch.compile 80.0 us") for e in gemm["entries"])
    assert "45 registers, 24 bytes spilled" in seen["text"]  # the winners' resources


def test_an_impossible_worker_share_is_flagged_and_the_columns_explained(seen: dict) -> None:
    workers = next(t for t in seen["tables"] if t["head"][0] == "worker")
    rows = {r["cells"][0]["text"]: r for r in workers["rows"]}
    assert rows["gpu1"]["cls"] == "impossible" and rows["gpu0"]["cls"] == ""
    assert rows["gpu1"]["cells"][-1]["text"] == "impossible: busy 600% of the run's span"
    assert rows["gpu1"]["background"] != rows["gpu0"]["background"]  # drawn apart, not as a normal row
    assert "busy share: busy s over the run's span" in seen["text"]
    paid = next(p for p in seen["legends"] if p["title"].startswith("softmax: what paid off"))
    assert paid["labels"] and all(label.isdigit() for label in paid["labels"])  # each bar's kernel count
