"""The ``half2`` pragma on CUDA: a float16 loop's ``+``, ``-`` and ``*`` printed two lanes
an instruction (``__hadd2``, ``__hsub2``, ``__hmul2``, ``a * b + c`` as ``__hfma2``), the
values those of the statement in float16 (one rounding fewer where a product and a sum
fuse); a loop of another form is refused when the source is printed, naming the loop and
the pragma (emulated driver and GPU, odd sizes with a guarded tail)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compile_with_nvcc, nvcc_text, poison

import polytile
from polytile import te
from polytile.errors import BuildError, ScheduleError
from polytile.schedule.interpreter import run as interpret

#: float16 unit roundoff (half an ulp at 1)
U16 = 2.0 ** -11


def _affine(m: int, n: int, lanes: int, pragma: bool = True, dtype: str = "float16",
            scale: float = 1.5):
    """``C[i, j] = G[j] * float16(A[i, j] * scale) + B[j] - A[i, j] * B[j]``: a product
    fused with a sum, a conversion of float32 values, a subtraction and a multiplication,
    in a vector loop of ``lanes`` (a ``local`` copy of the output row, as the row
    kernels' output stage) with the ``half2`` pragma."""
    A = te.placeholder((m, n), name="A", dtype=dtype)
    G = te.placeholder((n,), name="G", dtype=dtype)
    B = te.placeholder((n,), name="B", dtype=dtype)
    y = lambda i, j: (A[i, j].astype("float32") * te.const(scale, "float32")).astype(dtype)
    C = te.compute((m, n), lambda i, j: G[j] * y(i, j) + B[j] - A[i, j] * B[j], name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=lanes)
    jb, jt = s[C].split(jo, factor=32)
    s[C].bind(i, te.thread_axis("blockIdx.x"))
    s[C].bind(jt, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], jt)
    s[C].vectorize(ji)
    s[CL].vectorize(CL.op.axis[1])
    if pragma:
        s[CL].pragma(CL.op.axis[1], "half2")
    return s, [A, G, B, C]


def _inputs(m: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-2, 2, (m, n)).astype("float16")
    g = rng.uniform(0.5, 2, n).astype("float16")
    b = rng.uniform(-1, 1, n).astype("float16")
    return a, g, b


def _bound_check(out, a, g, b, scale: float = 1.5):
    """Each lane within the roundings of its float16 operations: the conversion of
    ``A * scale`` (exact in the bound's ``y``), then at most two roundings for
    ``G * y + B`` (one where fused), one for ``A * B``, one for the difference."""
    y = (a.astype("float32") * np.float32(scale)).astype("float16").astype("float64")
    g64, b64, a64 = g.astype("float64"), b.astype("float64"), a.astype("float64")
    gy, ab = g64 * y, a64 * b64
    exact = gy + b64 - ab
    bound = U16 * (2 * np.abs(gy) + 2 * np.abs(gy + b64) + 2 * np.abs(ab) + np.abs(exact))
    err = np.abs(out.astype("float64") - exact)
    assert not np.isnan(out).any()
    assert (err <= bound * (1 + 1e-6)).all(), float((err / np.maximum(bound, 1e-30)).max())


def test_half2_instructions_in_the_source():
    src = polytile.build(*_affine(4, 256, 8), target="cuda").get_source()
    assert src.count("__hfma2(") == 4 and src.count("__hsub2(") == 4, src
    assert src.count("__hmul2(") == 4 and "__floats2half2_rn(" in src
    plain = polytile.build(*_affine(4, 256, 8, pragma=False), target="cuda").get_source()
    assert "__hfma2" not in plain and "const half2" not in plain
    text = nvcc_text(src, "ptx")
    if text is None:
        pytest.skip("nvcc not found")
    assert "fma.rn.f16x2" in text and "cvt.rn.f16x2.f32" in text
    compile_with_nvcc(src)


def test_half2_reference_interpreter_ignores_the_hint():
    m, n = 3, 72
    a, g, b = _inputs(m, n, 2)
    f = polytile.lower(*_affine(m, n, 8), target="cuda")
    out = poison((m, n), "float16")
    interpret(f, a, g, b, out)
    _bound_check(out, a, g, b)


@pytest.mark.parametrize("m,n,lanes", [(2, 136, 8), (5, 38, 2), (1, 4, 4)])
def test_half2_computes_the_definition(cuda_build, m, n, lanes):
    """136 = 17 vectors of 8 over 32 threads (guarded), 38 = 19 pairs, a single vector."""
    f = cuda_build(*_affine(m, n, lanes))
    assert "__hfma2" in f.get_source()
    a, g, b = _inputs(m, n, n)
    dev = [polytile.nd.array(x, device="cuda") for x in (a, g, b, poison((m, n), "float16"))]
    f(*dev)
    _bound_check(dev[3].numpy(), a, g, b)


def test_half2_refuses_a_loop_of_odd_extent():
    s, args = _affine(2, 36, 3)
    with pytest.raises(BuildError) as e:
        polytile.build(s, args, target="cuda")
    msg = str(e.value)
    assert "'half2'" in msg and "'j.c'" in msg and "extent 3" in msg, msg


def test_half2_refuses_a_stage_not_in_float16():
    with pytest.raises(ScheduleError) as e:
        _affine(2, 32, 4, dtype="float32")
    msg = str(e.value)
    assert "'half2'" in msg and "'j.c'" in msg and "'C.local'" in msg and "float32" in msg, msg


def test_half2_with_a_repeated_lane_value(cuda_build):
    """``y * y + B[j]`` with ``y`` used twice: the share pass binds it to a let inside the
    vector loop, which the pair printing inlines (computed at each use)."""
    m, n = 3, 40
    A = te.placeholder((m, n), name="A", dtype="float16")
    B = te.placeholder((n,), name="B", dtype="float16")
    y = lambda i, j: (A[i, j].astype("float32") * te.const(1.5, "float32")).astype("float16")

    def body(i, j):
        v = y(i, j)
        return v * v + B[j]

    C = te.compute((m, n), body, name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=4)
    s[C].bind(i, te.thread_axis("blockIdx.x"))
    s[C].bind(jo, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], jo)
    s[C].vectorize(ji)
    s[CL].vectorize(CL.op.axis[1])
    s[CL].pragma(CL.op.axis[1], "half2")
    f = cuda_build(s, [A, B, C])
    assert "__hfma2(" in f.get_source()
    a, _, b = _inputs(m, n, 7)
    dev = [polytile.nd.array(x, device="cuda") for x in (a, b, poison((m, n), "float16"))]
    f(*dev)
    y64 = (a.astype("float32") * np.float32(1.5)).astype("float16").astype("float64")
    exact = y64 * y64 + b.astype("float64")
    err = np.abs(dev[2].numpy().astype("float64") - exact)
    assert (err <= U16 * (2 * y64 * y64 + 2 * np.abs(exact)) * (1 + 1e-6)).all()
