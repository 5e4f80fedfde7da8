"""LLVM backend: parallel and vectorized loops, allocations, on hand-written loop IR."""

from __future__ import annotations

import re

import numpy as np
import pytest
from llvm_ir_helpers import (Allocate, Call, Cast, Cmp, Const, IfThenElse, LetStmt, Select,
                             binop, buf, build, c64, ld, loop, poison, rand, seq, st, var)

from polytile.errors import InternalError
from polytile.targets.llvm.runtime import get_num_threads, set_num_threads
from polytile.targets import Target
from polytile.te.expr import And

#: float32 lanes of one SIMD register of the host (vectorized loops are strip-mined to it)
NATIVE_F32 = Target.parse("llvm").vector_lanes(4)


@pytest.fixture(params=(1, 2), ids=("1thread", "2threads"))
def threads(request):
    old = get_num_threads()
    set_num_threads(request.param)
    assert get_num_threads() == request.param
    yield request.param
    set_num_threads(old)


def _matmul_ir(M, N, K, lanes=16, parallel=True):
    """C = A @ B: i parallel, k, j.outer, j.inner vectorized, C accumulated in place.
    N must be a multiple of ``lanes``."""
    A, B, C = buf("A", (M, K)), buf("B", (K, N)), buf("C", (M, N))
    i, k, jo, ji = var("i"), var("k"), var("j.outer"), var("j.inner")
    j = jo * lanes + ji
    init = loop(jo, N // lanes, loop(ji, lanes, st(C, i * N + j, Const("float32", 0.0)),
                                     "vectorized"))
    upd = loop(k, K, loop(jo, N // lanes, loop(ji, lanes, st(
        C, i * N + j, ld(C, i * N + j) + ld(A, i * K + k) * ld(B, k * N + j)), "vectorized")))
    return [A, B, C], loop(i, M, seq(init, upd), "parallel" if parallel else "serial")


# ----------------------------------------------------------------------------- parallel
@pytest.mark.parametrize("M", (1, 7, 31, 130))
def test_parallel_vectorized_matmul(M, threads):
    N, K = 48, 17
    params, body = _matmul_ir(M, N, K)
    m = build(params, body)
    a, b = rand((M, K), "float32"), rand((K, N), "float32")
    c = poison((M, N), "float32")
    m(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)
    assert "GOMP_parallel" in m.get_source("ll", optimized=False)


@pytest.mark.parametrize("n", (0, 1, 2, 3, 17, 131))
def test_parallel_extents_and_captured_scalars(n, threads):
    # captured: a scalar param, an enclosing let variable, a buffer; chunking of any extent
    X, Y = buf("X", 140, "int64"), buf("Y", 140, "int64")
    s, off, i = var("s", "int64"), var("off"), var("i")
    body = LetStmt(off, s * 2, loop(i, n, st(Y, i + 3, ld(X, i) + off + i), "parallel"))
    m = build([X, Y, s], body)
    x = rand(140, "int64")
    y = poison(140, "int64")
    m(x, y, 5)
    ref = poison(140, "int64")
    ref[3:3 + n] = x[:n] + 10 + np.arange(n)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("nthreads", (2, 3, 5))
@pytest.mark.parametrize("n", (1, 2, 7, 16, 131))
def test_parallel_chunks_run_each_iteration_once(n, nthreads):
    # Y[i] += i + 1 from a poisoned-free start: an iteration run twice (two chunks taken
    # from the shared counter overlapping) or never shows in Y
    old = get_num_threads()
    set_num_threads(nthreads)
    try:
        Y = buf("Y", 140, "int64")
        i = var("i")
        m = build([Y], loop(i, n, st(Y, i, ld(Y, i) + i + 1), "parallel"))
        y = np.zeros(140, "int64")
        m(y)
    finally:
        set_num_threads(old)
    ref = np.zeros(140, "int64")
    ref[:n] = np.arange(n) + 1
    np.testing.assert_array_equal(y, ref)


def test_parallel_loop_takes_chunks_from_a_shared_counter():
    # dynamic chunks (parallel.py): a descheduled thread leaves its chunks to the others
    i = var("i")
    Y = buf("Y", 64, "int32")
    src = build([Y], loop(i, 64, st(Y, i, Cast("int32", i)), "parallel")).get_source(
        "ll", optimized=False)
    assert re.search(r"atomicrmw add i64\*? ?%?[^,]*, i64 %", src), src[-3000:]
    assert "omp_get_thread_num" not in src


