"""The report page in a real browser (Debian's chromium, headless): it loads with no errors and
every plot draws. Skipped where chromium is absent; .ci/run installs it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fsr import cli
from tests.lineage_rows import small_run

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
  out.textContent = JSON.stringify({errors: window.__errors, plots: plots.length,
    drawn: plots.filter(p => p.querySelector('.main-svg') && p.querySelector('.trace')).length});
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
