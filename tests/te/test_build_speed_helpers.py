"""The helpers behind fast lowering (issue 11): the garbage-collector pause of the deep
entry points, ``collect_many``, and the simplifier's memos (which must not change what it
computes)."""

from __future__ import annotations

import gc

import pytest

from polytile.errors import LoweringError
from polytile.schedule.loop_ir import Buffer, Store, seq
from polytile.schedule.passes import simplify as sp
from polytile.te.depth import deep_recursion
from polytile.te.expr import Binary, Const, Var
from polytile.te.visitor import collect, collect_many


@pytest.fixture
def gc_state():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_gc_paused_inside_and_restored_after(gc_state):
    gc.enable()
    with deep_recursion("t"):
        assert not gc.isenabled()
        with deep_recursion("inner"):
            assert not gc.isenabled()
        assert not gc.isenabled()   # the inner exit does not resume it
    assert gc.isenabled()


def test_gc_left_off_when_it_was_off(gc_state):
    gc.disable()
    with deep_recursion("t"):
        pass
    assert not gc.isenabled()


def test_gc_resumed_after_an_error(gc_state):
    gc.enable()

    def recurse(n):
        return recurse(n + 1)

    with pytest.raises(LoweringError, match="nests too deeply"):
        with deep_recursion("t"):
            recurse(0)
    assert gc.isenabled()


def test_collect_many_is_collect_of_each_in_order_deduplicated():
    i, j, k = Var("int64", "i"), Var("int64", "j"), Var("int64", "k")
    shared = Binary("int64", "mul", i, j)
    e1 = Binary("int64", "add", shared, k)
    e2 = Binary("int64", "sub", j, shared)
    want = []
    for e in (e1, e2, shared):
        want += [v for v in collect(e, Var) if v not in want]
    assert collect_many([e1, e2, shared], Var) == want == [i, j, k]
    assert collect_many([], Var) == []


def _program():
    x = Var("int64", "x")
    buf = Buffer("B", (64,), "float32", "global")
    idx = Binary("int64", "add", Binary("int64", "add", x, Const("int64", 3)),
                 Const("int64", -3))
    return seq(Store(buf, (idx,), Const("float32", 1.0)),
               Store(buf, (Binary("int64", "mul", Const("int64", 1), x),),
                     Const("float32", 2.0)))


def test_simplify_memos_do_not_change_results():
    sp.forget()
    first = str(sp.simplify(_program()))
    again = sp.simplify(sp.simplify(_program()))   # the second pass meets its own output
    assert str(again) == first
    assert first.count("B[x] =") == 2
    sp.forget()
    assert not sp._LINEAR and not sp._SIMPLIFIED
    assert str(sp.simplify(_program())) == first


def test_simplified_statement_returned_as_is():
    sp.forget()
    out = sp.simplify(_program())
    assert sp.simplify(out) is out
