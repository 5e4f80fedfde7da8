"""The ``evict_last`` / ``evict_first`` pragmas on CUDA: global vector loads inside the loop
(a vectorized ``cache_read`` to ``local``) become read-only loads with that L1 eviction
priority (PTX ``ld.global.nc.L1::evict_last`` / ``L1::evict_first``, a helper per vector
type), the values unchanged (emulated driver and GPU, odd sizes with a guarded tail);
scalar loads and loops without the pragma keep ordinary loads; layernorm's ``hints`` knob
puts them on gamma and beta, then the rows, its ``stores`` knob streams the output."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, compile_with_nvcc, nvcc_text, poison

import polytile
from polytile import te
from polytile.autotune.template import get_template
from polytile.schedule.interpreter import run as interpret


def _scaled(m: int, n: int, dtype: str, lanes: int, hint: str | None):
    """``C[i, j] = A[i, j] * W[j]``, both inputs read through ``local`` vector copies, the
    copy of ``W`` with pragma ``hint``."""
    A = te.placeholder((m, n), name="A", dtype=dtype)
    W = te.placeholder((n,), name="W", dtype=dtype)
    C = te.compute((m, n), lambda i, j: A[i, j] * W[j], name="C")
    s = te.create_schedule(C.op)
    AL = s.cache_read(A, "local", [C])
    WL = s.cache_read(W, "local", [C])
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=lanes)
    jb, jt = s[C].split(jo, factor=32)
    s[C].bind(i, te.thread_axis("blockIdx.x"))
    s[C].bind(jt, te.thread_axis("threadIdx.x"))
    for c in (AL, WL):
        s[c].compute_at(s[C], jt)
        s[c].vectorize(c.op.axis[-1])
    if hint:
        s[WL].pragma(WL.op.axis[-1], hint)
    return s, [A, W, C]


@pytest.mark.parametrize("hint,dtype,lanes,vt,ptx", [
    ("evict_last", "float16", 8, "uint4", "L1::evict_last.v4.u32"),
    ("evict_first", "float32", 2, "float2", "L1::evict_first.v2.f32")])
def test_hinted_loads_in_the_source(hint, dtype, lanes, vt, ptx):
    src = polytile.build(*_scaled(4, 256, dtype, lanes, hint), target="cuda").get_source()
    assert src.count(f"pt_ld_{hint}_{vt}(&W[") == 1 and f"pt_ld_{hint}_{vt}(&A[" not in src
    plain = polytile.build(*_scaled(4, 256, dtype, lanes, None), target="cuda").get_source()
    assert "pt_ld_" not in plain
    text = nvcc_text(src, "ptx")
    if text is None:
        pytest.skip("nvcc not found")
    assert f"ld.global.nc.{ptx}" in text
    compile_with_nvcc(src)


def test_scalar_loads_stay_ordinary():
    src = polytile.build(*_scaled(3, 67, "float32", 1, "evict_last"),
                         target="cuda").get_source()
    assert "pt_ld_" not in src


@pytest.mark.parametrize("m,n,dtype,lanes,hint", [(2, 136, "float16", 8, "evict_last"),
                                                   (3, 68, "float32", 4, "evict_first")])
def test_hinted_loads_compute_the_definition(cuda_build, m, n, dtype, lanes, hint):
    """Rows the blocks' threads do not divide (136 = 17 vectors of 8): guarded vectors."""
    f = cuda_build(*_scaled(m, n, dtype, lanes, hint))
    assert f"pt_ld_{hint}" in f.get_source()
    rng = np.random.default_rng(n)
    a = rng.uniform(-2, 2, (m, n)).astype(dtype)
    w = rng.uniform(-2, 2, n).astype(dtype)
    dev = [polytile.nd.array(x, device="cuda") for x in (a, w, poison((m, n), dtype))]
    f(*dev)
    np.testing.assert_array_equal(dev[2].numpy(), a * w)


def _layernorm(args, dtype, **want):
    t = get_template("layernorm")
    sp = t.space(args, dtype, "cuda")
    full = {**sp.default().knob_values(), **want}
    cfg = next(sp.get(k) for k in range(len(sp)) if sp.get(k).knob_values() == full)
    return t.instantiate(cfg, args, dtype, "cuda")


#: (hints, stores) of the cases below: none, gamma/beta, also the rows, also the stores
LEVELS = ((0, 0), (1, 0), (2, 0), (2, 1))


def test_layernorm_hints_and_stores_in_the_source():
    counts = []
    for hints, stores in LEVELS:
        src = polytile.build(*_layernorm((64, 4096), "float16", hints=hints, stores=stores),
                             target="cuda").get_source()
        counts.append((src.count("= pt_ld_evict_last_uint2(&gamma[") +
                       src.count("= pt_ld_evict_last_uint2(&beta["),
                       src.count("= pt_ld_evict_first_uint2(&A["), src.count("pt_st_cs_uint2(&")))
    # the default layout: 4 steps of 4 elements; gamma and beta read at each step
    assert counts == [(0, 0, 0), (8, 0, 0), (8, 4, 0), (8, 4, 4)], counts
    compile_with_nvcc(src)


@pytest.mark.parametrize("args,dtype,layout", [((5, 96), "float16", [32, 8, 4, 2, 0]),
                                               ((3, 200), "float16", [32, 4, 1, 3, 1]),
                                               ((3, 128), "float32", [32, 4, 1, 0, 0])])
def test_layernorm_hints_and_stores_compute_the_definition(args, dtype, layout):
    s, tensors = _layernorm(args, dtype, layout=layout, hints=2, stores=1)
    f = polytile.lower(s, tensors, target="cuda")
    rng = np.random.default_rng(args[1])
    a = rng.uniform(-1, 1, args).astype(dtype)
    g = rng.uniform(0.5, 1.5, args[1]).astype(dtype)
    b = rng.uniform(-1, 1, args[1]).astype(dtype)
    out = poison(args, dtype)
    interpret(f, a, g, b, out)
    x = a.astype("float64")
    mu = x.mean(axis=1, keepdims=True)
    ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * g + b
    check(out, ref, k=args[1])


def test_layernorm_hints_and_stores_run(cuda_device):
    args = (3, 1000) if cuda_device == "emulated" else (1024, 4096)
    for k, (hints, stores) in enumerate(LEVELS[3:] if cuda_device == "emulated" else LEVELS):
        s, tensors = _layernorm(args, "float16", hints=hints, stores=stores)
        f = polytile.build(s, tensors, target="cuda")
        rng = np.random.default_rng(k)
        arrays = [rng.uniform(-1, 1, args).astype("float16"),
                  rng.uniform(0.5, 1.5, args[1]).astype("float16"),
                  rng.uniform(-1, 1, args[1]).astype("float16"), poison(args, "float16")]
        dev = [polytile.nd.array(x, device="cuda") for x in arrays]
        f(*dev)
        x = arrays[0].astype("float64")
        mu = x.mean(axis=1, keepdims=True)
        ref = ((x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5)
               * arrays[1] + arrays[2])
        check(dev[3].numpy(), ref, k=args[1])
