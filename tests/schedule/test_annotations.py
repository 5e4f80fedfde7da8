"""vectorize, unroll, parallel and pragma: loop kinds in the lowered nest, numeric results
(serial on the interpreter, SIMD/threads on LLVM), and refusals."""

from __future__ import annotations

import re

import pytest
from helpers import check, elementwise2d, loop_headers, lowered, matmul, rand, run1, sizes_for

from polytile import ScheduleError


# ---------------------------------------------------------------------------- vectorize
def test_vectorize_structure_with_tail():
    w = elementwise2d(3, 10)
    s = w.schedule()
    jo, ji = s[w.C].split(w.C.op.axis[1], factor=4)
    s[w.C].vectorize(ji)
    heads = loop_headers(s, w.args)
    # full tiles as 4 lanes, the partial tile (10 = 2*4 + 2) separated with 2 lanes
    assert "for j.inner in vectorized(0, 4):" in heads
    assert "for j.inner in vectorized(0, 2):" in heads
    assert "for j.outer in range(0, 2):" in heads


def test_vectorize_whole_short_axis_structure():
    w = elementwise2d(3, 7)
    s = w.schedule()
    s[w.C].vectorize(w.C.op.axis[1])
    assert loop_headers(s, w.args)[-1] == "for j in vectorized(0, 7):"


@pytest.mark.parametrize("factor", [1, 2, 4, 8, 16])
def test_vectorize_numeric(factor, backend):
    m, n = sizes_for(backend, (3, 13), (37, 131))
    w = elementwise2d(m, n)
    s = w.schedule()
    jo, ji = s[w.C].split(w.C.op.axis[1], factor=factor)
    s[w.C].vectorize(ji)
    bo, bi = s[w.B].split(w.B.op.axis[1], factor=factor)
    s[w.B].vectorize(bi)
    w.check(s, backend)


def test_vectorize_spatial_inside_reduction_numeric(backend):
    m, n, k = sizes_for(backend, (3, 9, 5), (33, 67, 29))
    w = matmul(m, n, k)
    s = w.schedule()
    i, j = w.C.op.axis
    jo, ji = s[w.C].split(j, factor=8)
    s[w.C].reorder(i, jo, w.r, ji)
    s[w.C].vectorize(ji)
    w.check(s, backend)


def test_vectorize_long_extent_is_accepted(backend):
    """Loops longer than a register are strip-mined by the CPU backend (see
    tests/targets/test_vectorize_limits.py)."""
    w = elementwise2d(3, 100)
    s = w.schedule()
    s[w.C].vectorize(w.C.op.axis[1])
    w.check(s, backend)


def test_vectorize_checks_the_extent_of_an_attached_stage_region():
    """As TVM's GEMM tutorial does with its write cache: the cache stage's axis spans the
    whole tensor, but inside its attach loop only a 32-wide region."""
    import numpy as np

    from polytile import te

    n = 128
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
    s[CC].compute_at(s[C], no)
    mc, nc = s[CC].op.axis
    (kaxis,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kaxis, factor=4)
    s[CC].reorder(ko, mc, ki, nc)
    s[CC].vectorize(nc)
    a, b = rand((n, n)), rand((n, n))
    check(run1(s, [A, B, C], [a, b], "llvm"), a.astype("float64") @ b, k=n)
    del np


@pytest.mark.parametrize("factor", (64, 65))
def test_vectorize_64_and_65_lanes(factor):
    w = elementwise2d(3, 130)
    s = w.schedule()
    s[w.C].vectorize(s[w.C].split(w.C.op.axis[1], factor=factor)[1])
    w.check(s, "llvm")


def test_vectorize_non_innermost_with_a_parallel_loop_inside_raises():
    w = elementwise2d(3, 7)
    s = w.schedule()
    s[w.C].vectorize(w.C.op.axis[0])
    s[w.C].parallel(w.C.op.axis[1])
    with pytest.raises(ScheduleError, match=r"vectorize: loop 'i' of stage 'C' has the "
                       r"parallel loop 'j' inside it"):
        lowered(s, w.args)


