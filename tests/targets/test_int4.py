"""int4/uint4 tensors (TVM's 4-bit storage): packed two per byte along the last axis, low
nibble first, arithmetic wrapping modulo 16, on ``llvm`` and CUDA (the host emulation of
the driver, a GPU where there is one, nvcc on the source). References are numpy int64
computations wrapped to 4 bits; outputs start as poison bytes (0xAB), and the unused high
nibble of an odd row must keep its poison (a store writes only its own nibble)."""

from __future__ import annotations


import numpy as np
import pytest
from helpers import compile_with_nvcc, nvcc_text

import polytile
from polytile import LoweringError, te
from polytile.nd import pack_int4, unpack_int4
from polytile.te import dtype as dt


POISON = 0xAB


def wrap4(x, dtype="int4"):
    """numpy int64 values wrapped into int4/uint4 (two's complement modulo 16)."""
    x = np.asarray(x, np.int64)
    return (x & 15) if dtype == "uint4" else ((x + 8) % 16) - 8


def poison(shape) -> np.ndarray:
    return np.full(dt.packed_shape(shape), POISON, np.uint8)


def rand4(shape, dtype="int4", seed=0):
    lo, hi = dt.min_value(dtype), dt.max_value(dtype)
    return np.random.default_rng(seed).integers(lo, hi + 1, shape)


def check4(packed, want, dtype="int4"):
    """``packed`` holds ``want`` and every unused high nibble kept the poison."""
    n = want.shape[-1] if want.ndim else None
    np.testing.assert_array_equal(unpack_int4(packed, n, dtype), want)
    if want.ndim and n % 2:
        assert ((packed[..., -1] >> 4) == POISON >> 4).all(), "neighbour nibble clobbered"


# ------------------------------------------------------------------ host packing helpers
@pytest.mark.parametrize("shape", [(1,), (7,), (8,), (3, 5), (2, 3, 4), ()])
@pytest.mark.parametrize("d", ["int4", "uint4"])
def test_pack_unpack_round_trip(shape, d):
    v = rand4(shape, d, seed=len(shape))
    p = pack_int4(v, d)
    assert p.dtype == np.uint8 and p.shape == dt.packed_shape(shape)
    n = shape[-1] if shape else None
    np.testing.assert_array_equal(unpack_int4(p, n, d), v)


def test_pack_layout_is_low_nibble_first():
    assert pack_int4([1, -2, 3]).tolist() == [0xE1, 0x03]
    assert pack_int4([[15, 0], [1, 2]], "uint4").tolist() == [[0x0F], [0x21]]


def test_pack_refuses_values_out_of_range():
    with pytest.raises(ValueError, match=r"pack_int4: values in \[-9, 3\] do not fit in "
                       r"int4 \[-8, 7\]"):
        pack_int4([3, -9])
    with pytest.raises(ValueError, match="do not fit in uint4"):
        pack_int4([16], "uint4")
    with pytest.raises(TypeError, match="unpack_int4: an array of dtype int8"):
        unpack_int4(np.zeros(3, np.int8))
    with pytest.raises(ValueError, match="unpack_int4: 5 elements take 3 bytes"):
        unpack_int4(np.zeros(2, np.uint8), 5)


# ------------------------------------------------------------------ definitions
def test_int4_constants_and_wrapping_at_definition():
    with pytest.raises(OverflowError, match=r"8 does not fit in int4 \[-8, 7\]"):
        te.const(8, "int4")
    assert te.const(300).astype("int4").value == wrap4(300)
    assert te.const(-1).astype("uint4").value == 15
    A = te.placeholder((3,), dtype="int4")
    assert (A[0] + A[1]).dtype == "int4"
    assert (A[0] + te.const(1, "int8")).dtype == "int8"


# ------------------------------------------------------------------ llvm
def _mul_scale(m, n, sched):
    """B = A * int4(W) (int4, wraps), C = float32(B) * 0.5 - int32(W); A int4, W uint4."""
    A = te.placeholder((m, n), name="A", dtype="int4")
    W = te.placeholder((m, n), name="W", dtype="uint4")
    B = te.compute((m, n), lambda i, j: A[i, j] * W[i, j].astype("int4"), name="B")
    C = te.compute((m, n), lambda i, j: B[i, j].astype("float32") * 0.5
                   - W[i, j].astype("int32").astype("float32"), name="C")
    s = te.create_schedule(C.op)
    sched(s, B, C)
    return s, [A, W, B, C]


def _plain(s, B, C):
    pass