def test_parallel_with_min_and_step(threads):
    Y = buf("Y", 64, "int32")
    i = var("i")
    m = build([Y], loop(i, 40, st(Y, i, Cast("int32", i * 3)), "parallel", lo=5, step=3))
    y = np.full(64, -1, "int32")
    m(y)
    ref = np.full(64, -1, "int32")
    ref[5:45:3] = np.arange(5, 45, 3) * 3
    np.testing.assert_array_equal(y, ref)


def test_nested_parallel_runs_inner_serially(threads):
    M, N = 13, 9
    C = buf("C", (M, N), "int32")
    i, j = var("i"), var("j")
    body = loop(i, M, loop(j, N, st(C, i * N + j, Cast("int32", i * 100 + j)), "parallel"),
                "parallel")
    m = build([C], body)
    c = poison((M, N), "int32")
    m(c)
    np.testing.assert_array_equal(c, np.arange(M)[:, None] * 100 + np.arange(N)[None, :])
    assert m.get_source("ll", optimized=False).count("call void @\"GOMP_parallel\"") == 1


def test_two_sibling_parallel_loops_and_a_serial_outer_loop(threads):
    T, N = 3, 29
    X = buf("X", N, "float64")
    t, i, j = var("t"), var("i"), var("j")
    body = loop(t, T, seq(loop(i, N, st(X, i, ld(X, i) * 2.0), "parallel"),
                          loop(j, N, st(X, j, ld(X, j) + 1.0), "parallel")))
    x = rand(N, "float64")
    ref = x.copy()
    for _ in range(T):
        ref = ref * 2 + 1
    build([X], body)(x)
    np.testing.assert_array_equal(x, ref)


def test_parallel_body_allocations_are_thread_private(threads):
    # each iteration fills a private stack row and a private heap row, then reduces them
    M, W = 64, 33
    X, Y = buf("X", (M, W)), buf("Y", M)
    tmp_s = buf("tmp_s", W, "float32", "stack")
    tmp_h = buf("tmp_h", W, "float32", "heap")
    i, j, k = var("i"), var("j"), var("k")
    fill = loop(j, W, seq(st(tmp_s, j, ld(X, i * W + j) * 2.0),
                          st(tmp_h, j, ld(X, i * W + j) + 1.0)))
    red = seq(st(Y, i, Const("float32", 0.0)),
              loop(k, W, st(Y, i, ld(Y, i) + ld(tmp_s, k) - ld(tmp_h, k))))
    body = loop(i, M, Allocate(tmp_s, Allocate(tmp_h, seq(fill, red))), "parallel")
    m = build([X, Y], body)
    x = rand((M, W), "float32")
    y = poison(M, "float32")
    m(x, y)
    np.testing.assert_allclose(y, (x * 2 - (x + 1)).sum(axis=1), rtol=1e-5, atol=1e-4)


def test_heap_allocation_failure_inside_parallel_body_raises(threads):
    # big[j] = X[j]; Y[i] = big[P[i]]: data-dependent uses keep LLVM from eliding malloc
    n = var("n")
    X, P, Y = buf("X", 8, "int8"), buf("P", 4, "int64"), buf("Y", 4, "int8")
    big = buf("big", (n,), "int8", "heap")
    i, j = var("i"), var("j")
    body = loop(i, 4, Allocate(big, seq(loop(j, 8, st(big, j, ld(X, j))),
                                        st(Y, i, ld(big, ld(P, i))))), "parallel")
    m = build([X, P, Y, n], body)
    x, p = rand(8, "int8"), np.array([3, 0, 7, 3], "int64")
    y = poison(4, "int8")
    m(x, p, y, 16)
    np.testing.assert_array_equal(y, x[p])
    with pytest.raises(MemoryError, match="heap allocation failed"):
        m(x, p, y, 1 << 62)


