"""The CUDA pass that regroups the guarded statements of a ragged register tile by guard
(:mod:`polytile.schedule.passes.group_guards`): only independent statements move."""

from __future__ import annotations

import pytest

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


def _run_both(f, x, t):
    """The interpreter's results of ``f`` and of ``group_guards(f)`` on a copy of ``x``
    (buffers ``x[:4]``, ``x[4:]``) and the scalar ``t``."""
    from polytile.schedule.interpreter import run

    out = []
    for g in (f, group_guards(f)):
        y = x.copy()
        run(g, y[:4], y[4:], t)
        out.append(y)
    return out


def _conflict(kind: str):
    """``if (g) A; if (t < 2) B; if (g) C`` where ``C`` depends on ``B`` by ``kind`` and
    nothing else: regrouping ``C`` with ``A`` (same guard) would run it before ``B``."""
    import numpy as np

    X = Buffer("x", (4,), "float32", "global")
    ACC = Buffer("acc", (4,), "float32", "global")
    t = Var("int32", "t")

    def ld(buf, k):
        return Load("float32", buf, (_c(k) if isinstance(k, int) else k,))

    tmod = Binary("int32", "floormod", t, _c(4))
    x1_times_3 = Store(X, (_c(1),), Binary("float32", "mul", ld(ACC, 1), Const("float32", 3)))
    acc2_from = lambda k: Store(ACC, (_c(2),), Binary("float32", "add", ld(X, k),  # noqa
                                                      Const("float32", 1)))
    b, c = {"raw": (x1_times_3, acc2_from(1)),
            "raw at a computed index": (x1_times_3, acc2_from(tmod)),
            "war": (acc2_from(1), x1_times_3),
            "war at a computed index": (acc2_from(tmod), x1_times_3),
            "waw": (acc2_from(1), acc2_from(3)),
            "guard reads": (x1_times_3, acc2_from(3))}[kind]
    g = Cmp("bool", "lt", ld(X, 1), Const("float32", 0.0)) if kind == "guard reads" else \
        Cmp("bool", "lt", t, _c(3))
    a = IfThenElse(g, Store(ACC, (_c(0),), ld(X, 0)))
    body = seq(a, IfThenElse(Cmp("bool", "lt", t, _c(2)), b), IfThenElse(g, c))
    x = np.array([0.5, -0.5, 0.25, 0.75, 1.0, 1.0, 2.0, 3.0], "float32")
    return PrimFunc("f", (X, ACC, t), body), x


@pytest.mark.parametrize("kind", ["raw", "raw at a computed index", "war",
                                  "war at a computed index", "waw", "guard reads"])
def test_a_dependence_on_a_statement_between_keeps_the_order(kind):
    f, x = _conflict(kind)
    for t in range(4):
        want, got = _run_both(f, x, t)
        assert (got == want).all(), (t, got, want)


def _random_program(rng, n_stmts: int):
    """Straight-line guarded code shaped like a ragged register tile: mostly updates
    ``acc[i] += x[j] * x[k]`` under one of a few guards, mixed with statements that make
    dependences (stores to ``x``, loads at a computed index ``t % n``, a guard reading
    memory) and plain stores (they end a run)."""
    X = Buffer("x", (6,), "float32", "global")
    ACC = Buffer("acc", (10,), "float32", "global")
    t = Var("int32", "t")

    def at(buf, n):
        if rng.random() < 0.15:
            return Load("float32", buf, (Binary("int32", "floormod", t, _c(n)),))
        return Load("float32", buf, (_c(int(rng.integers(n))),))

    def stmt():
        i = _c(int(rng.integers(10)))
        r = rng.random()
        if r < 0.15:     # stores what others read
            return Store(X, (_c(int(rng.integers(6))),), at(ACC, 10))
        prod = Binary("float32", "mul", at(X, 6), at(X, 6))
        return Store(ACC, (i,), Binary("float32", "add", Load("float32", ACC, (i,)), prod))

    def guard():
        if rng.random() < 0.15:   # a guard that reads memory the run may store
            return Cmp("bool", "lt", at(X, 6), Const("float32", 0.0))
        return Cmp("bool", "lt", t, _c(int(rng.integers(2, 4))))

    stmts = []
    for _ in range(n_stmts):
        body = seq(*[stmt() for _ in range(1 + (rng.random() < 0.3))])
        stmts.append(body if rng.random() < 0.05 else IfThenElse(guard(), body))
    return PrimFunc("f", (X, ACC, t), seq(*stmts))


def test_regrouping_keeps_the_results_of_random_guarded_code():
    # the interpreter on the code before and after the pass, bit for bit, for every value
    # of the guard's scalar; the programs reuse few elements and few guards, so that
    # both regrouping and dependences occur (the count keeps the test able to fail)
    import numpy as np

    from polytile.schedule.interpreter import run

    rng = np.random.default_rng(7)
    moved = 0
    for _ in range(100):
        f = _random_program(rng, int(rng.integers(3, 12)))
        g = group_guards(f)
        moved += g is not f
        x0 = rng.uniform(-1, 1, 16).astype("float32")
        for t in range(4):
            want, got = x0.copy(), x0.copy()
            run(f, want[:6], want[6:], t)
            run(g, got[:6], got[6:], t)
            np.testing.assert_array_equal(got, want)
    assert moved >= 20, moved
