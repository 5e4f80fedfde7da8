"""Stage.compute_at: exact per-iteration footprints (halos included), buffers of the
footprint's bounding box, chains of attaches, attached reductions, attaches inside tiles."""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest
from helpers import (check, elementwise2d, loop_headers, lowered, matmul, rand, run1, sizes_for,
                     stencil1d)

import polytile
from polytile import ScheduleError, te
from polytile.schedule.model import build_model


def _plan(s, args, name):
    model = build_model(s, args)
    return next(p for p in model.plans if p.name == name)


def _blur(m, n, seed=0):
    """B = 2 * A on (m+2, n+2); C[i, j] = sum of the 3x3 window of B at (i, j)."""
    A = te.placeholder((m + 2, n + 2), name="A")
    B = te.compute((m + 2, n + 2), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + B[i + 1, j] + B[i + 2, j] + B[i, j + 1]
                   + B[i + 1, j + 1] + B[i + 2, j + 1] + B[i, j + 2] + B[i + 1, j + 2]
                   + B[i + 2, j + 2], name="C")
    a = rand((m + 2, n + 2), seed=seed)
    b = a.astype("float64") * 2
    ref = sum(b[x:x + m, y:y + n] for x in range(3) for y in range(3))
    return A, B, C, a, ref


# ---------------------------------------------------------------------------- structure
def test_stencil_attach_at_outer_domain_and_buffer():
    w = stencil1d(13)
    s = w.schedule()
    xo, xi = s[w.C].split(w.C.op.axis[0], factor=4)
    s[w.B].compute_at(s[w.C], xo)
    plan = _plan(s, w.args, "B")
    # per tile p of 4 outputs: 6 values of B (halo of 2), relative to the origin 4p, clipped
    # to B's 15 elements
    want = isl.Set("{ S0[p, r] : 0 <= p <= 3 and 0 <= r <= 5 and 4p + r <= 14 }")
    assert plan.stmts[0].domain.is_equal(want), str(plan.stmts[0].domain)
    assert plan.buffer.shape == (6,)
    assert loop_headers(s, w.args) == [
        "for i.outer in range(0, 4):",
        "for i in range(0, min(6, (15 - (4 * i.outer)))):",
        "for i.inner in range(0, min(4, (13 - (4 * i.outer)))):",
    ]


def test_stencil_attach_at_inner_domain_and_buffer():
    w = stencil1d(13)
    s = w.schedule()
    xo, xi = s[w.C].split(w.C.op.axis[0], factor=4)
    s[w.B].compute_at(s[w.C], xi)
    plan = _plan(s, w.args, "B")
    want = isl.Set("{ S0[p, q, r] : 0 <= p and 0 <= q <= 3 and 4p + q <= 12 and 0 <= r <= 2 }")
    assert plan.stmts[0].domain.is_equal(want), str(plan.stmts[0].domain)
    assert plan.buffer.shape == (3,)
    text = lowered(s, w.args)
    assert "C[((4 * i.outer) + i.inner)] = ((B[0] + B[1]) + B[2])" in text


def test_blur_attach_in_tile_domain_2d():
    A, B, C, _, _ = _blur(7, 8)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 3, 4)
    s[B].compute_at(s[C], jo)
    plan = _plan(s, [A, C], "B")
    want = isl.Set("{ S0[p, q, x, y] : 0 <= p <= 2 and 0 <= q <= 1 and 0 <= x <= 4 and "
                   "3p + x <= 8 and 0 <= y <= 5 }")
    assert plan.stmts[0].domain.is_equal(want), str(plan.stmts[0].domain)
    assert plan.buffer.shape == (5, 6)