# ----------------------------------------------------------------------------- vectorized
def _vec_loop(n, lanes, body):
    """body(i) for i in [0, n) with n a multiple of lanes: outer serial, inner vectorized."""
    io, ii = var("i.outer"), var("i.inner")
    return loop(io, n // lanes, loop(ii, lanes, body(io * lanes + ii), "vectorized"))


@pytest.mark.parametrize("lanes", (1, 2, 7, 16, 17, 64))
def test_vectorized_stride1_broadcast_and_scalar_param(lanes):
    n = lanes * 3
    A, S, C = buf("A", n), buf("S", 1), buf("C", n)
    alpha = var("alpha", "float32")
    m = build([A, S, C, alpha], _vec_loop(n, lanes, lambda i: st(
        C, i, ld(A, i) * ld(S, 0) + alpha)))
    a, s = rand(n, "float32"), rand(1, "float32")
    c = poison(n, "float32")
    m(a, s, c, 0.25)
    np.testing.assert_allclose(c, a * s[0] + np.float32(0.25), rtol=1e-6)
    if lanes in (16, 64):
        # one native register at a time: longer loops are strip-mined
        w = min(lanes, NATIVE_F32)
        ir = m.get_source("ll", optimized=False)
        assert f"load <{w} x float>" in ir and f"store <{w} x float>" in ir
        assert (f"<{lanes} x float>" in ir) == (lanes <= NATIVE_F32)


@pytest.mark.parametrize("stride", (0, 2, 3, -1))
def test_vectorized_gather(stride):
    n, lanes = 32, 16
    src_len = n * max(abs(stride), 1) + 8
    A, C = buf("A", src_len), buf("C", n)

    def body(i):
        idx = i * stride + (n - 1 if stride < 0 else 0) if stride != 0 else c64(5)
        return st(C, i, ld(A, idx) + 1.0)

    m = build([A, C], _vec_loop(n, lanes, body))
    a = rand(src_len, "float32")
    c = poison(n, "float32")
    m(a, c)
    idx = np.arange(n) * stride + (n - 1 if stride < 0 else 0) if stride != 0 else \
        np.full(n, 5)
    np.testing.assert_array_equal(c, a[idx] + 1)
    if stride in (2, 3):
        assert "llvm.masked.gather" in m.get_source("ll", optimized=False)


def test_vectorized_nonaffine_gather_through_index_buffer():
    n, lanes, src = 48, 16, 100
    A, IDX, C = buf("A", src), buf("IDX", n, "int32"), buf("C", n)
    m = build([A, IDX, C], _vec_loop(n, lanes, lambda i: st(
        C, i, ld(A, Cast("int64", ld(IDX, i))))))
    a = rand(src, "float32")
    idx = np.random.default_rng(1).integers(0, src, n).astype("int32")
    c = poison(n, "float32")
    m(a, idx, c)
    np.testing.assert_array_equal(c, a[idx])


@pytest.mark.parametrize("stride", (2, 3))
def test_vectorized_strided_store(stride):
    n, lanes = 32, 16
    A, C = buf("A", n, "int32"), buf("C", n * stride, "int32")
    m = build([A, C], _vec_loop(n, lanes, lambda i: st(C, i * stride + 1, ld(A, i) * 3)))
    a = rand(n, "int32")
    c = poison(n * stride, "int32")
    m(a, c)
    ref = poison(n * stride, "int32")
    ref[1::stride] = a * 3
    np.testing.assert_array_equal(c, ref)
    assert "llvm.masked.scatter" in m.get_source("ll", optimized=False)


def test_vectorized_store_to_uniform_address_keeps_the_last_lane():
    n, lanes = 32, 16
    A, C = buf("A", n), buf("C", 2)
    io, ii = var("i.outer"), var("i.inner")
    body = loop(io, n // lanes, loop(ii, lanes, st(C, io, ld(A, io * lanes + ii)), "vectorized"))
    a = rand(n, "float32")
    c = poison(2, "float32")
    build([A, C], body)(a, c)
    np.testing.assert_array_equal(c, a[lanes - 1::lanes])


@pytest.mark.parametrize("dtype", ("float32", "float64", "int32", "int8", "float16"))
def test_vectorized_in_place_accumulation(dtype):
    # C[i] = C[i] + A[i] * B[i]: the reduction-style body of a matmul's inner loop
    n, lanes = 64, 16
    A, B, C = buf("A", n, dtype), buf("B", n, dtype), buf("C", n, dtype)
    m = build([A, B, C], _vec_loop(n, lanes, lambda i: st(C, i, ld(C, i) + ld(A, i) * ld(B, i))))
    a, b, c = rand(n, dtype, -5, 5), rand(n, dtype, -5, 5), rand(n, dtype, -5, 5)
    if np.dtype(dtype).kind != "f":
        ref = c + a * b  # integers wrap in the declared dtype, as numpy's do
        m(a, b, c)
        np.testing.assert_array_equal(c, ref)
        return
    # floats: the product may or may not be rounded before the add (FMA contraction; with
    # AVX512-FP16 float16 has its own FMA), so the bound is two roundings of the terms
    a64, b64, c64 = (x.astype("float64") for x in (a, b, c))
    ref = c64 + a64 * b64
    bound = 2 * np.finfo(dtype).eps * (np.abs(c64) + np.abs(a64 * b64))
    m(a, b, c)
    assert np.all(np.abs(c.astype("float64") - ref) <= bound), (c, ref)


def test_vectorized_let_floordiv_select_and_bool():
    # out[i] = (i // 3 - 5) if mask[i] else A[i % 7]... with safe (no-load) select operands
    n, lanes = 48, 16
    A, M, C, D = buf("A", n, "int64"), buf("M", n, "bool"), buf("C", n, "int64"), \
        buf("D", n, "bool")
    x = var("x")

    def body(i):
        q = binop("floordiv", i - 20, c64(3))
        r = binop("floormod", i - 20, c64(-4))
        return LetStmt(x, ld(A, i), seq(
            st(C, i, Select("int64", ld(M, i), q + x, r * x)),
            st(D, i, Cmp("bool", "lt", x, q))))

    m = build([A, M, C, D], _vec_loop(n, lanes, body))
    a, mask = rand(n, "int64"), rand(n, "bool")
    c, d = poison(n, "int64"), poison(n, "bool")
    m(a, mask, c, d)
    i = np.arange(n)
    q, r = (i - 20) // 3, (i - 20) % -4
    np.testing.assert_array_equal(c, np.where(mask, q + a, r * a))
    d_ref = a < q
    np.testing.assert_array_equal(d, d_ref)
    assert d_ref.any() and not d_ref.all()


def test_vectorized_calls_use_vector_and_libm_paths():
    n, lanes = 32, 16
    A, C = buf("A", n), buf("C", n)
    m = build([A, C], _vec_loop(n, lanes, lambda i: st(
        C, i, Call("float32", "sqrt", (ld(A, i),)) + Call("float32", "tanh", (ld(A, i),)))))
    a = rand(n, "float32", 0.1, 3)
    c = poison(n, "float32")
    m(a, c)
    np.testing.assert_allclose(c, np.sqrt(a) + np.tanh(a), rtol=1e-6)
    assert "llvm.sqrt.v16f32" in m.get_source("ll", optimized=False)


def test_vectorized_select_with_load_falls_back_to_scalar_code():
    # C[i] = A[i - 1] if i > 0 else 0 with i varying across lanes: unsafe to widen
    n, lanes = 32, 16
    A, C = buf("A", n), buf("C", n)
    m = build([A, C], _vec_loop(n, lanes, lambda i: st(C, i, Select(
        "float32", Cmp("bool", "gt", i, c64(0)), ld(A, i - 1), Const("float32", 0.0)))))
    big = rand(n + 1, "float32")
    big[0] = 12345.0
    a = big[1:]
    c = poison(n, "float32")
    m(a, c)
    np.testing.assert_array_equal(c, np.concatenate([[0], a[:-1]]).astype("float32"))
    ir = m.get_source("ll", optimized=False)
    # unrolled scalar lanes (in chunks of one register's width)
    assert "<16 x" not in ir and f"i.inner.{min(lanes, NATIVE_F32) - 1}" in ir


def test_vectorized_fallbacks_for_varying_and_and_allocate():
    # (i > 0) and (A[i - 1] > 0) needs a short circuit per lane; an Allocate cannot be
    # widened: both loops run as unrolled scalar code and stay correct
    n, lanes = 32, 16
    A, C, D = buf("A", n), buf("C", n, "bool"), buf("D", n)
    t = buf("t", 2, "float32", "stack")
    far = c64(1 << 40)

    def guarded(i):
        idx = Select("int64", Cmp("bool", "gt", i, c64(0)), i - 1, far)
        return st(C, i, And("bool", Cmp("bool", "gt", i, c64(0)),
                            Cmp("bool", "gt", ld(A, idx), Const("float32", 0.0))))

    def with_alloc(i):
        return Allocate(t, seq(st(t, 1, ld(A, i) * 2.0), st(D, i, ld(t, 1) + 1.0)))

    m = build([A, C, D], seq(_vec_loop(n, lanes, guarded), _vec_loop(n, lanes, with_alloc)))
    assert "<16 x" not in m.get_source("ll", optimized=False)
    a = rand(n, "float32")
    ref = np.concatenate([[False], a[:-1] > 0])
    c, d = ~ref, poison(n, "float32")
    m(a, c, d)
    np.testing.assert_array_equal(c, ref)
    np.testing.assert_array_equal(d, a * 2 + 1)


def test_vectorized_uniform_select_with_load_keeps_branches():
    # the condition depends only on the outer loop: widened, operands behind a branch
    n, lanes = 48, 16
    A, C = buf("A", n), buf("C", n)
    io, ii = var("i.outer"), var("i.inner")
    i = io * lanes + ii
    body = loop(io, n // lanes, loop(ii, lanes, st(C, i, Select(
        "float32", Cmp("bool", "gt", io, c64(0)), ld(A, i - lanes), ld(A, i) * 2.0)),
        "vectorized"))
    m = build([A, C], body)
    a = rand(n, "float32")
    c = poison(n, "float32")
    m(a, c)
    np.testing.assert_array_equal(c, np.concatenate([a[:lanes] * 2, a[:-lanes]]))
    ir = m.get_source("ll", optimized=False)
    assert f"phi  <{min(lanes, NATIVE_F32)} x float>" in ir


