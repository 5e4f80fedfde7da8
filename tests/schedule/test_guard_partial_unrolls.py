"""GPU ragged unrolled loops (extent ``min(C, X)``) become ``C`` guarded iterations
(:func:`polytile.schedule.passes.loops.guard_partial_unrolls`); CPUs keep the full-tile
specialization."""

from __future__ import annotations

from polytile.schedule.kinds import LoopKind
from polytile.schedule.loop_ir import Buffer, For, IfThenElse, Store, seq
from polytile.schedule.passes.loops import (guard_partial_unrolls,
                                            specialize_partial_unrolls, unroll)
from polytile.te.expr import Binary, Const, Var

R = Buffer("r", (8,), "float32", "local")


def _ragged(lo: int = 0):
    j, x = Var("int64", "j"), Var("int64", "x")
    ext = Binary("int64", "min", Const("int64", 4), x)
    body = Store(R, (j,), Const("float32", 1.0))
    return For(j, Const("int64", lo), ext, LoopKind.UNROLLED, body), x


def test_ragged_unrolled_loop_unrolls_into_guarded_copies():
    for lo in (0, 2):
        loop, x = _ragged(lo)
        out = unroll(guard_partial_unrolls(loop))
        stmts = out.stmts
        assert len(stmts) == 4 and all(isinstance(s, IfThenElse) for s in stmts)
        # iteration lo + t runs when t < x: the instances of the loop of extent min(4, x)
        assert [s.then_case.indices[0].value for s in stmts] == list(range(lo, lo + 4))
        for xv in range(-1, 6):   # copy t runs exactly when lo + t < lo + min(4, x)
            assert [_eval(s.cond, x, xv) for s in stmts] == [t < xv for t in range(4)]


def _eval(e, x, xv):
    if isinstance(e, Const):
        return e.value
    if e is x:
        return xv
    a, b = _eval(e.a, x, xv), _eval(e.b, x, xv)
    return {"sub": a - b, "add": a + b, "lt": a < b}[e.op]


def test_cpu_keeps_the_full_tile_copy():
    loop, _ = _ragged()
    out = specialize_partial_unrolls(loop)
    assert isinstance(out, IfThenElse) and out.else_case is loop


def test_loops_without_a_ragged_extent_are_unchanged():
    j = Var("int64", "j")
    loop = For(j, Const("int64", 0), Const("int64", 4), LoopKind.UNROLLED,
               seq(Store(R, (j,), Const("float32", 0.0))))
    assert guard_partial_unrolls(loop) is loop
