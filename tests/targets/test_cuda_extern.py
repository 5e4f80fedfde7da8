"""``te.extern`` on CUDA: the stage calls a user ``__device__`` function (source given with
``pragma(axis, "import_c", source)``) over whole buffers, in a kernel of one thread; other
stages around it keep their own kernels. Numbers on the GPU (marked ``gpu``) and on the
host emulation of the CUDA driver; the source is compiled with nvcc when installed."""

from __future__ import annotations


import numpy as np
import pytest
from helpers import check, compile_with_nvcc

import polytile
from polytile import BuildError, te, tir


SOURCE = r"""
__device__ int scaled_copy(const float* a, float* c, int n, float k) {
  for (int i = 0; i < n; ++i) c[i] = k * a[i];
  return 0;
}
"""


def _extern(n):
    A = te.placeholder((n,), name="A")
    C = te.extern((n,), [A], lambda ins, outs: tir.call_extern(
        "int32", "scaled_copy", ins[0].access_ptr("r"), outs[0].access_ptr("w"), n, 2.5),
        name="C")
    return A, C


@pytest.mark.parametrize("n", [1, 37])
def test_cuda_extern_alone(cuda_build, n):
    A, C = _extern(n)
    s = te.create_schedule(C.op)
    s[C].pragma(C.op.axis[0], "import_c", SOURCE)
    f = cuda_build(s, [A, C])
    a = np.random.default_rng(n).uniform(-1, 1, n).astype("float32")
    c = polytile.nd.array(np.full(n, np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), c)
    check(c.numpy(), a.astype("float64") * 2.5)


def test_cuda_extern_between_kernels(cuda_build):
    n = 67
    A, C = _extern(n)
    D = te.compute((n,), lambda i: C[i] + 1.0, name="D")
    s = te.create_schedule(D.op)
    s[C].pragma(C.op.axis[0], "import_c", SOURCE)
    xo, xi = s[D].split(D.op.axis[0], factor=32)
    s[D].bind(xo, te.thread_axis("blockIdx.x"))
    s[D].bind(xi, te.thread_axis("threadIdx.x"))
    f = cuda_build(s, [A, D])
    a = np.random.default_rng(3).uniform(-1, 1, n).astype("float32")
    d = polytile.nd.array(np.full(n, np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), d)
    check(d.numpy(), a.astype("float64") * 2.5 + 1)


def test_cuda_extern_source_compiles_with_nvcc():
    A, C = _extern(37)
    s = te.create_schedule(C.op)
    s[C].pragma(C.op.axis[0], "import_c", SOURCE)
    src = polytile.lower(s, [A, C], target="cuda", stop_after=None)
    from polytile.targets.c_printer import print_c_module
    from polytile.targets.cuda.dialect import CUDADialect

    code = print_c_module(src, CUDADialect()).source
    assert "__device__ int scaled_copy" in code and "scaled_copy(&A[0" in code
    assert "__launch_bounds__(1)" in code
    compile_with_nvcc(code)


def test_cuda_extern_with_llvm_ir_is_refused():
    A, C = _extern(5)
    s = te.create_schedule(C.op)
    s[C].pragma(C.op.axis[0], "import_llvm", "define i32 @scaled_copy() { ret i32 0 }")
    from polytile.targets.c_printer import print_c_module
    from polytile.targets.cuda.dialect import CUDADialect

    func = polytile.lower(s, [A, C], target="cuda", stop_after=None)
    with pytest.raises(BuildError, match=r"pragma 'import_llvm' gives LLVM IR to a cuda "
                       r"module; 'import_c' with device source"):
        print_c_module(func, CUDADialect())


MIXED = r"""
__device__ int split_parts(const float* a, float* frac, int* whole, int n) {
  for (int i = 0; i < n; ++i) { whole[i] = (int)floorf(a[i]); frac[i] = a[i] - whole[i]; }
  return 0;
}
"""


def test_cuda_extern_outputs_of_two_dtypes(cuda_build):
    # a float32 and an int32 output of one device function; the int one feeds a kernel
    n = 41
    A = te.placeholder((n,), name="A")
    F, W = te.extern([(n,), (n,)], [A], lambda ins, outs: tir.call_extern(
        "int32", "split_parts", ins[0].access_ptr("r"), outs[0].access_ptr("w"),
        outs[1].access_ptr("w"), n), dtype=["float32", "int32"], name="P")
    D = te.compute((n,), lambda i: W[i] * 3, name="D")
    s = te.create_schedule([F.op, D.op])
    packed = s[F].op.input_tensors[0]
    s[packed].pragma(packed.op.axis[0], "import_c", MIXED)
    for T in (F, D):   # (F, the float part, a copy out of the packed stage: its own kernel)
        xo, xi = s[T].split(T.op.axis[0], factor=32)
        s[T].bind(xo, te.thread_axis("blockIdx.x"))
        s[T].bind(xi, te.thread_axis("threadIdx.x"))
    s[W].compute_inline()
    f = cuda_build(s, [A, F, D])
    a = np.random.default_rng(4).uniform(-9, 9, n).astype("float32")
    fr = polytile.nd.array(np.full(n, np.nan, "float32"), device="cuda")
    d = polytile.nd.array(np.full(n, -5, "int32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), fr, d)
    w = np.floor(a).astype("int32")
    np.testing.assert_array_equal(d.numpy(), w * 3)
    check(fr.numpy(), a.astype("float64") - w)