def _parallel_inner(s, B, C):
    # neighbouring nibbles of one byte written by different threads: atomic stores
    s[B].parallel(B.op.axis[1])


def _parallel_outer(s, B, C):
    s[B].parallel(B.op.axis[0])
    s[C].parallel(C.op.axis[0])


def _vectorized(s, B, C):
    # the int4 store loop runs serially; the float consumer reads int4 in vector lanes
    jo, ji = s[B].split(B.op.axis[1], 4)
    s[B].vectorize(ji)
    jo, ji = s[C].split(C.op.axis[1], 4)
    s[C].vectorize(ji)


def _at_consumer(s, B, C):
    s[B].compute_at(s[C], C.op.axis[0])


def _unrolled_odd_split(s, B, C):
    jo, ji = s[B].split(B.op.axis[1], 3)
    s[B].unroll(ji)


SCHEDULES = [_plain, _parallel_inner, _parallel_outer, _vectorized, _at_consumer,
             _unrolled_odd_split]


@pytest.mark.parametrize("sched", SCHEDULES, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("m,n", [(5, 9), (1, 1), (3, 8), (4, 13)])
def test_int4_llvm(sched, m, n):
    s, args = _mul_scale(m, n, sched)
    f = polytile.build(s, args)
    a, w = rand4((m, n), seed=m * n), rand4((m, n), "uint4", seed=m + n)
    b, c = poison((m, n)), np.full((m, n), np.nan, np.float32)
    f(pack_int4(a), pack_int4(w, "uint4"), b, c)
    want = wrap4(a * wrap4(w))
    check4(b, want)
    np.testing.assert_array_equal(c, want * 0.5 - w)


def test_int4_parallel_stores_are_atomic():
    s, args = _mul_scale(3, 9, _parallel_inner)
    ll = polytile.build(s, args).get_source("ll")
    assert "atomicrmw and" in ll and "atomicrmw or" in ll


def test_int4_intermediate_at_consumer_is_packed():
    s, args = _mul_scale(5, 9, _at_consumer)
    A, W, B, C = args
    f = polytile.build(s, [A, W, C])
    a, w = rand4((5, 9), seed=3), rand4((5, 9), "uint4", seed=4)
    c = np.full((5, 9), np.nan, np.float32)
    f(pack_int4(a), pack_int4(w, "uint4"), c)
    np.testing.assert_array_equal(c, wrap4(a * wrap4(w)) * 0.5 - w)
    low = polytile.lower(s, [A, W, C], stop_after=None)
    assert "B = alloc(uint8[1, 5]" in str(low)   # one row of 9 nibbles


@pytest.mark.parametrize("src,dst", [("int4", "int8"), ("int4", "int32"), ("int4", "float32"),
                                     ("uint4", "int32"), ("int8", "int4"), ("int32", "uint4"),
                                     ("float32", "int4"), ("int4", "uint4"), ("uint4", "int4")])
def test_int4_casts(src, dst):
    n = 11
    A = te.placeholder((n,), name="A", dtype=src)
    B = te.compute((n,), lambda i: A[i].astype(dst), name="B")
    s = te.create_schedule(B.op)
    f = polytile.build(s, [A, B])
    rng = np.random.default_rng(7)
    if dt.is_int4(src):
        a = rand4((n,), src, seed=5)
        arg = pack_int4(a, src)
    elif src == "float32":
        a = rng.integers(-8, 8, n).astype(np.float32) + rng.uniform(0, 0.9, n).astype(
            np.float32)
        arg = a
    else:
        a = rng.integers(-100, 100, n).astype(src)
        arg = a
    out = poison((n,)) if dt.is_int4(dst) else np.full(n, 99, dt.to_numpy(dst))
    f(arg, out)
    if dt.is_int4(dst):
        exact = np.trunc(a).astype(np.int64) if src == "float32" else a
        check4(out, wrap4(exact, dst), dst)
    else:
        np.testing.assert_array_equal(out, a.astype(dst))


def test_int4_arithmetic_wraps_like_4_bit_integers():
    n = 16
    A = te.placeholder((n,), name="A", dtype="int4")
    U = te.placeholder((n,), name="U", dtype="uint4")
    ops = [lambda x: x + te.const(1, "int4"), lambda x: x * x, lambda x: -x,
           lambda x: x // te.const(-1, "int4"), lambda x: te.max(x, te.const(-3, "int4")),
           lambda x: (x >> te.const(1, "int4")) ^ te.const(5, "int4")]
    refs = [lambda x: x + 1, lambda x: x * x, lambda x: -x, lambda x: x // -1,
            lambda x: np.maximum(x, -3), lambda x: (x >> 1) ^ 5]
    def elementwise(op):
        return lambda i: op(A[i])

    outs = [te.compute((n,), elementwise(op), name=f"B{k}") for k, op in enumerate(ops)]
    V = te.compute((n,), lambda i: U[i] - te.const(3, "uint4"), name="V")
    s = te.create_schedule([o.op for o in outs] + [V.op])
    f = polytile.build(s, [A, U, *outs, V])
    a = np.arange(-8, 8)
    u = np.arange(16)
    got = [poison((n,)) for _ in outs]
    v = poison((n,))
    f(pack_int4(a), pack_int4(u, "uint4"), *got, v)
    for g, ref in zip(got, refs):
        check4(g, wrap4(ref(a)))
    check4(v, wrap4(u - 3, "uint4"), "uint4")


def test_int4_reductions():
    m, n = 3, 13
    A = te.placeholder((m, n), name="A", dtype="int4")
    k = te.reduce_axis((0, n), name="k")
    S4 = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="S4")
    k2 = te.reduce_axis((0, n), name="k2")
    S32 = te.compute((m,), lambda i: te.sum(A[i, k2].astype("int32"), axis=k2), name="S32")
    s = te.create_schedule([S4.op, S32.op])
    f = polytile.build(s, [A, S4, S32])
    a = rand4((m, n), seed=11)
    s4, s32 = poison((m,)), np.zeros(m, np.int32)
    f(pack_int4(a), s4, s32)
    check4(s4, wrap4(a.sum(1)))
    np.testing.assert_array_equal(s32, a.sum(1))


