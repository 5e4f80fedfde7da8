"""Attached stages, empty reductions and virtual threads built for CUDA and run: on the
host through the emulated driver (``cuda_emulator``: the generated CUDA C compiled by g++,
each block's threads as OS threads), and on a GPU where there is one (``gpu`` marker).
The schedules are those of ``tests/attach_cases.py`` (F6, F2, TVM's vthread matmul);
outputs are poisoned before each run.
"""

from __future__ import annotations

import numpy as np
from attach_cases import f2_program, f6_program, vthread_gemm
from helpers import check, poison

import polytile


def _call(f, args, inputs):
    dev = [polytile.nd.array(x, device="cuda") for x in inputs]
    out = polytile.nd.array(poison(args[-1].shape, args[-1].dtype), device="cuda")
    f(*dev, out)
    return out.numpy()


def test_f6_attach_in_a_padded_thread_box(cuda_build):
    s, args = f6_program()
    a = np.random.default_rng(0).uniform(-1, 1, 31).astype("float32")
    check(_call(cuda_build(s, args), args, [a]), a[::-1] * 2.0 + a * 2.0)


def test_f2_kernel_stores_the_identity(cuda_build):
    s, args = f2_program()
    a = np.arange(1, 5, dtype="int16").reshape(2, 2)
    np.testing.assert_array_equal(_call(cuda_build(s, args), args, [a]), [32767])


def test_vthread_matmul(cuda_build):
    s, args = vthread_gemm(37, 29, 23)
    g = np.random.default_rng(1)
    a = g.uniform(-1, 1, (37, 23)).astype("float32")
    b = g.uniform(-1, 1, (23, 29)).astype("float32")
    check(_call(cuda_build(s, args), args, [a, b]), a.astype("float64") @ b, k=23)
