"""The ``nontemporal`` pragma on CUDA: global vector stores inside the loop become
streaming stores (PTX ``st.global.cs``, a helper per vector type), the values unchanged
(emulated driver and GPU, odd sizes with a guarded tail); scalar stores, stores to shared
or local memory and loops without the pragma keep ordinary stores."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compile_with_nvcc, nvcc_text, poison

import polytile
from polytile import te


def _scaled(m: int, n: int, dtype: str, lanes: int, stream: bool = True):
    A = te.placeholder((m, n), name="A", dtype=dtype)
    B = te.compute((m, n), lambda i, j: A[i, j] * te.const(3.0, dtype), name="B")
    s = te.create_schedule(B.op)
    BL = s.cache_write(B, "local")   # the row kernels' form: a vector copy from registers
    i, j = B.op.axis
    jo, ji = s[B].split(j, factor=lanes)
    jb, jt = s[B].split(jo, factor=32)
    s[B].bind(i, te.thread_axis("blockIdx.x"))
    s[B].bind(jt, te.thread_axis("threadIdx.x"))
    s[BL].compute_at(s[B], jt)
    s[B].vectorize(ji)
    if stream:
        s[B].pragma(ji, "nontemporal")
    return s, [A, B]


@pytest.mark.parametrize("dtype,lanes,vt,ptx", [
    pytest.param("float32", 4, "float4", "v4.f32", marks=pytest.mark.slow),
    ("float16", 8, "uint4", "v4.u32"), ("float32", 2, "float2", "v2.f32")])
def test_streamed_vector_stores_in_the_source(dtype, lanes, vt, ptx):
    s, args = _scaled(4, 256, dtype, lanes)
    src = polytile.build(s, args, target="cuda").get_source()
    assert f"pt_st_cs_{vt}(&B[" in src and "*(" + vt + "*)(&B[" not in src, src
    plain = polytile.build(*_scaled(4, 256, dtype, lanes, stream=False),
                           target="cuda").get_source()
    assert "pt_st_cs" not in plain and f"*({vt}*)(&B[" in plain
    if lanes == 2:
        return   # CI time: nvcc checks the 16-byte helpers (float lanes with -m slow)
    text = nvcc_text(src, "ptx")
    if text is None:
        pytest.skip("nvcc not found")
    assert f"st.global.cs.{ptx}" in text
    compile_with_nvcc(src)


def test_scalar_stores_stay_ordinary():
    s, args = _scaled(3, 67, "float32", 1)   # one lane: no vector copy
    src = polytile.build(s, args, target="cuda").get_source()
    assert "pt_st_cs" not in src


@pytest.mark.parametrize("m,n,dtype,lanes", [
    pytest.param(3, 68, "float32", 4, marks=pytest.mark.slow), (2, 136, "float16", 8)])
def test_streamed_stores_compute_the_definition(cuda_build, m, n, dtype, lanes):
    """Rows the blocks' threads do not divide (68 = 32 x 2 + 4 lanes): guarded vectors."""
    s, args = _scaled(m, n, dtype, lanes)
    f = cuda_build(s, args)
    assert "pt_st_cs" in f.get_source()
    a = np.random.default_rng(n).uniform(-2, 2, (m, n)).astype(dtype)
    b = poison((m, n), dtype)
    dev = [polytile.nd.array(x, device="cuda") for x in (a, b)]
    f(*dev)
    np.testing.assert_array_equal(dev[1].numpy(), a * np.asarray(3, dtype))
