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


def test_conditions_give_one_or_zero():
    names = {"K": 12, "N": 7}
    assert expr.evaluate_int("K % 8 == 4 and N > 6", names) == 1
    assert expr.evaluate_int("K % 8 == 0 or not N != 7", names) == 1
    assert expr.evaluate_int("not (K % 8 == 4)", names) == 0
    assert expr.evaluate_int("1 <= N < 7", names) == 0  # chained as in Python
    assert expr.names_in("K % 8 == 0 and N >= BLOCK") == {"K", "N", "BLOCK"}
    with pytest.raises(expr.ExprError, match="unknown name 'M'"):
        expr.evaluate("K > 0 or M > 0", names)  # every operand is evaluated, so a typo is not hidden
    with pytest.raises(expr.ExprError):
        expr.evaluate("K in (1, 2)", names)
