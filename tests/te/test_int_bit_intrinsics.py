"""``tir.popcount`` / ``tir.clz`` (TVM's integer bit intrinsics) on llvm, on the CUDA
interpreter (emulated or a GPU) and through nvcc, against a Python bit count."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te, tir
from tests.helpers import compile_with_nvcc

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def _bits(a: np.ndarray) -> list:
    w = a.dtype.itemsize * 8
    return [format(int(x) & ((1 << w) - 1), f"0{w}b") for x in a.ravel()]


def _popcount(a):
    return np.array([b.count("1") for b in _bits(a)]).reshape(a.shape)


def _clz(a):
    return np.array([len(b) - len(b.lstrip("0")) for b in _bits(a)]).reshape(a.shape)


def _data(dtype: str, n: int) -> np.ndarray:
    info = np.iinfo(dtype)
    a = np.random.default_rng(n).integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    a[:4] = [0, info.max, info.min, 1]   # clz(0) is the width; all ones; the sign bit alone
    return a


def _program(dtype: str, n, vector: bool):
    A = te.placeholder((n,), dtype=dtype, name="A")
    outs = [te.compute((n,), lambda i: tir.popcount(A[i]), name="P")]
    if dtype[-2:] in ("32", "64"):
        outs.append(te.compute((n,), lambda i: tir.clz(A[i]), name="Z"))
    s = te.create_schedule([o.op for o in outs])
    if vector:
        for o in outs:
            _, xi = s[o].split(o.op.axis[0], factor=8)
            s[o].vectorize(xi)
    return s, [A, *outs]


@pytest.mark.parametrize("vector", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_popcount_clz_llvm(dtype, vector):
    n = 37
    s, args = _program(dtype, n, vector)
    f = polytile.build(s, args, target="llvm")
    a = _data(dtype, n)
    outs = [np.full(n, 99, o.dtype) for o in args[1:]]
    f(a, *outs)
    assert outs[0].dtype == np.dtype(dtype)           # TVM: popcount keeps x's dtype
    np.testing.assert_array_equal(outs[0], _popcount(a))
    if len(outs) > 1:
        assert outs[1].dtype == np.int32                # TVM: clz is int32
        np.testing.assert_array_equal(outs[1], _clz(a))


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "int64", "uint64"])
def test_popcount_clz_cuda(dtype, cuda_build):
    n = 45
    s, args = _program(dtype, n, False)
    for o in args[1:]:
        bx, tx = s[o].split(o.op.axis[0], factor=32)
        s[o].bind(bx, te.thread_axis("blockIdx.x"))
        s[o].bind(tx, te.thread_axis("threadIdx.x"))
    compile_with_nvcc(polytile.build(s, args, target="cuda").get_source())
    f = cuda_build(s, args)
    a = _data(dtype, n)
    dev = [polytile.nd.array(a, device="cuda")] + [
        polytile.nd.array(np.full(n, 99, o.dtype), device="cuda") for o in args[1:]]
    f(*dev)
    np.testing.assert_array_equal(dev[1].numpy(), _popcount(a))
    if len(dev) > 2:
        np.testing.assert_array_equal(dev[2].numpy(), _clz(a))


def test_popcount_in_an_expression_and_in_te():
    # a Hamming distance: te.popcount is tir.popcount (TVM's te re-exports it)
    n, m = 13, 7
    A = te.placeholder((n,), dtype="uint32", name="A")
    B = te.placeholder((m,), dtype="uint32", name="B")
    D = te.compute((n, m), lambda i, j: te.popcount(A[i] ^ B[j]).astype("int32"), name="D")
    s = te.create_schedule(D.op)
    f = polytile.build(s, [A, B, D])
    a, b = _data("uint32", n), _data("uint32", m)
    d = np.full((n, m), -1, "int32")
    f(a, b, d)
    np.testing.assert_array_equal(d, _popcount(a[:, None] ^ b[None, :]))


@pytest.mark.parametrize("fn, dtype, match", [
    (tir.popcount, "float32", "te.popcount: .*float32; expected an integer of 8/16/32/64"),
    (tir.popcount, "bool", "te.popcount: .*bool"),
    (tir.clz, "int8", "te.clz: .*int8; expected an integer of 32/64 bits"),
    (tir.clz, "float64", "te.clz: .*float64"),
])
def test_bit_intrinsics_refuse_other_dtypes(fn, dtype, match):
    A = te.placeholder((3,), dtype=dtype, name="A")
    with pytest.raises(TypeError, match=match):
        fn(A[0])


def test_tir_var_and_constants_take_tvms_argument_order():
    # tir.Var("n", "int32") is TVM's order; it built polytile's IR Var(dtype="n", name=...)
    n = tir.Var("n", "int32")
    assert isinstance(n, tir.Var) and n.dtype == "int32" and n.name == "n"
    m = tir.SizeVar("m", "int64")
    assert isinstance(m, tir.Var) and m.dtype == "int64"
    assert not isinstance(3, tir.Var)
    with pytest.raises(TypeError, match=r"tir.Var: name 3; expected a string first"):
        tir.Var(3, "int32")
    assert tir.IntImm("int8", 5).dtype == "int8" and tir.FloatImm("float16", 0.5).value == 0.5
    with pytest.raises(TypeError, match="tir.IntImm: dtype 'float32'; expected an integer"):
        tir.IntImm("float32", 1)
    # ceildiv and C division, on every sign, built and run against Python
    A = te.placeholder((8,), dtype="int32", name="A")
    B = te.placeholder((8,), dtype="int32", name="B")
    C = te.compute((8,), lambda i: tir.ceildiv(A[i], B[i]), name="C")
    D = te.compute((8,), lambda i: tir.div(A[i], B[i]), name="D")
    f = polytile.build(te.create_schedule([C.op, D.op]), [A, B, C, D])
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1], "int32")
    b = np.array([2, 2, -2, -2, 3, 3, 5, -3], "int32")
    c, d = np.zeros(8, "int32"), np.zeros(8, "int32")
    f(a, b, c, d)
    np.testing.assert_array_equal(c, [-((-x) // y) for x, y in zip(a, b)])
    np.testing.assert_array_equal(d, [int(x / y) for x, y in zip(a, b)])