def test_vectorized_select_on_a_uniform_condition_with_varying_operands():
    # no operand may trap: a plain select of two vectors on a scalar condition
    n, lanes = 48, 16
    C = buf("C", n, "int64")
    s = var("s", "int64")
    io, ii = var("i.outer"), var("i.inner")
    i = io * lanes + ii
    body = loop(io, n // lanes, loop(ii, lanes, st(C, i, Select(
        "int64", Cmp("bool", "gt", s, io), i * 3, binop("floormod", i, c64(5)))),
        "vectorized"))
    c = poison(n, "int64")
    build([C, s], body)(c, 2)
    i_ = np.arange(n)
    np.testing.assert_array_equal(c, np.where(i_ // lanes < 2, i_ * 3, i_ % 5))


def test_vectorized_if_then_else_uniform_and_varying():
    n, lanes = 32, 16
    A, C = buf("A", n, "int32"), buf("C", n, "int32")
    io, ii = var("i.outer"), var("i.inner")
    i = io * lanes + ii
    uni = IfThenElse(Cmp("bool", "eq", io, c64(0)), st(C, i, ld(A, i) + 1),
                     st(C, i, ld(A, i) - 1))
    var_ = IfThenElse(Cmp("bool", "lt", ii, c64(5)), st(C, i, ld(C, i) * 10))
    body = loop(io, n // lanes, seq(loop(ii, lanes, uni, "vectorized"),
                                    loop(ii, lanes, var_, "vectorized")))
    a = rand(n, "int32")
    c = poison(n, "int32")
    build([A, C], body)(a, c)
    ref = np.concatenate([a[:16] + 1, a[16:] - 1])
    ref[(np.arange(n) % lanes) < 5] *= 10
    np.testing.assert_array_equal(c, ref)


def test_vectorized_inside_parallel_with_stack_buffer(threads):
    M, W = 37, 32
    X, Y = buf("X", (M, W)), buf("Y", (M, W))
    t = buf("t", W, "float32", "stack")
    i, jo, ji = var("i"), var("j.outer"), var("j.inner")
    j = jo * 16 + ji
    body = loop(i, M, Allocate(t, seq(
        loop(jo, W // 16, loop(ji, 16, st(t, j, ld(X, i * W + j) * 3.0), "vectorized")),
        loop(jo, W // 16, loop(ji, 16, st(Y, i * W + j, ld(t, j) + ld(t, W - 1 - j)),
                                "vectorized")))), "parallel")
    x = rand((M, W), "float32")
    y = poison((M, W), "float32")
    build([X, Y], body)(x, y)
    np.testing.assert_allclose(y, x * 3 + (x * 3)[:, ::-1], rtol=1e-6)


def test_vectorized_float32_extent16_emits_simd_asm():
    params, body = _matmul_ir(8, 32, 8, lanes=16, parallel=False)
    asm = build(params, body).get_source("asm")
    assert re.search(r"\b[yz]mm\d+", asm)
    assert re.search(r"vfmadd\w*ps", asm)


def test_vectorized_contract_violations_raise_internal_error():
    A = buf("A", 16)
    i, j, n = var("i"), var("j"), var("n")
    with pytest.raises(InternalError, match="non-constant extent"):
        build([A, n], loop(i, n, st(A, i, Const("float32", 0.0)), "vectorized"))
    with pytest.raises(InternalError, match="contains another loop"):
        build([A], loop(i, 4, loop(j, 4, st(A, i * 4 + j, Const("float32", 0.0))),
                        "vectorized"))


# ----------------------------------------------------------------------------- allocation
def _entry_block(ir_text: str, fn: str) -> str:
    body = ir_text.split(f'@"{fn}"(', 1)[1]
    return body.split("start:", 1)[0]


def test_stack_allocation_is_hoisted_to_the_entry_block():
    N, W = 23, 7
    X, Y = buf("X", (N, W), "int32"), buf("Y", N, "int32")
    t = buf("t", W, "int32", "stack")
    i, j, k = var("i"), var("j"), var("k")
    body = loop(i, N, Allocate(t, seq(
        loop(j, W, st(t, j, ld(X, i * W + j) * 2)),
        st(Y, i, Const("int32", 0)),
        loop(k, W, st(Y, i, ld(Y, i) + ld(t, W - 1 - k))))))
    m = build([X, Y], body)
    x = rand((N, W), "int32")
    y = poison(N, "int32")
    m(x, y)
    np.testing.assert_array_equal(y, (x * 2).sum(axis=1))
    text = m.get_source("ll", optimized=False)
    assert text.count("alloca") == 1 and "alloca" in _entry_block(text, "f")


def test_heap_allocation_with_symbolic_size_and_failure():
    n = var("n")
    X, Y = buf("X", 64, "float64"), buf("Y", 64, "float64")
    h = buf("h", (n, 2), "float64", "heap")
    i = var("i")
    body = Allocate(h, seq(loop(i, n * 2, st(h, i, ld(X, i) + 1.0)),
                           loop(i, n * 2, st(Y, i, ld(h, n * 2 - 1 - i)))))
    m = build([X, Y, n], body)
    x = rand(64, "float64")
    y = poison(64, "float64")
    m(x, y, 31)
    np.testing.assert_array_equal(y[:62], (x[:62] + 1)[::-1])
    assert np.isnan(y[62:]).all()
    text = m.get_source("ll", optimized=False)
    assert '@"malloc"' in text and '@"free"' in text
    with pytest.raises(MemoryError, match="heap allocation failed"):
        m(x, y, 1 << 61)  # 2**61 * 2 * 8 bytes overflows the size computation
    with pytest.raises(MemoryError):
        m(x, y, 1 << 56)  # 2**60 bytes: malloc returns NULL


def test_nested_heap_allocations_free_outer_on_inner_failure():
    n = var("n")
    Y = buf("Y", 2, "int64")
    h1 = buf("h1", 4, "int64", "heap")
    h2 = buf("h2", (n,), "int64", "heap")
    body = Allocate(h1, seq(st(h1, 0, c64(7)), Allocate(h2, seq(
        st(h2, 0, ld(h1, 0)), st(Y, 0, ld(h2, 0))))))
    m = build([Y, n], body)
    y = np.zeros(2, "int64")
    m(y, 3)
    assert y[0] == 7
    with pytest.raises(MemoryError):
        m(y, 1 << 62)
    text = m.get_source("ll", optimized=False)
    assert text.count('call void @"free"') == 3  # h2 and h1 on success, h1 on failure


def test_heap_buffers_start_on_a_cache_line():
    # a packed GEMM panel read with 64-byte vectors: malloc's 16-byte alignment would make
    # every vector straddle two cache lines, so the start is rounded up (a byte offset
    # from malloc's pointer, freed through the original pointer)
    from polytile.targets.llvm.codegen import HEAP_ALIGN

    n = 37
    X, Y = buf("X", n), buf("Y", n)
    tmp = buf("tmp", n, "float32", "heap")
    i, j = var("i"), var("j")
    body = Allocate(tmp, seq(loop(i, n, st(tmp, i, ld(X, i) * 2.0)),
                             loop(j, n, st(Y, n - 1 - j, ld(tmp, j) + 1.0))))
    m = build([X, Y], body)
    x, y = rand(n, "float32"), poison(n, "float32")
    m(x, y)
    np.testing.assert_allclose(y, (x * 2 + 1)[::-1], rtol=1e-6)
    ll = m.get_source("ll", optimized=False)
    assert HEAP_ALIGN == 64
    assert re.search(r'uadd\.with\.overflow\.i64"?\(i64 %\S+, i64 63\)', ll), ll
    assert re.search(r"and i64 %\S+, 63", ll), ll
    assert re.search(r'getelementptr inbounds i8, i8\* %"?tmp\.raw"?', ll), ll
    assert re.search(r'call void @"?free"?\(i8\* %"?tmp\.raw"?\)', ll), ll
