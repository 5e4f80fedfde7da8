"""Barriers are reached by every thread of the block, whatever the thread extents of the
stages of a kernel.

The fault (fuzz seed cuda 6256): a shared stage bound to fewer threads than its block
(``threadIdx.x < 5`` in a block of 128) got its ``__syncthreads()`` under the test
``if (threadIdx.x <= 4)``, which isl hoists above the stage's code: the emulated kernel
deadlocked, and on a GPU it is undefined behaviour. Each schedule here is checked three
ways: statically (no barrier under a test that depends on ``threadIdx``), on the reference
interpreter (which raises when a barrier is not reached by every thread) and built for
CUDA on the emulated driver against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import poison

import polytile
from polytile import te
from polytile.errors import LoweringError
from polytile.schedule.interpreter import run
from polytile.schedule.loop_ir import For, IfThenElse, Seq, Sync, walk_stmts
from polytile.schedule.passes.barriers import sink_divergent_guards
from polytile.te.expr import Cmp, Const, Var
from polytile.te.visitor import free_vars


def divergent_syncs(func) -> list:
    """The barriers of ``func`` that sit under a test or loop bound on ``threadIdx``."""
    bad: list = []

    def walk(s, divergent: bool):
        if isinstance(s, Sync):
            if divergent:
                bad.append(s)
            return
        if isinstance(s, IfThenElse):
            d = divergent or any(v.name.startswith("threadIdx") for v in free_vars(s.cond))
            walk(s.then_case, d)
            if s.else_case is not None:
                walk(s.else_case, d)
            return
        if isinstance(s, For):
            d = divergent or any(v.name.startswith("threadIdx")
                                 for e in (s.min, s.extent) for v in free_vars(e))
            walk(s.body, d)
            return
        if isinstance(s, Seq):
            for x in s.stmts:
                walk(x, divergent)
            return
        body = getattr(s, "body", None)
        if body is not None:
            walk(body, divergent)

    walk(func.body, False)
    return bad


def stencil(n0: int, n1: int, split: int, threads: int, block: int):
    """A 2x2 int32 stencil over a zero-padded input staged in shared memory at the inner
    reduction loop, the copy's rows split by ``split`` and bound to ``threads``-wide
    thread loops, the consumer's rows to blocks of ``block`` threads."""
    A = te.placeholder((n0, n1), "int32", name="A")
    P = te.compute((n0 + 2, n1 + 2), lambda a, c: te.if_then_else(
        te.all(a >= 1, a - 1 < n0, c >= 1, c - 1 < n1), A[a - 1, c - 1], 0), name="P")
    K = te.placeholder((2, 2), "int32", name="K")
    ry = te.reduce_axis((0, 2), name="ry")
    rx = te.reduce_axis((0, 2), name="rx")
    C = te.compute((n0, n1), lambda y, x: te.sum(P[y + ry, x + rx] * K[ry, rx],
                                                 axis=[ry, rx]), name="C")
    s = te.create_schedule(C.op)
    s[P].compute_root()
    PS = s.cache_read(P, "shared", [C])
    s[PS].compute_at(s[C], rx)
    f = s[P].fuse(*s[P].op.axis)
    fo, fi = s[P].split(f, factor=64)
    s[P].bind(fo, te.thread_axis("blockIdx.x"))
    s[P].bind(fi, te.thread_axis("threadIdx.x"))
    yo, yi = s[C].split(C.op.axis[0], factor=block)
    s[C].bind(yo, te.thread_axis("blockIdx.x"))
    s[C].bind(yi, te.thread_axis("threadIdx.x"))
    ao, ai = s[PS].split(s[PS].op.axis[0], factor=split)
    _, aii = s[PS].split(ai, factor=threads)
    s[PS].bind(aii, te.thread_axis("threadIdx.x"))
    return s, [A, K, C]


def _reference(a, k):
    n0, n1 = a.shape
    p = np.pad(a.astype("int64"), 1)
    return sum(p[ry:ry + n0, rx:rx + n1] * k[ry, rx] for ry in range(2) for rx in range(2))


CASES = [  # (n0, n1, split, threads, block)
    (9, 7, 5, 128, 128),    # the fuzz case: 5 copying threads of 128
    (13, 5, 3, 32, 32),     # prime rows, 3 copying threads
    (1, 1, 1, 8, 8),        # one element, one copying thread
    (17, 3, 16, 8, 8),      # every thread copies, with a serial part
    (31, 2, 7, 64, 64),
]


def _data(n0, n1, seed=0):
    g = np.random.default_rng(seed)
    a = g.integers(-50, 50, (n0, n1)).astype("int32")
    k = g.integers(-5, 6, (2, 2)).astype("int32")
    k[k == 0] = 1
    return a, k


@pytest.mark.parametrize("n0,n1,split,threads,block", CASES)
def test_no_barrier_under_a_thread_test(n0, n1, split, threads, block):
    s, args = stencil(n0, n1, split, threads, block)
    f = polytile.lower(s, args, target="cuda")
    assert any(isinstance(x, Sync) for x in walk_stmts(f.body))
    assert divergent_syncs(f) == []


@pytest.mark.parametrize("n0,n1,split,threads,block", CASES)
def test_on_the_interpreter(n0, n1, split, threads, block):
    s, args = stencil(n0, n1, split, threads, block)
    f = polytile.lower(s, args, target="cuda", stop_after=None)
    a, k = _data(n0, n1)
    c = poison((n0, n1), "int32")
    run(f, a, k, c)   # raises when a barrier is not reached by every thread
    np.testing.assert_array_equal(c, _reference(a, k))


@pytest.mark.parametrize("n0,n1,split,threads,block", CASES[:3])
def test_on_the_emulated_driver(n0, n1, split, threads, block, emulated_cuda):
    s, args = stencil(n0, n1, split, threads, block)
    f = polytile.build(s, args, target="cuda")
    a, k = _data(n0, n1, 1)
    dev = [polytile.nd.array(x, device="cuda") for x in (a, k)]
    out = polytile.nd.array(poison((n0, n1), "int32"), device="cuda")
    f(*dev, out)
    np.testing.assert_array_equal(out.numpy(), _reference(a, k))


# ------------------------------------------------------------------ the pass on its own
T = Var("int64", "threadIdx.x")
I = Var("int64", "i")


def _lt(v, c):
    return Cmp("bool", "lt", v, Const("int64", c))


def test_a_guard_on_the_thread_index_moves_below_the_barriers():
    body = Seq((Sync("shared"), For(I, Const("int64", 0), Const("int64", 4), "serial",
                                    Sync("shared"))))
    out = sink_divergent_guards(IfThenElse(_lt(T, 5), body), [T])
    assert isinstance(out, Seq) and isinstance(out.stmts[0], Sync)
    assert isinstance(out.stmts[1], For) and isinstance(out.stmts[1].body, Sync)


def test_a_barrier_in_a_loop_bounded_by_the_thread_index_is_refused():
    loop = For(I, Const("int64", 0), T, "serial", Sync("shared"))
    with pytest.raises(LoweringError, match="threadIdx"):
        sink_divergent_guards(loop, [T], "k0")


def test_a_barrier_in_the_else_of_a_thread_test_is_refused():
    with pytest.raises(LoweringError, match="else branch"):
        sink_divergent_guards(IfThenElse(_lt(T, 5), Sync("shared"), Sync("shared")), [T])
