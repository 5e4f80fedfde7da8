"""The text helpers of the C expression printer (``targets/c_expr.py``)."""

from __future__ import annotations

import itertools

from polytile.targets.c_expr import strip_parens


def _reference(s: str) -> str:
    """One character at a time: the enclosing pair matches when the depth first returns
    to zero at the last character."""
    if not (s.startswith("(") and s.endswith(")")):
        return s
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(s) - 1:
            return s
    return s[1:-1]


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def test_strip_parens_examples():
    assert strip_parens("(a + b)") == "a + b"
    assert strip_parens("((a + b) * c)") == "(a + b) * c"
    assert strip_parens("(a + b) * (c)") == "(a + b) * (c)"
    assert strip_parens("(a) + (b)") == "(a) + (b)"
    assert strip_parens("((a))") == "(a)"
    assert strip_parens("()") == ""
    assert strip_parens("a + b") == "a + b"
    assert strip_parens("(a + (b)) + c") == "(a + (b)) + c"


def test_strip_parens_matches_reference_on_every_short_balanced_string():
    count = 0
    for n in range(1, 11):
        for chars in itertools.product("()x", repeat=n):
            s = "".join(chars)
            if _balanced(s):
                count += 1
                assert strip_parens(s) == _reference(s), s
    assert count > 1000