def test_attach_of_reduction_domain():
    w = matmul(5, 7, 6)
    D = te.compute((5, 7), lambda i, j: w.C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    io, jo, ii, ji = s[D].tile(D.op.axis[0], D.op.axis[1], 2, 3)
    s[w.C].compute_at(s[D], jo)
    plan = _plan(s, [w.A, w.B, D], "C")
    init, update = plan.stmts
    want = "{ %s[p, q, x, y%s] : 0 <= p <= 2 and 0 <= q <= 2 and 0 <= x <= 1 and 2p + x <= 4 " \
           "and 0 <= y <= 2 and 3q + y <= 6 %s }"
    assert init.domain.is_equal(isl.Set(want % (init.name, "", ""))), str(init.domain)
    assert update.domain.is_equal(isl.Set(want % (update.name, ", k", "and 0 <= k <= 5"))), \
        str(update.domain)
    assert plan.buffer.shape == (2, 3)


def test_attach_at_reduction_loop_of_consumer_structure():
    M, N, K = 5, 7, 6
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    P = te.compute((M, K), lambda i, k: A[i, k] * 2.0, name="P")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(P[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[P].compute_at(s[C], k)
    assert _plan(s, [A, B, C], "P").buffer.shape == (1, 1)
    assert "P[0, 0] = (A[i, k] * 2.0f)" in lowered(s, [A, B, C])


# ----------------------------------------------------------------------------- numeric
@pytest.mark.parametrize("factor", [1, 2, 4, 5, 13, 20])
@pytest.mark.parametrize("at", ["outer", "inner"])
def test_stencil_halo_numeric(factor, at, backend):
    n = sizes_for(backend, 13, 131)
    w = stencil1d(n)
    s = w.schedule()
    xo, xi = s[w.C].split(w.C.op.axis[0], factor=factor)
    s[w.B].compute_at(s[w.C], xo if at == "outer" else xi)
    w.check(s, backend)


@pytest.mark.parametrize("fx, fy, at", [(3, 4, "jo"), (2, 2, "io"), (4, 3, "ii"), (1, 5, "ji"),
                                        (8, 8, "jo")])
def test_blur_attach_in_tile_numeric(fx, fy, at, backend):
    m, n = sizes_for(backend, (7, 8), (61, 67))
    A, B, C, a, ref = _blur(m, n)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], fx, fy)
    s[B].compute_at(s[C], {"io": io, "jo": jo, "ii": ii, "ji": ji}[at])
    check(run1(s, [A, C], [a], backend), ref, k=9)


def test_attached_stage_scheduled_itself(backend):
    m, n = sizes_for(backend, (7, 8), (61, 67))
    A, B, C, a, ref = _blur(m, n)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[B].compute_at(s[C], jo)
    bi, bj = s[B].op.axis
    bjo, bji = s[B].split(bj, factor=3)
    s[B].reorder(bjo, bi, bji)
    s[B].unroll(bji)
    check(run1(s, [A, C], [a], backend), ref, k=9)


def test_chain_of_attaches(backend):
    m, n = sizes_for(backend, (5, 7), (53, 71))
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((m, n), lambda i, j: C[i, j] * 3.0, name="D")
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[1])
    s[C].compute_at(s[D], D.op.axis[0])
    text = lowered(s, [A, D])
    assert "C = alloc(float32[1, %d]" % n in text and "B = alloc(float32[1, 1]" in text
    a = rand((m, n))
    check(run1(s, [A, D], [a], backend), (a.astype("float64") * 2 + 1) * 3)


def test_chain_of_stencil_attaches_with_growing_halo(backend):
    n = sizes_for(backend, 12, 130)
    A = te.placeholder((n + 4,), name="A")
    B = te.compute((n + 4,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n + 2,), lambda i: B[i] + B[i + 2], name="C")
    D = te.compute((n,), lambda i: C[i] - C[i + 1] + C[i + 2], name="D")
    s = te.create_schedule(D.op)
    xo, xi = s[D].split(D.op.axis[0], factor=5)
    s[C].compute_at(s[D], xo)
    co, ci = s[C].split(C.op.axis[0], factor=2)
    s[B].compute_at(s[C], co)
    a = rand((n + 4,))
    b = a.astype("float64") * 2
    c = b[:-2] + b[2:]
    check(run1(s, [A, D], [a], backend), c[:-2] - c[1:-1] + c[2:])