def test_vectorize_of_a_reduction_loop_with_loops_inside_raises():
    w = matmul(3, 4, 5)
    s = w.schedule()
    i, j = w.C.op.axis
    s[w.C].reorder(i, w.r, j)
    s[w.C].vectorize(w.r)
    with pytest.raises(ScheduleError, match=r"vectorize: loop 'k' of stage 'C' is a "
                       r"reduction loop with loops inside it"):
        lowered(s, w.args)


def test_vectorize_reduction_axis_raises_with_pair():
    w = matmul(3, 4, 5)
    s = w.schedule()
    s[w.C].vectorize(w.r)
    with pytest.raises(ScheduleError, match=r"vectorize: loop 'k' of stage 'C' carries a "
                       r"dependence(.|\n)*Violating pair: C.update\[i=\d, j=\d, k=\d\] -> "
                       r"C.update\[i=\d, j=\d, k=\d\]"):
        lowered(s, w.args)


def test_vectorize_reduction_axis_of_extent_one_is_legal(backend):
    w = matmul(3, 4, 1)
    s = w.schedule()
    s[w.C].vectorize(w.r)
    w.check(s, backend)


def test_vectorize_loop_with_attached_stage(backend):
    """B computed at C's vectorized loop j computes the region of all j's lanes at the
    loop around j (TVM widens B by the lanes): the values of the definition."""
    w = elementwise2d(3, 7)
    s = w.schedule()
    s[w.B].compute_at(s[w.C], w.C.op.axis[1])
    s[w.C].vectorize(w.C.op.axis[1])
    assert loop_headers(s, w.args)[-1] == "for j in vectorized(0, 7):"
    w.check(s, backend)


def test_conflicting_annotations_raise():
    w = elementwise2d(3, 7)
    s = w.schedule()
    s[w.C].vectorize(w.C.op.axis[1])
    with pytest.raises(ScheduleError, match="unroll: iter_var 'j' of stage 'C' is already "
                       "annotated 'vectorize'"):
        s[w.C].unroll(w.C.op.axis[1])
    with pytest.raises(ScheduleError, match="already annotated 'vectorize'"):
        s[w.C].parallel(w.C.op.axis[1])


def test_annotating_placeholder_raises():
    w = elementwise2d(3, 7)
    s = w.schedule()
    with pytest.raises(ScheduleError, match="stage 'A' is a placeholder"):
        s[w.A].vectorize(w.C.op.axis[1])


# ------------------------------------------------------------------------------- unroll
def test_unroll_structure():
    w = elementwise2d(3, 7)
    s = w.schedule()
    jo, ji = s[w.C].split(w.C.op.axis[1], factor=3)
    s[w.C].unroll(ji)
    text = lowered(s, w.args)
    heads = loop_headers(s, w.args)
    assert not any("j.inner" in h for h in heads)  # full tiles unrolled
    assert "C[i, (3 * j.outer)] =" in text and "C[i, ((3 * j.outer) + 2)] =" in text
    assert "C[i, 6] =" in text                      # the partial tile (7 = 2*3 + 1)


@pytest.mark.parametrize("factor", [1, 2, 3, 5])
def test_unroll_numeric(factor, backend):
    m, n = sizes_for(backend, (3, 11), (29, 101))
    w = elementwise2d(m, n)
    s = w.schedule()
    jo, ji = s[w.C].split(w.C.op.axis[1], factor=factor)
    s[w.C].unroll(ji)
    s[w.B].unroll(w.B.op.axis[0])
    w.check(s, backend)


def test_unroll_reduction_axis_numeric(backend):
    w = matmul(3, 4, 5)
    s = w.schedule()
    s[w.C].unroll(w.r)
    assert not any(h.startswith("for k") for h in loop_headers(s, w.args))
    w.check(s, backend)


# ----------------------------------------------------------------------------- parallel
def test_parallel_structure():
    w = elementwise2d(10, 5)
    s = w.schedule()
    io, ii = s[w.C].split(w.C.op.axis[0], factor=4)
    s[w.C].parallel(io)
    assert "for i.outer in parallel(0, 3):" in loop_headers(s, w.args)


