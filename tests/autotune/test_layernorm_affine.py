"""layernorm's output step on the GPU (``layernorm`` cuda template, knobs ``scalars`` and
``affine``; ``autotune/templates_gpu.py``).

``scalars`` = 1: the row's mean and ``1 / std`` computed once per row (registers, or
shared memory with several rows a block) instead of inline in the output's expression;
``affine`` = 1 (float16): ``gamma * y + beta`` in float16 arithmetic, two lanes an
instruction (the ``half2`` pragma: ``__hfma2``), with ``y = (x - mean) / std`` rounded
to float16 first. Error of ``affine`` = 1 per element (``u`` = 2^-11, float16's unit
roundoff): ``|out - (g y + b)| <= u |g y| (1 + u) + u |g y + b|``, i.e. at most the
output's rounding plus one of ``g y`` (two roundings where the interpreter evaluates the
product and the sum apart: ``u (2 |g y| + |g y + b|)`` up to second order), against one
rounding of the output for the float32 affine step. The interpreter (races checked) runs
odd sizes against float64 numpy with outputs poisoned; the CUDA source evaluates the
rsqrt once and the affine step with ``__hfma2``; nvcc compiles them for sm_90; the
emulated driver and a GPU (``gpu`` marker) run them."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import check, compile_with_nvcc, poison

import polytile
from polytile.autotune.template import get_template
from polytile.schedule.interpreter import run as interpret

U16 = 2.0 ** -11


def _config(sp, **want):
    """The config of ``sp`` with the knob values ``want``, the others at their default."""
    full = {**sp.default().knob_values(), **want}
    return next(sp.get(k) for k in range(len(sp)) if sp.get(k).knob_values() == full)


def _arrays(args, dtype, seed):
    g = np.random.default_rng(seed)
    m, n = args
    a = (3.0 + g.uniform(-1, 1, (m, n))).astype(dtype)
    gamma = g.uniform(0.5, 1.5, n).astype(dtype)
    beta = g.uniform(-1, 1, n).astype(dtype)
    return [a, gamma, beta, poison((m, n), dtype)]


def _check(out, arrays, affine: int):
    """float32 affine step: the float16/float32 tolerance of ``check``; float16 (affine 1):
    the bound of the module doc, plus float16's rounding of ``y`` against the float64
    statistics (``y`` is within a few float32 ulps of the exact value)."""
    a, g, b = (x.astype("float64") for x in arrays[:3])
    mu = a.mean(axis=1, keepdims=True)
    y = (a - mu) / np.sqrt(((a - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    ref = y * g + b
    if not affine:
        check(out, ref, k=a.shape[1])
        return
    assert not np.isnan(out).any(), "NaN (poison) left in output"
    bound = U16 * (2 * np.abs(g * y) + np.abs(ref)) * (1 + 4 * U16) + 1e-5 * np.abs(g * y)
    err = np.abs(out.astype("float64") - ref)
    assert (err <= bound).all(), float((err / bound).max())


@pytest.mark.parametrize("args, dtype, layout, stats, scalars, affine", [
    ((7, 45), "float32", [32, 1, 1, 0, 1], 1, 1, 0),    # ragged threads, scalars in registers
    ((5, 96), "float16", [32, 8, 4, 2, 0], 1, 1, 0),    # 4 rows a block: scalars in shared
    ((5, 96), "float16", [32, 8, 4, 2, 0], 0, 1, 1),    # two passes, half2 affine
    ((1, 1), "float16", [32, 1, 1, 1, 0], 1, 1, 1),     # one element, no vector: no half2
    ((3, 100), "float16", [32, 4, 1, 2, 1], 1, 0, 1),   # half2 without per-row scalars
    ((3, 100), "float32", [32, 2, 1, 2, 1], 0, 1, 0),   # the row in registers, ragged step
])
def test_knobs_compute_the_definition(args, dtype, layout, stats, scalars, affine):
    t = get_template("layernorm")
    sp = t.space(args, dtype, "cuda")
    cfg = _config(sp, layout=layout, stats=stats, scalars=scalars, affine=affine)
    s, tensors = t.instantiate(cfg, args, dtype, "cuda")
    f = polytile.lower(s, tensors, target="cuda")
    arrays = _arrays(args, dtype, seed=args[1])
    interpret(f, *arrays)
    _check(arrays[3], arrays, affine)


def test_affine_knob_only_for_float16():
    t = get_template("layernorm")
    assert [v["affine"] for v in (t.space((8, 1024), "float32", "cuda").get(k).knob_values()
                                  for k in range(4))] == [0] * 4
    sp = t.space((8, 1024), "float16", "cuda")
    assert {sp.get(k).knob_values()["affine"] for k in range(len(sp))} == {0, 1}


def test_scalars_and_half2_in_the_cuda_source():
    t = get_template("layernorm")
    args = (64, 4096)
    sp = t.space(args, "float16", "cuda")
    srcs = {}
    for scalars in (0, 1):
        for affine in (0, 1):
            s, tensors = t.instantiate(_config(sp, scalars=scalars, affine=affine), args,
                                       "float16", "cuda")
            srcs[scalars, affine] = polytile.build(s, tensors, target="cuda").get_source()
    # inline, the rsqrt is printed in every element's expression (nvcc does not hoist it)
    assert srcs[0, 0].count("rsqrtf(") == 4 and srcs[1, 0].count("rsqrtf(") == 1
    assert "__hfma2(" not in srcs[1, 0] and "__hfma2(" in srcs[1, 1]
    # the row's part of a thread (4 steps of 4): 2 pairs a step
    assert srcs[1, 1].count("__hfma2(") == 8 and not re.search(r"__float2half_rn\(__half2float"
                                                               r"\(beta", srcs[1, 1])
    compile_with_nvcc(srcs[1, 1])


def _run(args, dtype, want, seed):
    t = get_template("layernorm")
    sp = t.space(args, dtype, "cuda")
    s, tensors = t.instantiate(_config(sp, **want), args, dtype, "cuda")
    f = polytile.build(s, tensors, target="cuda")
    arrays = _arrays(args, dtype, seed)
    dev = [polytile.nd.array(x, device="cuda") for x in arrays]
    f(*dev)
    _check(dev[3].numpy(), arrays, want.get("affine", 0))


def test_half2_layernorm_runs(cuda_device):
    cases = [((3, 1000), {"scalars": 1, "affine": 1})] if cuda_device == "emulated" else [
        (args, dict(scalars=sc, affine=af)) for args in ((1024, 4096), (33, 4000))
        for sc, af in ((1, 0), (0, 1), (1, 1))]
    for k, (args, want) in enumerate(cases):
        _run(args, "float16", want, seed=k)


@pytest.mark.gpu
def test_float32_scalars_run():
    from polytile.targets.cuda import compile as cc

    if cc.available_compiler() is None:
        pytest.skip("no CUDA compiler")
    for args in ((1024, 4096), (33, 4000)):
        _run(args, "float32", {"scalars": 1}, seed=args[1])
