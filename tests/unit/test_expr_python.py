"""fsr.expr.to_python: header expressions as Python source that computes what fsr.expr.evaluate
computes (every expression of the built-in tasks' baselines and templates at every test size, and
random expressions), built from the parsed form so that nothing else gets through."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fsr import candidate, expr, task_templates, tasks
from fsr.export import runtime

HELPERS = {"_cdiv": runtime._cdiv, "_pow": runtime._pow, "min": min, "max": max, "float": float}


def translated(text: str, names: dict[str, int]) -> float:
    code = expr.to_python(text, lambda n: f"v[{n!r}]")
    return eval(code, {"__builtins__": {}, **HELPERS}, {"v": names})  # our own translation, not the text


def header_expressions() -> list[tuple[str, str, dict[str, int]]]:
    """(where, expression, names) for every launch and scratch expression of every built-in
    baseline and template, at every test size and the benchmark size, with the default values."""
    out = []
    for folder in sorted(p for p in tasks.DEFAULT_TASKS_DIR.iterdir() if (p / "task.toml").is_file()):
        toml = tomllib.loads((folder / "task.toml").read_text())
        sizes = [*toml["test_sizes"], toml["bench_size"]]
        template = task_templates.resolve(folder, toml, (folder.parent,))  # a variant's: another task's
        texts_of = {"baseline.cu": (folder / "baseline.cu").read_text() if (folder / "baseline.cu").is_file() else "",
                    "template.cu": template.source if template else ""}
        for name, source in texts_of.items():
            if not source:
                continue
            header = tomllib.loads(candidate.HEADER_RE.search(source).group(1))
            defines = {k: v[0] for table in ("tunables", "features") for k, v in header.get(table, {}).items()}
            texts = [str(e) for launch in header["launch"] for e in (*launch["grid"], *launch["block"],
                                                                      launch.get("smem", "0"))]
            texts += [str(launch["when"]) for launch in header["launch"] if "when" in launch]
            texts += [str(s["count"]) for s in header.get("scratch", [])]
            out += [(f"{folder.name}/{name}", t, size | defines) for t in texts for size in sizes]
    return out


def test_every_builtin_header_expression_computes_the_same_in_python():
    cases = header_expressions()
    assert len(cases) > 500  # every task's launches at every size
    for where, text, names in cases:
        assert translated(text, names) == expr.evaluate(text, names), (where, text, names)


OPERANDS = st.one_of(st.integers(-50, 50).map(str), st.sampled_from(["a", "b", "c"]),
                     st.floats(0.25, 8.0).map(lambda f: repr(round(f, 2))))


@st.composite
def expressions(draw: st.DrawFn, depth: int = 3) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(OPERANDS)
    kind = draw(st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "neg", "cdiv", "min", "max",
                                 "==", "!=", "<", "<=", ">", ">=", "chain", "and", "or", "not"]))
    left, right = draw(expressions(depth - 1)), draw(expressions(depth - 1))
    if kind == "neg":
        return f"-({left})"
    if kind == "not":
        return f"not ({left})"
    if kind == "chain":
        return f"({left}) < ({right}) <= ({draw(expressions(depth - 1))})"
    if kind in ("cdiv", "min", "max"):
        return f"{kind}({left}, {right})"
    return f"({left}) {kind} ({right})"


def outcome(compute, text: str, names: dict[str, int]) -> object:
    try:
        return compute(text, names)
    except (expr.ExprError, ArithmeticError, ValueError):  # zero division, a huge exponent: both refuse
        return "refused"


@settings(max_examples=300, deadline=None)
@given(expressions(), st.integers(1, 9), st.integers(-9, 9), st.integers(1, 3))
@example("(0) // (((0) + (-1)) ** (1.5))", 1, 0, 1)  # a negative number to a fractional power: complex, refused
@example("(0) and ((1) // (0))", 1, 0, 1)  # no short circuit: the division by zero is refused by both
@example("(a) > (b) < ((1) // (0))", 1, 0, 1)
def test_random_expressions_compute_the_same_or_are_refused_by_both(text, a, b, c):
    names = {"a": a, "b": b, "c": c}
    want, got = outcome(expr.evaluate, text, names), outcome(translated, text, names)
    if isinstance(want, float) and isinstance(got, float) and want != want:  # NaN from inf - inf
        assert got != got
    else:
        assert got == want, (text, names, want, got)


@pytest.mark.parametrize("text", ["__import__('os')", "rows.__class__", "[1, 2]", "lambda: 1", "rows if 1 else 2",
                                  "open('x')", "f'{rows}'", "min(rows, key=1)", "rows[0]", "'a'", "True"])
def test_anything_but_arithmetic_is_refused(text):
    with pytest.raises(expr.ExprError):
        expr.to_python(text, lambda n: n)


def test_only_numbers_operators_and_what_names_map_to_reach_the_output():
    code = expr.to_python("cdiv(rows, 4) * 2 ** BLOCK - max(1, -cols) / 1e999", lambda n: f"v[{n!r}]")
    assert code == "((_cdiv(v['rows'], 4) * _pow(2, v['BLOCK'])) - (max(1, (-v['cols'])) / float('inf')))"
    assert expr.to_python(7, str) == "7"
