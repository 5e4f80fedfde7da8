"""``intern_expressions``: equal nodes of different statements become one object, the
sharing within each statement is kept exactly (``schedule/passes/intern.py``)."""

from __future__ import annotations

import numpy as np

from polytile.schedule.loop_ir import Buffer, ExternCall, For, Load, Seq, Store, seq, stmt_str
from polytile.schedule.passes.intern import intern_expressions
from polytile.te.expr import Binary, Const, Select, Cmp, Var
from polytile.te.visitor import collect_many

I64 = "int64"
A = Buffer("A", (16, 16), "float32", "shared")
C = Buffer("C", (16,), "float32", "local")
ty, tx = Var(I64, "ty"), Var(I64, "tx")


def _row(k: int) -> Binary:
    """A fresh ``8*ty + k`` (a new object at every call, as unroll makes them)."""
    return Binary(I64, "add", Binary(I64, "mul", Const(I64, 8), ty), Const(I64, k))


def _update(c: int, k: int) -> Store:
    """``C[c] = C[c] + A[8*ty + k, 0] * A[8*ty + k, 1]``: the two rows are distinct but
    equal objects."""
    a0 = Load("float32", A, (_row(k), Const(I64, 0)))
    a1 = Load("float32", A, (_row(k), Const(I64, 1)))
    acc = Load("float32", C, (Const(I64, c),))
    return Store(C, (Const(I64, c),),
                 Binary("float32", "add", acc, Binary("float32", "mul", a0, a1)))


def _rows(s: Store) -> tuple:
    a0, a1 = s.value.b.a, s.value.b.b
    return a0, a1, a0.indices[0], a1.indices[0]


def test_equal_nodes_of_different_statements_become_one():
    body = seq(*[_update(c, 3) for c in range(4)])
    out = intern_expressions(body)
    assert stmt_str(out) == stmt_str(body)
    stores = out.stmts
    first = _rows(stores[0])
    for s in stores[1:]:
        assert all(x is y for x, y in zip(_rows(s), first))
    # the accumulators differ by their index: loads of C stay apart
    assert len({id(s.value.a) for s in stores}) == 4
    before = collect_many([e for s in body.stmts for e in (*s.indices, s.value)], Load)
    after = collect_many([e for s in stores for e in (*s.indices, s.value)], Load)
    assert len(before) == 12 and len(after) == 6


def test_sharing_within_a_statement_is_kept():
    s = _update(0, 5)
    a0, a1, r0, r1 = _rows(intern_expressions(seq(_update(1, 5), s)).stmts[1])
    # the two rows of one statement were distinct objects: they stay distinct, though equal
    assert r0 is not r1 and a0 is not a1
    shared_row = _row(2)
    both = Store(C, (shared_row,), Binary("float32", "add",
                                          Load("float32", A, (shared_row, Const(I64, 0))),
                                          Load("float32", A, (_row(2), Const(I64, 0)))))
    prev = Store(C, (Const(I64, 0),), Load("float32", A, (_row(2), Const(I64, 0))))
    out = intern_expressions(seq(prev, both)).stmts[1]
    # the store's index and the first load's row: one object before, one after; the second
    # load's row (its own object before) stays apart from them
    assert out.indices[0] is out.value.a.indices[0]
    assert out.value.b.indices[0] is not out.indices[0]
    # the second load of the statement equals the first: it stays its own object
    assert out.value.a is not out.value.b


def test_constants_merged_by_dtype_and_value_only():
    x = Var("float32", "x")
    zero, negzero = Const("float32", 0.0), Const("float32", -0.0)
    one_i, one_f = Const("int32", 1), Const("float32", 1.0)
    body = seq(Store(C, (Const(I64, 0),), Binary("float32", "add", x, zero)),
               Store(C, (Const(I64, 1),), Binary("float32", "add", x, negzero)),
               Store(C, (Const(I64, 2),), Binary("float32", "add", x,
                                                 Const("float32", 0.0))),
               Store(C, (Const(I64, 3),), Binary("float32", "mul", x, one_f)),
               Store(C, (Const(I64, 4),), Select("float32", Cmp("bool", "lt", one_i,
                                                                Const("int32", 2)), x, x)))
    out = intern_expressions(body)
    assert stmt_str(out) == stmt_str(body)
    v = [s.value for s in out.stmts]
    assert v[0] is v[2]                       # x + 0.0 twice: one node
    assert v[0] is not v[1]                   # -0.0 is not 0.0
    assert np.signbit(v[1].b.value)
    assert v[3].b is not one_i and v[3].b.dtype == "float32"


def test_calls_keep_their_identity_and_loops_are_walked():
    call = lambda: ExternCall("float32", "f", (Load("float32", A, (_row(1), tx)),))
    i = Var(I64, "i")
    body = For(i, Const(I64, 0), Const(I64, 4), "serial",
               seq(Store(C, (i,), call()), Store(C, (i,), call())))
    out = intern_expressions(body)
    assert stmt_str(out) == stmt_str(body)
    s0, s1 = out.body.stmts
    assert s0.value is not s1.value               # calls (maybe side effects) stay apart
    assert s0.value.args[0] is s1.value.args[0]   # their equal operands are one node
    assert isinstance(out.body, Seq)


def test_unchanged_program_is_returned_as_is():
    body = Store(C, (tx,), Load("float32", A, (_row(1), tx)))
    assert intern_expressions(body) is body
