"""Compile cost of long chains of stages is linear in the chain's length.

A stage that reads its producer several times, inlined (``compute_inline``) or attached
(``compute_at``), or one compute body reusing a Python variable at every level, is an
expression DAG: walked as a tree it costs ``2**L`` (or ``3**L``) for ``L`` levels (a
12-stage chain took 90 s to build). The walkers memoize by node identity
(:mod:`polytile.te.visitor`) and ``share_subexpressions`` names shared nodes with lets, so
what is printed and compiled grows linearly. The bounds here are on deterministic sizes
(expression visits, printed characters), never on time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compile_with_nvcc

import polytile
from polytile import te
from polytile.schedule.loop_ir import LetStmt, walk_stmts
from polytile.te import visitor

N = 37   # odd, not a multiple of the CUDA split factor


def _level(p):
    # reads its producer three times: a tree walk costs 3**L
    return lambda i: p[i] * p[i] - p[i] * 0.25 + 0.125


def chain(L: int, mode: str, target: str = "llvm"):
    """``L`` stages ``B_l = B_{l-1}**2 - B_{l-1}/4 + 1/8`` over ``A[N]``; every stage but
    the last inlined (``mode="inline"``), attached at the output's loop (``"at"``) or left
    at the root (``"root"``)."""
    A = te.placeholder((N,), name="A", dtype="float32")
    prev, stages = A, []
    for lv in range(L):
        prev = te.compute((N,), _level(prev), name=f"B{lv}")
        stages.append(prev)
    s = te.create_schedule(prev.op)
    ax = prev.op.axis[0]
    if target == "cuda":
        bx, ax = s[prev].split(ax, factor=16)
        s[prev].bind(bx, te.thread_axis("blockIdx.x"))
        s[prev].bind(ax, te.thread_axis("threadIdx.x"))
    for B in stages[:-1]:
        if mode == "inline":
            s[B].compute_inline()
        elif mode == "at":
            s[B].compute_at(s[prev], ax)
    return s, [A, prev]


def reference(a: np.ndarray, L: int) -> np.ndarray:
    r = a.astype("float64")
    for _ in range(L):
        r = r * r - r * 0.25 + 0.125
    return r


def _visits(monkeypatch, fn) -> int:
    calls = [0]
    orig = visitor._Memo.visit

    def counting(self, e):
        calls[0] += 1
        return orig(self, e)

    monkeypatch.setattr(visitor._Memo, "visit", counting)
    try:
        fn()
    finally:
        monkeypatch.setattr(visitor._Memo, "visit", orig)
    return calls[0]


@pytest.mark.parametrize("mode", ["inline", "at", "root"])
def test_lowered_text_grows_linearly(mode):
    sizes = {L: len(str(polytile.lower(*chain(L, mode)))) for L in (10, 20, 40)}
    # linear: 20 more stages add at most about twice what 10 more stages added (a tree
    # walk would multiply the text by 3**10 instead)
    assert sizes[40] - sizes[20] <= 2.1 * (sizes[20] - sizes[10]) + 200, sizes
    assert sizes[40] < 260 * 40, sizes


@pytest.mark.parametrize("mode", ["inline", "at"])
def test_expression_visits_grow_linearly(monkeypatch, mode):
    v = {L: _visits(monkeypatch, lambda L=L: polytile.build(*chain(L, mode), target="llvm"))
         for L in (10, 20, 40)}
    assert v[40] - v[20] <= 2.1 * (v[20] - v[10]) + 500, v


@pytest.mark.parametrize("mode", ["inline", "at", "root"])
def test_forty_stage_chain_computes_the_definition(mode):
    s, args = chain(40, mode)
    f = polytile.build(s, args, target="llvm")
    a = np.random.default_rng(7).uniform(0.01, 1.0, N).astype("float32")
    c = np.full(N, np.nan, "float32")
    f(a, c)
    np.testing.assert_allclose(c, reference(a, 40), rtol=1e-5)


def test_inlined_chain_shares_subexpressions_through_lets():
    func = polytile.lower(*chain(20, "inline"))
    lets = [x for x in walk_stmts(func.body) if isinstance(x, LetStmt)]
    # one named value per inlined level (each read three times)
    assert len(lets) >= 19
    assert "cse0 = " in str(func)


def test_one_body_reusing_a_variable_per_level():
    A = te.placeholder((N,), name="A", dtype="float32")

    def body(i):
        x = A[i]
        for _ in range(40):
            x = x * x - x * 0.25 + 0.125
        return x

    C = te.compute((N,), body, name="C")
    s = te.create_schedule(C.op)
    assert len(str(polytile.lower(s, [A, C]))) < 6000
    f = polytile.build(s, [A, C], target="llvm")
    a = np.random.default_rng(3).uniform(0.01, 1.0, N).astype("float32")
    c = np.full(N, np.nan, "float32")
    f(a, c)
    np.testing.assert_allclose(c, reference(a, 40), rtol=1e-5)


def test_shared_load_under_a_select_stays_guarded():
    # the shared read A[i - 1] runs only where i > 0: it must not be hoisted before the
    # branch (A[-1] is outside the buffer); the interpreter would raise on it
    A = te.placeholder((N,), name="A", dtype="float32")
    B = te.compute((N,), lambda i: te.if_then_else(i > 0, A[i - 1] * A[i - 1], A[i]),
                   name="B")
    C = te.compute((N,), lambda i: B[i] * B[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    f = polytile.build(s, [A, C], target="llvm")
    a = np.random.default_rng(5).uniform(-1, 1, N).astype("float32")
    c = np.full(N, np.nan, "float32")
    f(a, c)
    b = np.where(np.arange(N) > 0, np.roll(a, 1).astype("float64") ** 2, a)
    np.testing.assert_allclose(c, b * b + b, rtol=1e-5)
    from polytile.schedule.interpreter import run
    c2 = np.full(N, np.nan, "float32")
    run(polytile.lower(s, [A, C]), a, c2)
    np.testing.assert_allclose(c2, b * b + b, rtol=1e-5)


@pytest.mark.parametrize("mode", ["inline", "at"])
def test_cuda_source_of_forty_stages_is_linear_and_compiles(mode):
    srcs = {L: polytile.build(*chain(L, mode, "cuda"), target="cuda").get_source()
            for L in (20, 40)}
    assert len(srcs[40]) < 2.2 * len(srcs[20]), {k: len(v) for k, v in srcs.items()}
    compile_with_nvcc(srcs[40])


def test_share_pass_hoists_only_what_is_safe_to_evaluate_first():
    from polytile.schedule.loop_ir import Buffer, Load, Store
    from polytile.schedule.passes.share import share_subexpressions
    from polytile.te.expr import Binary, Cmp, Const, Select, Var

    i = Var("int64", "i")
    A = Buffer("A", (8,), "float32")
    C = Buffer("C", (8,), "float32")
    x = Var("float32", "x")
    guarded = Load("float32", A, (Binary("int64", "sub", i, Const("int64", 1)),))
    pure = Binary("float32", "mul", x, x)        # cannot fault: hoisted even under a branch
    cond = Cmp("bool", "gt", i, Const("int64", 0))
    value = Select("float32", cond, Binary("float32", "add", Binary("float32", "mul", guarded,
                                                                  guarded), Binary(
        "float32", "add", pure, pure)), Const("float32", 0.0))
    out = share_subexpressions(Store(C, (i,), value))
    text = str(out)
    # the load runs only where i > 0: it stays inside the select, read twice
    assert text.count("A[(i - 1)]") == 2, text
    assert "cse0 = (x * x)" in text and text.count("(x * x)") == 1, text
    # an unconditional shared load is named once
    both = Binary("float32", "add", guarded, guarded)
    text2 = str(share_subexpressions(Store(C, (i,), both)))
    assert text2.count("A[(i - 1)]") == 1 and "cse0 + cse0" in text2, text2