def test_int4_zero_rank():
    A = te.placeholder((), name="A", dtype="int4")
    B = te.compute((), lambda: A[()] * te.const(3, "int4"), name="B")
    s = te.create_schedule(B.op)
    b = np.array(0xF0, np.uint8)
    polytile.build(s, [A, B])(pack_int4(np.array(-3)), b)
    assert int(b) == 0xF0 | int(wrap4(-9)) & 15


def test_int4_symbolic_leading_extent():
    m = te.var("m")
    A = te.placeholder((m, 5), name="A", dtype="int4")
    B = te.compute((m, 5), lambda i, j: A[i, j] - te.const(2, "int4"), name="B")
    s = te.create_schedule(B.op)
    f = polytile.build(s, [A, B])
    for rows in (1, 6):
        a = rand4((rows, 5), seed=rows)
        b = poison((rows, 5))
        f(pack_int4(a), b)
        check4(b, wrap4(a - 2))


def test_int4_symbolic_last_extent_is_refused():
    n = te.var("n")
    A = te.placeholder((n,), name="A", dtype="int4")
    B = te.compute((n,), lambda i: A[i] + te.const(1, "int4"), name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(LoweringError, match=r"int4: int4 tensor 'A' has the symbolic last "
                       r"extent n; a constant last extent"):
        polytile.build(s, [A, B])


def test_int4_arguments_are_checked():
    s, args = _mul_scale(3, 5, _plain)
    f = polytile.build(s, args)
    a, w = pack_int4(rand4((3, 5))), pack_int4(rand4((3, 5), "uint4"), "uint4")
    b, c = poison((3, 5)), np.zeros((3, 5), np.float32)
    with pytest.raises(TypeError, match=r"argument 'A' has dtype int8; the packed form of a "
                       r"int4 tensor: a uint8 array.*\n.*pack_int4\(A, 'int4'\)"):
        f(rand4((3, 5)).astype(np.int8), w, b, c)
    with pytest.raises(ValueError, match=r"argument 'A' has shape \(3, 5\); expected shape "
                       r"\(3, 3\) \(the packed form of a int4 tensor"):
        f(np.zeros((3, 5), np.uint8), w, b, c)
    f(a, w, b, c)


def test_int4_operand_of_an_extern_is_refused():
    from polytile import tir
    A = te.placeholder((6,), name="A", dtype="int4")
    X = te.extern((6,), [A], lambda ins, outs: tir.call_extern(
        "int32", "f", ins[0].access_ptr("r"), outs[0].access_ptr("w")), name="X",
        dtype="int8")
    s = te.create_schedule(X.op)
    with pytest.raises(LoweringError, match=r"int4: .*'A'.*int4 tensors read and written "
                       "element by element"):
        polytile.build(s, [A, X])


# ------------------------------------------------------------------ CUDA
def _gpu(m, n, shared=False):
    """The same computation bound to threads: neighbouring elements of a row (one byte)
    are stored by neighbouring threads."""
    A = te.placeholder((m, n), name="A", dtype="int4")
    W = te.placeholder((m, n), name="W", dtype="uint4")
    B = te.compute((m, n), lambda i, j: A[i, j] * W[i, j].astype("int4"), name="B")
    C = te.compute((m, n), lambda i, j: B[i, j].astype("float32") * 0.5
                   - W[i, j].astype("int32").astype("float32"), name="C")
    s = te.create_schedule([B.op, C.op])
    for T in (B, C):
        s[T].bind(T.op.axis[0], te.thread_axis("blockIdx.x"))
        s[T].bind(T.op.axis[1], te.thread_axis("threadIdx.x"))
    return s, [A, W, B, C]


@pytest.mark.parametrize("m,n", [(3, 9), (2, 16)])
def test_int4_cuda(cuda_build, m, n):
    s, args = _gpu(m, n)
    f = cuda_build(s, args)
    a, w = rand4((m, n), seed=m), rand4((m, n), "uint4", seed=n)
    dev = [polytile.nd.array(x, device="cuda") for x in
           (pack_int4(a), pack_int4(w, "uint4"), poison((m, n)),
            np.full((m, n), np.nan, np.float32))]
    f(*dev)
    want = wrap4(a * wrap4(w))
    check4(dev[2].numpy(), want)
    np.testing.assert_array_equal(dev[3].numpy(), want * 0.5 - w)


def test_int4_cuda_source_compiles_with_nvcc():
    s, args = _gpu(3, 9)
    func = polytile.lower(s, args, target="cuda", stop_after=None)
    from polytile.targets.c_printer import print_c_module
    from polytile.targets.cuda.dialect import CUDADialect

    code = print_c_module(func, CUDADialect()).source
    assert "atomicAnd" in code and "atomicOr" in code
    compile_with_nvcc(code)


@pytest.mark.parametrize("vectorized", [False, True])
def test_int4_cuda_shared_cache_read(cuda_build, vectorized):
    # an int4 row staged in shared memory (padded to whole 32-bit words for the atomic
    # stores), neighbouring nibbles written by neighbouring threads; a vectorized fetch
    # runs its lanes one by one
    m, n = 4, 37
    A = te.placeholder((m, n), name="A", dtype="int4")
    B = te.compute((m, n), lambda i, j: A[i, j] + A[i, (j + 1) % n], name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    jo, ji = s[B].split(B.op.axis[1], 10 if vectorized else 8)
    s[B].bind(ji, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], B.op.axis[0])
    if vectorized:
        o, v = s[AS].split(s[AS].op.axis[1], 4)
        s[AS].bind(o, te.thread_axis("threadIdx.x"))
        s[AS].vectorize(v)
    else:
        o, i = s[AS].split(s[AS].op.axis[1], 8)
        s[AS].bind(i, te.thread_axis("threadIdx.x"))
    f = cuda_build(s, [A, B])
    a = rand4((m, n), seed=9)
    da = polytile.nd.array(pack_int4(a), device="cuda")
    db = polytile.nd.array(poison((m, n)), device="cuda")
    f(da, db)
    check4(db.numpy(), wrap4(a + np.roll(a, -1, axis=1)))
    src = polytile.lower(s, [A, B], target="cuda", stop_after=None)
    assert "uint8[1, 20], scope='shared'" in str(src)   # 19 bytes, padded to 20


def test_nd_arrays_of_int4_are_packed():
    v = rand4((3, 5), seed=2)
    a = polytile.nd.array(v, dtype="int4")
    assert a.dtype == np.uint8 and a.shape == (3, 3)
    np.testing.assert_array_equal(unpack_int4(a.numpy(), 5), v)
    e = polytile.nd.empty((3, 5), "uint4")
    assert e.dtype == np.uint8 and e.shape == (3, 3)


def test_int4_parallel_rows_store_without_atomics():
    # each parallel iteration stores rows of its own (rows start on whole bytes)
    s, args = _mul_scale(3, 9, _parallel_outer)
    ll = polytile.build(s, args).get_source("ll")
    # the parallel loop's chunk counter is an i64 atomic add; the stores' would be on bytes
    stores = [x for x in ll.splitlines() if "atomicrmw" in x and ", i64 " not in x]
    assert "atomicrmw add" in ll and not stores, stores


def test_int4_reference_interpreter():
    # the readable loop nest (int4 unpacked) and the final one (packed bytes, atomic
    # stores) both run on the interpreter, on the packed arrays
    from polytile.schedule import interpreter
    m, n = 4, 7
    for sched in (_plain, _parallel_inner, _at_consumer, _unrolled_odd_split):
        s, args = _mul_scale(m, n, sched)
        a, w = rand4((m, n), seed=1), rand4((m, n), "uint4", seed=2)
        want = wrap4(a * wrap4(w))
        for stop in ("allocation", None):
            func = polytile.lower(s, args, stop_after=stop)
            b, c = poison((m, n)), np.full((m, n), np.nan, np.float32)
            interpreter.run(func, pack_int4(a), pack_int4(w, "uint4"), b, c)
            check4(b, want)
            np.testing.assert_array_equal(c, want * 0.5 - w)


def _cross_thread_sum(m, n):
    """TVM's cross-thread reduction of the rows of an int4 ``A[m, n]`` (32 threads a
    row)."""
    A = te.placeholder((m, n), name="A", dtype="int4")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=32)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    return s, [A, B]


