"""``specialize_partial_unrolls``: an unrolled loop of extent ``min(C, X)`` (a ragged last
tile isl did not separate) gets a copy of constant extent ``C`` under ``X >= C``, the test
hoisted out of the serial loops that do not define ``X``; the result is unchanged at
ragged, prime and size-1 extents, on the interpreter and LLVM."""

from __future__ import annotations

import re

import pytest
from helpers import check, rand, run1

import polytile
from polytile import te
from polytile.schedule.passes.loops import specialize_partial_unrolls


def _gemm(m: int, n: int, k: int):
    """``C[i, j] = sum_r A[i, r] * B[r, j]``: ``A, B, C``."""
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    return A, B, te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")


def _rows_times_cols(m: int, n: int, k: int, rows: int, block: int = 3):
    """C[i, j] = sum_k A[i, k] * B[k, j] with i split in blocks of ``block * rows`` rows
    and those in tiles of ``rows`` (unrolled, ragged when ``rows`` does not divide ``m``)
    below the serial k loop, as a GEMM micro-kernel: isl separates the full blocks, and
    the ragged block has full tiles and a ragged one."""
    A, B, C = _gemm(m, n, k)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (r,) = C.op.reduce_axis
    ib, i = s[C].split(i, factor=rows * block)
    io, ii = s[C].split(i, factor=rows)
    s[C].reorder(ib, io, r, ii, j)
    s[C].unroll(ii)
    return s, [A, B, C]


def _final(s, args) -> str:
    return str(polytile.lower(s, args, stop_after=None))


def test_ragged_unrolled_loop_gets_a_full_copy_hoisted_out_of_the_k_loop():
    s, args = _rows_times_cols(23, 7, 5, rows=4)  # 23 = 12 + (2 * 4 + 3)
    text = _final(s, args)
    lines = [ln.strip() for ln in text.splitlines()]
    tests = [n for n, ln in enumerate(lines) if ln.startswith("if ") and ">= 4" in ln]
    # one test for the init's rows, one above the k loop (hoisted); the full copies' rows
    # are unrolled (constant indices), the partial ones stay loops
    assert len(tests) == 2, text
    assert any(lines[t + 1].startswith("for r in") for t in tests), text
    assert any(ln.startswith("for i.inner.inner in range(0, min(4") or
               ln.startswith("for i.inner.inner in unrolled(0, min(4") for ln in lines), text


@pytest.mark.parametrize("backend", ["interp", "llvm"])
@pytest.mark.parametrize("m,n,k,rows", [(23, 7, 5, 4), (13, 3, 1, 12), (1, 5, 3, 4),
                                        (29, 1, 7, 6), (24, 5, 3, 4)])
def test_partial_unroll_numerics(backend, m, n, k, rows):
    s, args = _rows_times_cols(m, n, k, rows)
    a, b = rand((m, k), seed=m), rand((k, n), seed=n + 1)
    out = run1(s, args, [a, b], backend)
    check(out, a.astype("float64") @ b.astype("float64"), k=k)


def test_loops_without_a_partial_unroll_are_unchanged():
    s, args = _rows_times_cols(24, 5, 3, 4)   # 4 divides 24: no partial tile
    assert " >= 4" not in _final(s, args)
    from polytile.schedule.loop_ir import For, seq
    from polytile.te.expr import Const, Var

    body = seq()
    loop = For(Var("int64", "x"), Const("int64", 0), Const("int64", 7), "unrolled", body)
    assert specialize_partial_unrolls(loop) is loop


def _cols_vectorized(m: int, n: int, k: int, lanes: int, block: int = 3):
    """The GEMM of :func:`_rows_times_cols` with ``j`` in blocks of ``block * lanes``
    columns and those in vectors of ``lanes`` (ragged when ``lanes`` does not divide
    ``n``) below the k loop."""
    A, B, C = _gemm(m, n, k)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (r,) = C.op.reduce_axis
    jb, j = s[C].split(j, factor=lanes * block)
    jo, ji = s[C].split(j, factor=lanes)
    s[C].reorder(jb, i, jo, r, ji)
    s[C].vectorize(ji)
    return s, [A, B, C]


