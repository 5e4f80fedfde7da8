"""Tensorize on the CPU: a gemv micro-kernel in C called from a scheduled matmul.

This is TVM's "Use Tensorize to Leverage Hardware Intrinsics" tutorial, ported by changing
only the imports (``import polytile as tvm``; TVM's ``te``, ``tir``, ``contrib`` and
``testing`` names exist under polytile). A tensor intrinsic pairs *what* a micro-kernel
computes (a ``te.compute``) with *how* to call it (``fcompute``, here an extern C
function); ``s[C].tensorize(axis, intrin)`` replaces the loops under ``axis`` by calls,
after polytile has checked with isl that those loops compute exactly the intrinsic.

Without clang, ``clang.create_llvm`` compiles the C with the system compiler into a shared
library that the ``import_llvm`` pragma loads (see ``polytile.contrib.clang``).
Run: ``python tutorials/06_tensorize.py [--n 1024 --m 512 --l 64]``.
"""

from __future__ import annotations

import argparse

import numpy as np

import polytile as tvm
from polytile import te

get_const_tuple = tuple     # TVM: from tvm.topi.utils import get_const_tuple

parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int, default=1024)
parser.add_argument("--m", type=int, default=512)
parser.add_argument("--l", type=int, default=64)
args = parser.parse_args()

# ---------------------------------------------------------------------------- the matmul
N, M, L = args.n, args.m, args.l
A = te.placeholder((N, L), name="A")
B = te.placeholder((M, L), name="B")
k = te.reduce_axis((0, L), name="k")
C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
s = te.create_schedule(C.op)
print(tvm.lower(s, [A, B, C], simple_mode=True))

# split the columns by the micro-kernel's size: j.inner and k are one gemv
factor = 16
x, y = C.op.axis
(z,) = C.op.reduce_axis
yo, yi = s[C].split(y, factor=factor)
s[C].reorder(x, yo, yi, z)
print(tvm.lower(s, [A, B, C], simple_mode=True))


# ------------------------------------------------------------------- the tensor intrinsic
def intrin_gemv(m, l):
    """c[i] = sum_k a[k] * b[i, k] for a (l,), b (m, l) with any row stride."""
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    Ab = tvm.tir.decl_buffer(a.shape, a.dtype, name="A", offset_factor=1, strides=[1])
    Bb = tvm.tir.decl_buffer(b.shape, b.dtype, name="B", offset_factor=1,
                             strides=[te.var("s1"), 1])
    Cb = tvm.tir.decl_buffer(c.shape, c.dtype, name="C", offset_factor=1, strides=[1])

    def intrin_func(ins, outs):
        ib = tvm.tir.ir_builder.create()
        aa, bb = ins
        cc = outs[0]
        ib.emit(tvm.tir.call_extern("int32", "gemv_update", cc.access_ptr("w"),
                                    aa.access_ptr("r"), bb.access_ptr("r"), m, l,
                                    bb.strides[0]))
        return ib.get()

    return te.decl_tensor_intrin(c.op, intrin_func, binds={a: Ab, b: Bb, c: Cb})


def gemv_impl():
    cc_code = """
      extern "C" int gemv_update(float *cc, float *aa, float *bb, int m, int l, int stride) {
        for (int i = 0; i < m; ++i) {
            for (int j = 0; j < l; ++j) {
                cc[i] += aa[j] * bb[i * stride + j];
            }
        }
        return 0;
      }
      extern "C" int gemv_reset(float *cc, int m) {
        for (int i = 0; i < m; ++i) {
            cc[i] = 0.0;
        }
        return 0;
      }
    """
    from polytile.contrib import clang, utils

    temp = utils.tempdir()
    ll_path = temp.relpath("temp.ll")
    return clang.create_llvm(cc_code, output=ll_path)


gemv = intrin_gemv(factor, L)
s[C].tensorize(yi, gemv)
s[C].pragma(x, "import_llvm", gemv_impl())
print(tvm.lower(s, [A, B, C], simple_mode=True))

func = tvm.build(s, [A, B, C], target="llvm", name="gemv")
dtype = A.dtype
dev = tvm.device("cpu", 0)
rng = np.random.default_rng(0)
a = rng.uniform(size=get_const_tuple(A.shape)).astype(dtype)
b = rng.uniform(size=get_const_tuple(B.shape)).astype(dtype)
c = tvm.nd.array(np.zeros(get_const_tuple(C.shape), dtype=dtype), dev)
func(tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
tvm.testing.assert_allclose(c.numpy(), np.dot(a, b.T), rtol=1e-3)
print("gemv_update: result matches numpy")


# ----------------------------------------------------------- reduce-update: k split too
def intrin_gemv_reset_update(m, l):
    """The same kernel over a slice of k: reset zeroes the output, update accumulates."""
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    Ab = tvm.tir.decl_buffer(a.shape, a.dtype, name="A", offset_factor=1, strides=[1])
    Bb = tvm.tir.decl_buffer(b.shape, b.dtype, name="B", offset_factor=1,
                             strides=[te.var("s1"), 1])
    Cb = tvm.tir.decl_buffer(c.shape, c.dtype, name="C", offset_factor=1, strides=[1])

    def intrin_func(ins, outs):
        aa, bb = ins
        cc = outs[0]

        def _body():
            ib = tvm.tir.ir_builder.create()
            ib.emit(tvm.tir.call_extern("int32", "gemv_update", cc.access_ptr("w"),
                                        aa.access_ptr("r"), bb.access_ptr("r"), m, l,
                                        bb.strides[0]))
            return ib.get()

        def _reduce_reset():
            ib = tvm.tir.ir_builder.create()
            ib.emit(tvm.tir.call_extern("int32", "gemv_reset", cc.access_ptr("w"), m))
            return ib.get()

        def _reduce_update():
            return _body()

        return _body(), _reduce_reset(), _reduce_update()

    return te.decl_tensor_intrin(c.op, intrin_func, binds={a: Ab, b: Bb, c: Cb})


s = te.create_schedule(C.op)
x, y = C.op.axis
(z,) = C.op.reduce_axis
yo, yi = s[C].split(y, factor=factor)
zo, zi = s[C].split(z, factor=factor)
s[C].reorder(x, yo, zo, yi, zi)
gemv = intrin_gemv_reset_update(factor, factor)
s[C].tensorize(yi, gemv)
s[C].pragma(yo, "import_llvm", gemv_impl())
print(tvm.lower(s, [A, B, C], simple_mode=True))
func = tvm.build(s, [A, B, C], target="llvm", name="gemv")
c = tvm.nd.array(np.full(get_const_tuple(C.shape), np.nan, dtype=dtype), dev)  # poisoned
func(tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
tvm.testing.assert_allclose(c.numpy(), np.dot(a, b.T), rtol=1e-3)
print("gemv_reset + gemv_update: result matches numpy")
