"""The 16-byte alignment proof of ``cp.async`` copies (``passes.async_copy.
contiguous_aligned``): offsets ``base + lane`` with ``base`` provably a multiple of the
lanes, including the two forms the AST generator gives a grouped block index ``bx // g``
(``k * bx - k * (bx % g)``, or a ``select`` over its few values)."""

from __future__ import annotations

from polytile.schedule.passes.async_copy import contiguous_aligned
from polytile.te.expr import Binary, Const, Select, Var


def _c(v):
    return Const("int64", v)


def _b(op, a, b):
    return Binary("int64", op, a, b)


LANE, BX, TX, K = (Var(n, "int64") for n in ("lane", "bx", "tx", "k"))


def _row(k=64):
    return _b("mul", K, _c(k))


def test_plain_multiples_and_a_misaligned_term():
    ok = _b("add", _b("add", _row(), _b("mul", TX, _c(8))), LANE)
    assert contiguous_aligned(ok, LANE, 8)
    assert not contiguous_aligned(_b("add", _b("mul", TX, _c(4)), LANE), LANE, 8)
    assert not contiguous_aligned(_b("add", ok, _c(4)), LANE, 8)
    assert not contiguous_aligned(_b("mul", LANE, _c(2)), LANE, 8)   # lanes not adjacent


def test_grouped_block_index_written_with_a_modulo():
    # 4 * bx - 4 * (bx % 16) = 64 * (bx // 16): a multiple of 8
    for mod in ("truncmod", "floormod"):
        e = _b("add", _b("sub", _b("mul", BX, _c(4)), _b("mul", _b(mod, BX, _c(16)), _c(4))),
               LANE)
        assert contiguous_aligned(e, LANE, 8), mod
    # 1 * bx - 1 * (bx % 4) = 4 * (bx // 4): not a multiple of 8
    e = _b("add", _b("sub", BX, _b("truncmod", BX, _c(4))), LANE)
    assert not contiguous_aligned(e, LANE, 8)
    # the modulo of another variable does not cancel bx
    e = _b("add", _b("sub", _b("mul", BX, _c(4)), _b("mul", _b("truncmod", TX, _c(16)), _c(4))),
           LANE)
    assert not contiguous_aligned(e, LANE, 8)


def test_grouped_block_index_written_as_a_select():
    col = _b("add", _b("mul", TX, _c(8)), LANE)
    first = _b("le", BX, _c(15))
    e = _b("add", _row(), Select("int64", first, col, _b("add", col, _c(128))))
    assert contiguous_aligned(e, LANE, 8)
    bad = _b("add", _row(), Select("int64", first, col, _b("add", col, _c(4))))
    assert not contiguous_aligned(bad, LANE, 8)
    # a condition on the lane: lanes may take different cases
    lane_cond = _b("le", LANE, _c(3))
    e = _b("add", _row(), Select("int64", lane_cond, col, _b("add", col, _c(128))))
    assert not contiguous_aligned(e, LANE, 8)