def test_nested_parallel_runs_serially():
    w = elementwise2d(4, 5)
    s = w.schedule()
    s[w.C].parallel(w.C.op.axis[0])
    s[w.C].parallel(w.C.op.axis[1])
    heads = loop_headers(s, w.args)
    assert "for i in parallel(0, 4):" in heads
    assert "for j in range(0, 5):" in heads


def test_parallel_numeric(backend):
    m, n = sizes_for(backend, (7, 5), (127, 129))
    w = elementwise2d(m, n)
    s = w.schedule()
    io, ii = s[w.C].split(w.C.op.axis[0], factor=3)
    s[w.C].parallel(io)
    s[w.B].parallel(w.B.op.axis[0])
    w.check(s, backend)


def test_parallel_matmul_numeric(backend):
    m, n, k = sizes_for(backend, (5, 4, 3), (127, 129, 131))
    w = matmul(m, n, k)
    s = w.schedule()
    f = s[w.C].fuse(*w.C.op.axis)
    s[w.C].parallel(f)
    w.check(s, backend)


def test_parallel_spatial_inside_reduction_loop_is_legal(backend):
    w = matmul(5, 4, 3)
    s = w.schedule()
    i, j = w.C.op.axis
    s[w.C].reorder(w.r, i, j)
    s[w.C].parallel(i)
    assert "for i in parallel(0, 5):" in loop_headers(s, w.args)
    w.check(s, backend)


def test_parallel_reduction_axis_raises_with_pair():
    w = matmul(3, 4, 5)
    s = w.schedule()
    ko, ki = s[w.C].split(w.r, factor=2)
    s[w.C].parallel(ko)
    with pytest.raises(ScheduleError, match=r"parallel: loop 'k.outer' of stage 'C' carries a "
                       r"dependence; its iterations must be independent\n  Violating pair: "
                       r"C.update\[i=\d, j=\d, k=\d\] -> C.update\[i=\d, j=\d, k=\d\]"
                       r"(.|\n)*hint: .*rfactor"):
        lowered(s, w.args)


# ------------------------------------------------------------------------------- pragma
def test_pragma_parallel_launch_point_structure():
    w = elementwise2d(10, 5)
    s = w.schedule()
    io, ii = s[w.C].split(w.C.op.axis[0], factor=4)
    s[w.C].pragma(io, "parallel_launch_point")
    assert "for i.outer in parallel(0, 3):  # pragma parallel_launch_point" in \
        loop_headers(s, w.args)
    assert s[w.C].pragmas[io] == (("parallel_launch_point", None),)


@pytest.mark.parametrize("kind, loop_kind", [("parallel", "parallel"), ("unroll", None),
                                             ("vectorize", "vectorized")])
def test_pragma_maps_onto_annotation(kind, loop_kind, backend):
    w = elementwise2d(4, 6)
    s = w.schedule()
    s[w.C].pragma(w.C.op.axis[1 if kind == "vectorize" else 0], kind)
    heads = loop_headers(s, w.args)
    if loop_kind == "parallel":
        assert any(h.startswith("for i in parallel(0, 4):") for h in heads)
    elif loop_kind == "vectorized":
        assert any(h.startswith("for j in vectorized(0, 6):") for h in heads)
    else:
        assert not any(h.startswith("for i ") for h in heads[-2:])
    w.check(s, backend)


def test_unknown_pragma_raises():
    w = elementwise2d(4, 6)
    s = w.schedule()
    with pytest.raises(ScheduleError, match=r"pragma: unknown pragma 'auto_unroll' on "
                       r"iter_var 'i' of stage 'C'; expected one of \['parallel', "
                       r"'parallel_launch_point', 'unroll', 'vectorize', 'evict_first', 'evict_last', 'half2', 'import_c', 'import_llvm', "
                       r"'nontemporal', 'auto_unroll_max_step', 'min_blocks', "
                       r"'parallel_barrier_when_finish', 'parallel_stride_pattern', "
                       r"'unroll_explicit'\]"):
        s[w.C].pragma(w.C.op.axis[0], "auto_unroll", 16)


def test_unknown_pragma_on_foreign_axis_names_the_axis_problem():
    w = elementwise2d(4, 6)
    s = w.schedule()
    with pytest.raises(ScheduleError, match="is not an axis of stage 'C'"):
        s[w.C].pragma(w.B.op.axis[0], "nonsense")