def test_ragged_vectorized_loop_gets_a_full_vector_copy():
    # n = 40 = 24 + (8 + 8): the ragged column block has one full vector of 8 and a ragged
    # one; the full one is a vectorized loop of constant extent (before: every vector of
    # the ragged block ran as a scalar loop), the test hoisted out of the k loop
    s, args = _cols_vectorized(5, 38, 6, lanes=8)
    text = _final(s, args)
    lines = [ln.strip() for ln in text.splitlines()]
    tests = [n for n, ln in enumerate(lines) if ln.startswith("if ") and ">= 8" in ln]
    assert tests, text
    assert any(lines[t + 1].startswith("for r in") and
               lines[t + 2].startswith("for j.inner.inner in vectorized(0, 8)")
               for t in tests), text


@pytest.mark.parametrize("backend", ["interp", "llvm"])
@pytest.mark.parametrize("m,n,k,lanes", [(5, 38, 6, 8), (3, 17, 1, 16), (1, 1, 3, 8),
                                         (7, 29, 5, 4), (2, 48, 3, 16)])
def test_ragged_vectorized_numerics(backend, m, n, k, lanes):
    s, args = _cols_vectorized(m, n, k, lanes)
    a, b = rand((m, k), seed=m), rand((k, n), seed=n + 1)
    out = run1(s, args, [a, b], backend)
    check(out, a.astype("float64") @ b.astype("float64"), k=k)


def test_ragged_vector_is_masked_on_llvm():
    # the last vector of the ragged block (38 = 24 + 8 + 6) runs as 8 masked lanes: no
    # scalar loop; the printed nest keeps it vectorized with its min extent
    s, args = _cols_vectorized(5, 38, 6, lanes=8)
    text = _final(s, args)
    assert "vectorized(0, min(8" in text, text
    f = polytile.build(s, args, target="llvm")
    asm = f.get_source("asm")
    assert re.search(r"vmov\w+\s+[^\n]*\{%k[1-7]\}", asm), "no masked vector access"
    a, b = rand((5, 6), seed=7), rand((6, 38), seed=8)
    out = run1(s, args, [a, b], "llvm")
    check(out, a.astype("float64") @ b.astype("float64"), k=6)


def test_can_mask_refuses_uniform_stores_and_varying_divisors():
    # inactive lanes must have no effect: a store to one address for all lanes (the last
    # lane, active or not, would win) and an integer division by a lane-varying value (an
    # inactive lane may divide by zero) keep the ragged vector a scalar loop
    from polytile.schedule.loop_ir import Buffer, For, Load, Store
    from polytile.targets.llvm.vectorize import can_mask
    from polytile.te.expr import Binary, Const, Var

    j, x = Var("int64", "j"), Var("int64", "x")
    A, Y = Buffer("A", (64,), "int64"), Buffer("Y", (64,), "int64")
    ext = Binary("int64", "min", Const("int64", 8), x)

    def vloop(body):
        return For(j, Const("int64", 0), ext, "vectorized", body)

    assert can_mask(vloop(Store(Y, (j,), Load("int64", A, (j,)))))
    assert not can_mask(vloop(Store(Y, (Const("int64", 0),), Load("int64", A, (j,)))))
    assert not can_mask(vloop(Store(Y, (j,), Binary("int64", "floordiv", Const("int64", 7),
                                                    Load("int64", A, (j,))))))
    assert can_mask(vloop(Store(Y, (j,), Binary("int64", "floordiv", Load("int64", A, (j,)),
                                                Const("int64", 3)))))


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_full_tile_isolation_never_splits_a_parallel_loop(backend):
    # a parallel loop of two iterations, the last one ragged (two column blocks of a GEMM,
    # one per thread), with full register tiles isolated below it: isl split it into two
    # pieces of serial code (1024^3 blis and 1024x1003x1024 goto ran on one thread); now
    # the loop stays parallel and each thread separates its own full tiles
    m, n, k = 7, 45, 3
    A, B, C = _gemm(m, n, k)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, j = s[C].split(j, factor=24)   # 2 blocks: 24 + 21 columns
    j1, j2 = s[C].split(j, factor=8)   # ragged 8-lane tiles in the second
    s[C].reorder(jo, i, j1, *C.op.reduce_axis, j2)
    s[C].vectorize(j2)
    s[C].parallel(jo)
    text = _final(s, [A, B, C])
    assert re.search(r"^  for j\.outer in parallel\(0, 2\)", text, re.M), text
    a, b = rand((m, k), seed=1), rand((k, n), seed=2)
    check(run1(s, [A, B, C], [a, b], backend), a.astype("float64") @ b, k=k)
