import pytest

from fsr import expr


def test_arithmetic_with_names_and_functions():
    assert expr.evaluate_int("cdiv(rows, BLOCK) * 2 + max(1, cols % 7)", {"rows": 10, "BLOCK": 4, "cols": 9}) == 8
    assert expr.evaluate("2 * rows * cols * 4", {"rows": 3, "cols": 5}) == 120
    assert expr.names_in("cdiv(rows, BLOCK)") == {"rows", "BLOCK"}


@pytest.mark.parametrize("text", ["__import__('os')", "rows.__class__", "[1, 2]", "lambda: 1", "rows if 1 else 2",
                                  "open('x')", "2 ** 1000"])
def test_refuses_anything_but_arithmetic(text):
    with pytest.raises(expr.ExprError):
        expr.evaluate(text, {"rows": 1})


def test_unknown_name_and_division_by_zero_are_named():
    with pytest.raises(expr.ExprError, match="unknown name 'nope'"):
        expr.evaluate("nope + 1", {})
    with pytest.raises(expr.ExprError, match="division by zero"):
        expr.evaluate("1 // n", {"n": 0})
    with pytest.raises(expr.ExprError, match="not a whole number"):
        expr.evaluate_int("n / 2", {"n": 3})