def test_two_producers_at_one_consumer(backend):
    m, n = sizes_for(backend, (5, 7), (41, 43))
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((m, n), lambda i, j: C[i, j] * 3.0, name="D")
    s = te.create_schedule(D.op)
    s[B].compute_at(s[D], D.op.axis[1])   # B's consumer C is also inside D's j loop
    s[C].compute_at(s[D], D.op.axis[1])
    a = rand((m, n))
    check(run1(s, [A, D], [a], backend), (a.astype("float64") * 2 + 1) * 3)


@pytest.mark.parametrize("where", ["i", "j", "io", "jo", "ii"])
def test_attach_of_reduction_numeric(where, backend):
    m, n, k = sizes_for(backend, (5, 7, 6), (37, 41, 43))
    w = matmul(m, n, k)
    D = te.compute((m, n), lambda i, j: te.max(w.C[i, j], 0.0) + 1.0, name="D")
    s = te.create_schedule(D.op)
    if where in ("i", "j"):
        scope = D.op.axis[0 if where == "i" else 1]
    else:
        io, jo, ii, ji = s[D].tile(D.op.axis[0], D.op.axis[1], 2, 3)
        scope = {"io": io, "jo": jo, "ii": ii}[where]
    s[w.C].compute_at(s[D], scope)
    ko, ki = s[w.C].split(w.r, factor=4)
    check(run1(s, [w.A, w.B, D], w.inputs, backend), np.maximum(w.ref, 0) + 1, k=k)


def test_attach_of_reduction_with_reduction_loop_outermost(backend):
    w = matmul(5, 7, 6)
    D = te.compute((5, 7), lambda i, j: w.C[i, j] * 2.0, name="D")
    s = te.create_schedule(D.op)
    io, jo, ii, ji = s[D].tile(D.op.axis[0], D.op.axis[1], 2, 3)
    s[w.C].compute_at(s[D], jo)
    s[w.C].reorder(w.r, *w.C.op.axis)
    s[w.C].vectorize(w.C.op.axis[1])
    check(run1(s, [w.A, w.B, D], w.inputs, backend), w.ref * 2, k=6)


@pytest.mark.parametrize("where", ["k", "k_outer_first", "j"])
def test_attach_at_reduction_loop_of_consumer(where, backend):
    M, N, K = sizes_for(backend, (5, 7, 6), (33, 35, 37))
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    P = te.compute((M, K), lambda i, k: A[i, k] * 2.0, name="P")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(P[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    if where == "k":
        s[P].compute_at(s[C], k)
    elif where == "j":
        s[P].compute_at(s[C], C.op.axis[1])
    else:
        ko, ki = s[C].split(k, factor=4)
        s[C].reorder(ko, *C.op.axis, ki)
        s[P].compute_at(s[C], ko)
    a, b = rand((M, K)), rand((K, N), seed=1)
    check(run1(s, [A, B, C], [a, b], backend), (a.astype("float64") * 2) @ b, k=K)


@pytest.mark.parametrize("m, n, f", [(3, 3, 2), (4, 5, 3), (5, 5, 2), (4, 4, 3)])
def test_attach_at_fused_loop_with_outer_loop_inside(m, n, f, backend):
    # regression: with the attached domain in absolute coordinates, isl's AST generator
    # produced a degenerate loop here and skipped rows of the producer (NaN in C)
    w = elementwise2d(m, n)
    s = w.schedule()
    io, ii = s[w.C].split(w.C.op.axis[0], factor=f)
    fused = s[w.C].fuse(ii, w.C.op.axis[1])
    s[w.C].reorder(fused, io)
    s[w.B].compute_at(s[w.C], fused)
    w.check(s, backend)


def test_attach_after_consumer_split_follows_inner(backend):
    # compute_at first, then split the scope loop: the attach moves to the inner loop, so
    # that B is still computed once per iteration of the original loop
    w = stencil1d(11)
    s = w.schedule()
    s[w.B].compute_at(s[w.C], w.C.op.axis[0])
    xo, xi = s[w.C].split(w.C.op.axis[0], factor=3)
    assert s[w.B].attach_ivar is xi
    assert _plan(s, w.args, "B").buffer.shape == (3,)
    w.check(s, backend)


def test_attach_then_reorder_consumer(backend):
    w = elementwise2d(5, 7)
    s = w.schedule()
    s[w.B].compute_at(s[w.C], w.C.op.axis[0])
    s[w.C].reorder(w.C.op.axis[1], w.C.op.axis[0])
    w.check(s, backend)


# ----------------------------------------------------------------------------- failures
def _three():
    A = te.placeholder((5, 7), name="A")
    B = te.compute((5, 7), lambda i, j: A[i, j] * 2.0, name="B")
    E = te.compute((5, 7), lambda i, j: A[i, j] + 1.0, name="E")
    C = te.compute((5, 7), lambda i, j: B[i, j] + E[i, j], name="C")
    D = te.compute((5, 7), lambda i, j: C[i, j] * 3.0, name="D")
    return A, B, E, C, D


def test_attach_to_non_consumer_raises():
    A, B, E, C, D = _three()
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match="compute_at: stage 'E' does not read 'B'; attach "
                       "'B' to one of its consumers"):
        s[B].compute_at(s[E], E.op.axis[0])


def test_attach_to_producer_raises():
    A, B, E, C, D = _three()
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match="stage 'B' does not read 'C'"):
        s[C].compute_at(s[B], B.op.axis[0])