def test_int4_cuda_cross_thread_reduction(cuda_build):
    # TVM's cross-thread reduction on int4: the partials (int4, shared) and the result
    # are stored nibble by nibble; the sum wraps at 4 bits
    m, n = 3, 40
    f = cuda_build(*_cross_thread_sum(m, n))
    a = rand4((m, n), seed=13)
    da = polytile.nd.array(pack_int4(a), device="cuda")
    db = polytile.nd.array(poison((m,)), device="cuda")
    f(da, db)
    check4(db.numpy(), wrap4(a.sum(1)))


def test_int4_nibble_stores_are_seen_by_nvcc_as_writes_of_their_array():
    # The nibble store's word pointer was rebuilt from an integer; nvcc then took the
    # atomics for writes to unknown memory, read the __restrict__ output through the
    # non-coherent cache and hoisted the read out of the loop: the cross-thread sum above
    # was wrong on the H200 while right in the emulation. Derived from the array
    # pointer, the atomics are typed (global, shared) and every later read of the
    # output is a coherent load.
    ptx = nvcc_text(polytile.build(*_cross_thread_sum(3, 40), target="cuda").get_source(),
                    "ptx")
    if ptx is None:
        pytest.skip("nvcc not found")
    assert "atom.global.and.b32" in ptx and "atom.shared.and.b32" in ptx
    assert ptx.count("ld.global.nc") == 2   # A's two k_outer reads; B is read coherently
    assert ptx.count("ld.global.u8") >= 32   # B's nibble, re-read at each k_inner_v


