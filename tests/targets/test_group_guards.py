"""The CUDA pass that regroups the guarded statements of a ragged register tile by guard
(:mod:`polytile.schedule.passes.group_guards`): only independent statements move."""

from __future__ import annotations

from polytile.schedule.loop_ir import (Buffer, For, IfThenElse, Load, PrimFunc, Seq, Store,
                                       seq)
from polytile.schedule.passes.group_guards import group_guards
from polytile.te.expr import Binary, Cmp, Const, Var

ACC = Buffer("acc", (8,), "float32", "local")
A = Buffer("a", (8,), "float32", "local")
T = Var("int32", "t")


def _c(v: int) -> Const:
    return Const("int32", v)


def _guard(bound: int):
    return Cmp("bool", "lt", T, _c(bound))


def _fma(i: int, j: int, bound: int):
    """``if (t < bound) acc[i] = acc[i] + a[j]``"""
    add = Binary("float32", "add", Load("float32", ACC, (_c(i),)), Load("float32", A, (_c(j),)))
    return IfThenElse(_guard(bound), Store(ACC, (_c(i),), add))


def _regrouped(*stmts):
    f = PrimFunc("f", (ACC, A), seq(*stmts))
    return group_guards(f).body


def _stored(s) -> list:
    """(guard bound, [stored acc indices]) per top-level if."""
    out = []
    for x in (s.stmts if isinstance(s, Seq) else (s,)):
        body = x.then_case.stmts if isinstance(x.then_case, Seq) else (x.then_case,)
        out.append((x.cond.b.value, [st.indices[0].value for st in body]))
    return out


def test_interleaved_guards_share_one_branch_each():
    body = _regrouped(_fma(0, 0, 5), _fma(1, 1, 7), _fma(2, 0, 5), _fma(3, 1, 7))
    assert _stored(body) == [(5, [0, 2]), (7, [1, 3])]


def test_dependent_statements_keep_their_order():
    # acc[0] is updated twice: the second update starts a new run, as does a read of an
    # element stored earlier in the run
    body = _regrouped(_fma(0, 0, 5), _fma(1, 1, 7), _fma(0, 2, 5), _fma(2, 1, 7))
    assert _stored(body) == [(5, [0]), (7, [1]), (5, [0]), (7, [2])]
    rd = IfThenElse(_guard(5), Store(A, (_c(3),), Load("float32", ACC, (_c(1),))))
    body = _regrouped(_fma(1, 0, 5), _fma(2, 1, 7), rd)
    assert _stored(body) == [(5, [1]), (7, [2]), (5, [3])]


def test_computed_indices_loops_and_else_end_a_run():
    i = Var("int32", "i")
    var_store = IfThenElse(_guard(5), Store(ACC, (i,), Const("float32", 0.0)))
    loop = For(i, _c(0), _c(2), "serial", _fma(4, 0, 5))
    other = IfThenElse(_guard(5), Store(ACC, (_c(6),), Const("float32", 0.0)),
                       Store(ACC, (_c(7),), Const("float32", 0.0)))
    for mid in (var_store, loop, other):
        stmts = (_fma(0, 0, 5), mid, _fma(1, 0, 5))
        f = PrimFunc("f", (ACC, A), seq(*stmts))
        assert group_guards(f) is f
