"""The 16-byte alignment proof of ``cp.async`` copies (``passes.async_copy.
contiguous_aligned``): offsets ``base + lane`` with ``base`` provably a multiple of the
lanes, including the two forms the AST generator gives a grouped block index ``bx // g``
(``k * bx - k * (bx % g)``, or a ``select`` over its few values)."""

from __future__ import annotations

from polytile.schedule.passes.async_copy import contiguous_aligned
from polytile.te.expr import Binary, Cmp, Const, Select, Var


def _c(v):
    return Const("int64", v)


def _b(op, a, b):
    return Binary("int64", op, a, b)


LANE, BX, TX, K = (Var("int64", n) for n in ("lane", "bx", "tx", "k"))


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
    first = Cmp("bool", "le", BX, _c(15))
    e = _b("add", _row(), Select("int64", first, col, _b("add", col, _c(128))))
    assert contiguous_aligned(e, LANE, 8)
    bad = _b("add", _row(), Select("int64", first, col, _b("add", col, _c(4))))
    assert not contiguous_aligned(bad, LANE, 8)
    # a condition on the lane: lanes may take different cases
    lane_cond = Cmp("bool", "le", LANE, _c(3))
    e = _b("add", _row(), Select("int64", lane_cond, col, _b("add", col, _c(128))))
    assert not contiguous_aligned(e, LANE, 8)


def test_a_modulo_pattern_of_the_lane_is_not_lane_free():
    # regression: lane + 8 x - 8 (x % 2) with x = lane // 2 is lane + 16 (lane // 4), at
    # lanes 0..7: 0 1 2 3 20 21 22 23, not contiguous; the pattern k x - k (x % g) was
    # taken as a multiple of the lanes without checking that x is free of the lane
    x = _b("floordiv", LANE, _c(2))
    e = _b("sub", _b("add", LANE, _b("mul", x, _c(8))), _b("mul", _b("floormod", x, _c(2)),
                                                             _c(8)))
    offsets = [lane + 8 * (lane // 2) - 8 * ((lane // 2) % 2) for lane in range(8)]
    assert offsets != list(range(8))
    assert not contiguous_aligned(e, LANE, 8)


def test_a_cancelled_modulo_term_is_zero():
    # regression: a modulo term whose coefficient cancelled to 0 matched the pattern with
    # its variable absent (0 == -0) and raised KeyError
    assert contiguous_aligned(_b("add", LANE, _b("mul", _b("truncmod", BX, _c(4)), _c(0))),
                              LANE, 8)
    m = _b("truncmod", BX, _c(4))
    assert contiguous_aligned(_b("add", _b("sub", _b("add", _row(), m), m), LANE), LANE, 8)