def test_cycle_of_attaches_raises():
    A, B, E, C, D = _three()
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ScheduleError, match="compute_at: attaching 'C' to 'B' forms a cycle of "
                       "attaches"):
        s[C].compute_at(s[B], B.op.axis[0])


def test_attach_into_itself_raises():
    A, B, E, C, D = _three()
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match="stage 'C' cannot be computed inside itself"):
        s[C].compute_at(s[C], C.op.axis[0])


def test_attach_output_raises():
    A, B, E, C, D = _three()
    s = te.create_schedule([C.op, D.op])
    with pytest.raises(ScheduleError, match="stage 'C' is an output of the schedule"):
        s[C].compute_at(s[D], D.op.axis[0])


def test_attach_scope_of_another_stage_raises():
    A, B, E, C, D = _three()
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"compute_at: iter_var 'i' is not an axis of stage "
                       r"'C' \(it belongs to stage 'D'\)"):
        s[B].compute_at(s[C], D.op.axis[0])


def test_attach_placeholder_raises():
    A, B, E, C, D = _three()
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match="stage 'A' is a placeholder"):
        s[A].compute_at(s[C], C.op.axis[0])


def test_attach_where_another_consumer_reads_outside_raises():
    A, B, E, C, D = _three()
    F = te.compute((5, 7), lambda i, j: B[i, j] - D[i, j], name="F")
    s = te.create_schedule(F.op)
    s[B].compute_at(s[C], C.op.axis[1])
    with pytest.raises(ScheduleError, match=r"compute_at: stage 'B' is computed at 'C'.'j', but "
                       r"stage 'F' \(compute\) also reads it outside that loop"):
        lowered(s, [A, F])


def test_attach_to_inlined_stage_raises():
    A, B, E, C, D = _three()
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[1])
    s[C].compute_inline()
    with pytest.raises(ScheduleError, match="stage 'B' is attached to 'C', which is inlined"):
        lowered(s, [A, D])


def test_attached_stage_in_args_is_written_in_place():
    # TVM's schedule_primitives tutorial: an argument computed at its consumer's loop
    A, B, E, C, D = _three()
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[1])
    assert "B = alloc" not in lowered(s, [A, B, D])
    a = np.random.default_rng(7).random((5, 7)).astype("float32")
    b, d = np.full((5, 7), np.nan, "float32"), np.full((5, 7), np.nan, "float32")
    polytile.build(s, [A, B, D])(a, b, d)
    assert np.allclose(b, a.astype("float64") * 2, rtol=1e-6)
    assert np.allclose(d, (a.astype("float64") * 3 + 1) * 3, rtol=1e-6)


def test_attach_parent_not_a_stage_raises():
    A, B, E, C, D = _three()
    s = te.create_schedule(D.op)
    other = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match="is not a stage of this schedule"):
        s[B].compute_at(other[C], C.op.axis[0])