def _sum2(m=4, k1=3, k2=5):
    from helpers import rand
    from polytile import te
    A = te.placeholder((m, k1, k2), name="A")
    r1 = te.reduce_axis((0, k1), "k1")
    r2 = te.reduce_axis((0, k2), "k2")
    C = te.compute((m,), lambda i: te.sum(A[i, r1, r2], axis=[r1, r2]), name="C")
    return A, C, r1, r2, rand((m, k1, k2))


@pytest.mark.parametrize("kind", ["vectorize", "parallel"])
def test_annotation_of_reordered_reduction_axis_raises(kind):
    from polytile import te
    A, C, r1, r2, _ = _sum2()
    s = te.create_schedule(C.op)
    s[C].reorder(C.op.axis[0], r2, r1)
    getattr(s[C], kind)(r1)
    with pytest.raises(ScheduleError, match=f"{kind}: loop 'k1' of stage 'C' carries a "
                       "dependence"):
        lowered(s, [A, C])


@pytest.mark.parametrize("unroll_outer", [True, False])
def test_attached_buffer_is_private_to_each_parallel_copy(unroll_outer):
    """An unrolled loop around a parallel loop makes several parallel loops; a stage
    computed inside them needs a private buffer in each (else threads race on it)."""
    import numpy as np

    import polytile
    from polytile import te

    n, m, K = 7, 64, 256
    A = te.placeholder((m, K), name="A")
    B = te.compute((m, K), lambda j, k: A[j, k] * 2.0, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(B[j, k] * (i + 1), axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, 3)
    if unroll_outer:
        s[C].unroll(ii)
    s[B].compute_at(s[C], j)
    s[C].parallel(j)
    text = str(polytile.lower(s, [A, C]))
    lines = text.splitlines()
    allocs = [k for k, line in enumerate(lines) if "B = alloc" in line]
    assert len(allocs) == (4 if unroll_outer else 1), text  # one per parallel loop (3 + tail)
    assert all("in parallel(" in lines[k - 1] for k in allocs), text  # first in its body
    f = polytile.build(s, [A, C])
    a = np.random.default_rng(0).standard_normal((m, K)).astype("float32")
    ref = np.stack([(a.astype("float64") * 2).sum(1) * (r + 1) for r in range(n)])
    for _ in range(10):
        o = np.full((n, m), np.nan, "float32")
        f(a, o)
        np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-4)


def test_attached_buffer_is_private_and_a_ragged_tile_stays_in_the_parallel_loop():
    """A row block computed inside a parallel loop whose last block is ragged: each thread
    needs its own packed block (a shared one made the threads race). The full tiles are
    isolated inside the parallel loop, not by splitting it (its ragged last iteration
    once became serial code after it, with a buffer of its own; a loop of two iterations
    then lost its threads altogether)."""
    import numpy as np

    import polytile
    from polytile import te

    M, N, K, MR = 100, 48, 37, 12
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    PA = te.compute((-(-M // MR), K, MR), lambda x, y, z: te.if_then_else(
        x * MR + z < M, A[x * MR + z, y], 0.0), name="PA")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(PA[i // MR, k, i % MR] * B[k, j], axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=2 * MR)
    ib, ir = s[C].split(ii, factor=MR)
    jo, jv = s[C].split(j, factor=16)
    s[C].reorder(io, jo, ib, k, ir, jv)
    s[C].unroll(ir)  # an unrolled register block isolates the ragged row block
    s[C].vectorize(jv)
    s[PA].compute_at(s[C], io)
    s[C].parallel(io)
    text = str(polytile.lower(s, [A, B, C]))
    lines = text.splitlines()
    allocs = [n for n, line in enumerate(lines) if "PA = alloc" in line]
    assert len(allocs) == 1, text  # the parallel body's
    assert "in parallel(0, 5)" in lines[allocs[0] - 1], text
    assert re.search(r"if \(i\.outer <= 3\)", text), text  # full blocks, per thread
    f = polytile.build(s, [A, B, C])
    rng = np.random.default_rng(1)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    ref = a.astype("float64") @ b.astype("float64")
    for _ in range(5):
        c = np.full((M, N), np.nan, "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)