def test_int4_quantized_matmul_tiled():
    # the common use: int4 weights and activations, int32 products and sums; tiled,
    # vectorized and parallel; plus an int4 max reduction (identity -8)
    M, N, K = 33, 29, 67
    A = te.placeholder((M, K), name="A", dtype="int4")
    B = te.placeholder((N, K), name="B", dtype="int4")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") * B[j, k].astype(
        "int32"), axis=k), name="C")
    k2 = te.reduce_axis((0, K), name="k2")
    D = te.compute((M,), lambda i: te.max(A[i, k2], axis=k2), name="D")
    s = te.create_schedule([C.op, D.op])
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    f = polytile.build(s, [A, B, C, D])
    a, b = rand4((M, K), seed=31), rand4((N, K), seed=32)
    c, d = np.full((M, N), -1, np.int32), poison((M,))
    f(pack_int4(a), pack_int4(b), c, d)
    np.testing.assert_array_equal(c, a @ b.T)
    check4(d, a.max(1))


@pytest.mark.parametrize("n", [8, 9])
def test_int4_row_loops_store_whole_bytes(n):
    # a loop over a row stores two elements per byte, whole (no read-modify-write): an
    # odd last element alone; tiles of an even width too
    s, args = _mul_scale(3, n, _plain)
    text = str(polytile.lower(s, args, stop_after=None))
    assert "for j.pair in range(0, 4)" in text
    A, W, B, C = args
    s2 = te.create_schedule(C.op)
    jo, ji = s2[B].split(B.op.axis[1], 4)
    s2[B].parallel(jo)
    f = polytile.build(s2, args)
    assert "j.inner.pair" in str(polytile.lower(s2, args, stop_after=None))
    a, w = rand4((3, n), seed=n), rand4((3, n), "uint4", seed=n + 1)
    b, c = poison((3, n)), np.full((3, n), np.nan, np.float32)
    f(pack_int4(a), pack_int4(w, "uint4"), b, c)
    check4(b, wrap4(a * wrap4(w)))