def _shadowed_loop_names(text: str) -> list[str]:
    """Loop variables whose ``for`` is nested in a ``for`` of the same name."""
    stack: list[tuple[int, str]] = []
    bad = []
    for line in text.splitlines():
        depth = len(line) - len(line.lstrip())
        stack = [(d, n) for d, n in stack if d < depth]
        s = line.strip()
        if s.startswith("for "):
            name = s.split()[1]
            if any(n == name for _, n in stack):
                bad.append(name)
            stack.append((depth, name))
    return bad


def test_printed_nest_of_attached_stage_has_no_shadowed_names():
    A = te.placeholder((6, 6), name="A")
    B = te.compute((6, 6), lambda i, j: A[i, j] * 2.0, name="B")
    E = te.compute((6, 6), lambda i, j: B[i, j] + B[j, i], name="E")
    s = te.create_schedule(E.op)
    s[B].compute_at(s[E], E.op.axis[0])
    assert _shadowed_loop_names(lowered(s, [A, E])) == []


def test_attached_stage_with_same_axis_names_numeric(backend):
    # B's own loops are named like E's; the footprint of row i and column i is the whole B
    A = te.placeholder((6, 6), name="A")
    B = te.compute((6, 6), lambda i, j: A[i, j] * 2.0, name="B")
    E = te.compute((6, 6), lambda i, j: B[i, j] + B[j, i], name="E")
    s = te.create_schedule(E.op)
    s[B].compute_at(s[E], E.op.axis[0])
    a = rand((6, 6))
    check(run1(s, [A, E], [a], backend), 2 * (a.astype("float64") + a.T))


def test_reduce_axis_shared_by_producer_and_consumer(backend):
    # the same reduce_axis object k is used by C and by D, and C is computed at D's k loop
    n = 6
    A = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), "k")
    C = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="C")
    D = te.compute((n,), lambda i: te.sum(C[k] * A[i, k], axis=k), name="D")
    a = rand((n, n))
    ref = (a.astype("float64") * a.astype("float64").sum(1)[None, :]).sum(1)
    for attach in (False, True):
        s = te.create_schedule(D.op)
        if attach:
            s[C].compute_at(s[D], k)
        else:
            s[C].split(k, factor=4)
            s[D].split(k, factor=5)
        check(run1(s, [A, D], [a], backend), ref, k=n * n)


@pytest.mark.parametrize("splits", [(5, 3), (2, 2), (5, 1)])
def test_attach_at_outer_loop_of_fused_then_split_3d(backend, splits):
    """Regions of a fused-and-twice-split loop are quasi-affine (floor divisions): their
    extent must still be found (isl refuses max_val of such a difference)."""
    n = 5 if splits == (2, 2) else 7
    A = te.placeholder((n, n, n), name="A")
    B = te.compute((n, n, n), lambda i, j, k: A[i, j, k] + 1.0, name="B")
    C = te.compute((n, n, n), lambda i, j, k: B[(i + 1) % n, j, k] * 2.0, name="C")
    s = te.create_schedule(C.op)
    x = s[C].fuse(*C.op.axis)
    for f in splits:
        x, _ = s[C].split(x, f)
    s[B].compute_at(s[C], x)
    a = rand((n, n, n))
    check(run1(s, [A, C], [a], backend), (np.roll(a, -1, axis=0).astype("float64") + 1) * 2)


def test_attach_with_trivially_true_isl_conditions(backend):
    n = 11
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((n, n), lambda i, j: B[i, j] * B[(i + 1) % n, (j * 7) % n], name="C")
    s = te.create_schedule(C.op)
    x = s[C].fuse(*C.op.axis)
    x, _ = s[C].split(x, 5)
    x, _ = s[C].split(x, 1)
    s[B].compute_at(s[C], x)
    a = rand((n, n)).astype("float64")
    b = a + 1
    ref = b * b[(np.arange(n)[:, None] + 1) % n, (np.arange(n)[None, :] * 7) % n]
    check(run1(s, [A, C], [a.astype("float32")], backend), ref)
