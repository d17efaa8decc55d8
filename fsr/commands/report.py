"""`fsr report`: one page of tables and plots from one or more run directories' lineages.

Reads only the lineage and run.json (a finished, running or killed run; any machine; no GPU).
HTML by default, written into the (first) run directory; `--format md` or `json` prints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fsr.commands import EXIT_OK, UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser("report", help="tables and plots from run directories' lineages")
    report.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories; several are compared")
    report.add_argument("-o", "--output", metavar="FILE",
                        help="write here (default: html into the first run directory, md and json to stdout)")
    report.add_argument("--format", choices=("html", "md", "json"), default="html",
                        help="html: one self-contained page; md: tables for a terminal; json: for programs")


def default_output(run_dirs: list[Path]) -> Path:
    """report.html in the run directory, or compare.html in the first one for several runs."""
    return run_dirs[0] / ("report.html" if len(run_dirs) == 1 else "compare.html")


def report_command(args: argparse.Namespace) -> int:
    from fsr.report import data

    if args.config:  # the report uses no config, but a file named and missing or malformed is bad input
        from fsr import config

        config.load(args.config)
    try:
        runs = [data.run_tables(data.load_run(path)) for path in args.runs]
    except data.ReportError as e:
        raise UsageError(str(e)) from None
    if args.format == "html":
        from fsr.report.page import html_page

        text = html_page(runs)
    else:
        from fsr.report import text as text_mod

        text = text_mod.markdown(runs) if args.format == "md" else text_mod.json_text(runs)
    if args.output is None and args.format != "html":
        sys.stdout.write(text)
        return EXIT_OK
    out = Path(args.output) if args.output else default_output([r.run.path for r in runs])
    if out.is_dir():
        raise UsageError(f"-o {out}: is a directory")
    try:
        out.write_text(text)
    except OSError as e:
        raise UsageError(f"cannot write {out}: {e.strerror}") from None
    print(out)
    return EXIT_OK
