"""int4/uint4 on the ``hip`` target: the HIP lowering of the CUDA int4 kernels
(``test_int4.py``) run on the reference interpreter on packed arrays (elements of one
byte stored by neighbouring threads: the atomic nibble store; segments of a row per
thread: two nibbles stored whole, a guarded or odd-offset segment's lone element
atomically; an int4 row staged in LDS; a cross-thread int4 sum), and the HIP source
compiled with hipcc for gfx90a and gfx942 where hipcc exists. Outputs start as poison
bytes; the unused high nibble of an odd row must keep its poison."""

from __future__ import annotations

import numpy as np
import pytest
from test_int4 import _gpu, _gpu_segments, check4, poison, rand4, wrap4

import polytile
from polytile import te
from polytile.nd import pack_int4
from polytile.schedule.interpreter import run
from polytile.targets.hip import compile as hc

needs_hipcc = pytest.mark.skipif(hc.hipcc_path() is None,
                                 reason="needs hipcc (apt-get install hipcc libamdhip64-dev "
                                        "rocm-device-libs)")
HIP = "hip -mcpu=gfx942"


def _lower(s, args):
    return polytile.lower(s, args, target=HIP, stop_after=None)


def test_hip_int4_neighbouring_threads_store_nibbles_atomically():
    m, n = 3, 9
    s, args = _gpu(m, n)
    from polytile.targets.c_printer import print_c_module
    from polytile.targets.hip.dialect import HIPDialect

    src = print_c_module(_lower(s, args), HIPDialect()).source
    assert "atomicAnd" in src and "atomicOr" in src and "pt_nibble_store" in src
    a, w = rand4((m, n), seed=m), rand4((m, n), "uint4", seed=n)
    b, c = poison((m, n)), np.full((m, n), np.nan, np.float32)
    run(_lower(s, args), pack_int4(a), pack_int4(w, "uint4"), b, c)
    want = wrap4(a * wrap4(w))
    check4(b, want)
    np.testing.assert_array_equal(c, want * 0.5 - w)


@pytest.mark.parametrize("n,factor,dtype", [(23, 5, "int4"), (26, 6, "uint4")])
def test_hip_int4_guarded_segments_store_pairs_whole(n, factor, dtype):
    m = 3
    s, args = _gpu_segments(m, n, factor, dtype)
    func = _lower(s, args)
    assert "j.inner.pair" in str(func)
    a = rand4((m, n), dtype, seed=n)
    b = poison((m, n))
    run(func, pack_int4(a, dtype), b)
    check4(b, wrap4(a * 3, dtype), dtype)


def _lds_row(m, n):
    A = te.placeholder((m, n), name="A", dtype="int4")
    B = te.compute((m, n), lambda i, j: A[i, j] + A[i, (j + 1) % n], name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    jo, ji = s[B].split(B.op.axis[1], 8)
    s[B].bind(ji, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], B.op.axis[0])
    o, i = s[AS].split(s[AS].op.axis[1], 8)
    s[AS].bind(i, te.thread_axis("threadIdx.x"))
    return s, [A, B]


def test_hip_int4_row_staged_in_lds():
    m, n = 4, 37
    s, args = _lds_row(m, n)
    func = _lower(s, args)
    assert "uint8[1, 20], scope='shared'" in str(func)   # 19 bytes, padded to a word
    a = rand4((m, n), seed=9)
    b = poison((m, n))
    run(func, pack_int4(a), b)
    check4(b, wrap4(a + np.roll(a, -1, axis=1)))


def _row_sum(m, n):
    A = te.placeholder((m, n), name="A", dtype="int4")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=64)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    return s, [A, B]


def test_hip_int4_cross_thread_sum():
    m, n = 3, 70
    s, args = _row_sum(m, n)
    a = rand4((m, n), seed=13)
    b = poison((m,))
    run(_lower(s, args), pack_int4(a), b)
    check4(b, wrap4(a.sum(1)))


def _compile(s, args, mcpu):
    mod = polytile.build(s, args, target=f"hip -mcpu={mcpu}")
    assert mod.code_object is not None and mod.code_object.mcpu == mcpu
    assert "error" not in mod.code_object.log.lower(), mod.code_object.log
    assert "uninitialized" not in mod.code_object.log, mod.code_object.log


@needs_hipcc
@pytest.mark.hip
def test_hip_int4_segments_compile_with_hipcc():
    # paired whole-byte stores and atomic lone nibbles in one kernel (one hipcc run: the
    # other kernels and gfx90a are in the slow test below)
    _compile(*_gpu_segments(3, 23, 5), "gfx942")


@needs_hipcc
@pytest.mark.hip
@pytest.mark.slow
def test_hip_int4_kernels_compile_for_gfx90a_and_gfx942():
    kernels = [_gpu(3, 9), _gpu_segments(3, 23, 5), _gpu_segments(3, 26, 6, "uint4"),
               _lds_row(4, 37), _row_sum(3, 70)]
    for s, args in kernels:
        for mcpu in ("gfx90a", "gfx942"):
            _compile(s, args, mcpu)


def test_hip_int4_rows_and_segments_both_guarded():
    # rows split by 2 over (blockIdx.x, threadIdx.y) and segments of 5 over threadIdx.x,
    # neither dividing: the row guard stays around the paired segment loop
    m, n = 7, 23
    A = te.placeholder((m, n), name="A", dtype="int4")
    B = te.compute((m, n), lambda i, j: A[i, j] - te.const(5, "int4"), name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], 2)
    s[B].bind(io, te.thread_axis("blockIdx.x"))
    s[B].bind(ii, te.thread_axis("threadIdx.y"))
    jo, ji = s[B].split(B.op.axis[1], 5)
    s[B].bind(jo, te.thread_axis("threadIdx.x"))
    func = _lower(s, [A, B])
    assert "j.inner.pair" in str(func)
    a = rand4((m, n), seed=21)
    b = poison((m, n))
    run(func, pack_int4(a), b)
    check4(b, wrap4(a - 5))