def test_int4_cuda_thread_loops_store_whole_bytes(cuda_build):
    # each thread runs a serial loop over a segment of its row: pairs stored whole (a
    # segment cut by the end of the row would be guarded per element, and stored nibble
    # by nibble)
    m, n = 3, 24
    A = te.placeholder((m, n), name="A", dtype="int4")
    B = te.compute((m, n), lambda i, j: A[i, j] * te.const(3, "int4"), name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    jo, ji = s[B].split(B.op.axis[1], 6)
    s[B].bind(jo, te.thread_axis("threadIdx.x"))
    text = str(polytile.lower(s, [A, B], target="cuda", stop_after=None))
    assert "j.inner.pair" in text and "nibble_store" not in text
    from polytile.targets.c_printer import print_c_module
    from polytile.targets.cuda.dialect import CUDADialect

    compile_with_nvcc(print_c_module(polytile.lower(s, [A, B], target="cuda",
                                                    stop_after=None), CUDADialect()).source)
    f = cuda_build(s, [A, B])
    a = rand4((m, n), seed=17)
    da = polytile.nd.array(pack_int4(a), device="cuda")
    db = polytile.nd.array(poison((m, n)), device="cuda")
    f(da, db)
    check4(db.numpy(), wrap4(a * 3))


# ------------------------------------------------- guarded and odd-offset row segments
@pytest.mark.parametrize("factor,vec", [(3, False), (5, True), (4, False)])
@pytest.mark.parametrize("m,n", [(3, 13), (2, 1), (1, 14)])
def test_int4_odd_offset_segments_store_pairs_whole(factor, vec, m, n):
    # a split by an odd factor: a segment may start on a high nibble, stored alone,
    # then pairs whole; a ragged last segment and an odd row end alone too (the unused
    # high nibble of an odd row keeps its poison)
    s, args = _mul_scale(m, n, _plain)
    A, W, B, C = args
    jo, ji = s[B].split(B.op.axis[1], factor)
    if vec:
        s[B].vectorize(ji)
    if n > 1:
        assert "j.inner.pair" in str(polytile.lower(s, args, stop_after=None))
    f = polytile.build(s, args)
    a, w = rand4((m, n), seed=factor + n), rand4((m, n), "uint4", seed=m)
    b, c = poison((m, n)), np.full((m, n), np.nan, np.float32)
    f(pack_int4(a), pack_int4(w, "uint4"), b, c)
    check4(b, wrap4(a * wrap4(w)))


def _gpu_segments(m, n, factor, dtype="int4"):
    A = te.placeholder((m, n), name="A", dtype=dtype)
    B = te.compute((m, n), lambda i, j: A[i, j] * te.const(3, dtype), name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    jo, ji = s[B].split(B.op.axis[1], factor)
    s[B].bind(jo, te.thread_axis("threadIdx.x"))
    return s, [A, B]


@pytest.mark.parametrize("n,factor", [(23, 5), pytest.param(26, 6, marks=pytest.mark.slow),
                                      pytest.param(9, 4, marks=pytest.mark.slow)])
def test_int4_cuda_guarded_segments_store_pairs_whole(cuda_build, n, factor):
    # a thread's segment cut by the end of the row is guarded (if 6 * tx + j < 26): it
    # runs over min(6, 26 - 6 * tx) elements, pairs whole; a segment starting on a high
    # nibble (odd factor) or ending on a low one stores that element alone, atomically
    # (the other nibble is another thread's)
    m = 3
    s, args = _gpu_segments(m, n, factor)
    text = str(polytile.lower(s, args, target="cuda", stop_after=None))
    assert "j.inner.pair" in text
    f = cuda_build(s, args)
    a = rand4((m, n), seed=n)
    da = polytile.nd.array(pack_int4(a), device="cuda")
    db = polytile.nd.array(poison((m, n)), device="cuda")
    f(da, db)
    check4(db.numpy(), wrap4(a * 3))


def test_int4_cuda_guarded_segments_compile_with_nvcc():
    from polytile.targets.c_printer import print_c_module
    from polytile.targets.cuda.dialect import CUDADialect

    s, args = _gpu_segments(3, 23, 5, "uint4")
    compile_with_nvcc(print_c_module(polytile.lower(s, args, target="cuda",
                                                    stop_after=None), CUDADialect()).source)
