"""layernorm's one-pass statistics on the GPU (knob ``stats`` = 1 of the ``layernorm``
cuda template): the shifted sum and sum of squares as one tuple cross-thread reduction
(``autotune/templates_gpu.py``, ``layernorm_cuda``).

The interpreter (races and divergent barriers checked) runs layouts of one row a block
(the shift in a register) and of several rows (the shift in shared memory) at odd sizes
against float64 numpy, outputs poisoned; rows far from zero (an offset of 1000 times their
spread, where unshifted sums would lose every digit of the variance in float32) meet the
float32 tolerance; the CUDA source combines both sums in one warp-shuffle butterfly with
one barrier round; on a GPU (``gpu`` marker) 1024 x 4096 in both dtypes and an offset
row set run against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, poison

import polytile
from polytile.autotune.template import get_template
from polytile.schedule.interpreter import run as interpret


def _index(sp, layout, stats, occupancy=0, **more):
    """The config of these knob values, the other knobs (``scalars``, ``affine``) 0."""
    want = {"layout": layout, "stats": stats, "occupancy": occupancy, **more}
    for k in range(len(sp)):
        kv = sp.get(k).knob_values()
        if kv == {**dict.fromkeys(kv, 0), **want}:
            return k
    raise AssertionError(f"no config {want}")


def _arrays(args, dtype, offset=0.0, seed=0):
    g = np.random.default_rng(seed)
    m, n = args
    a = (offset + g.uniform(-1, 1, (m, n))).astype(dtype)
    gamma = g.uniform(0.5, 1.5, n).astype(dtype)
    beta = g.uniform(-1, 1, n).astype(dtype)
    return [a, gamma, beta, poison((m, n), dtype)]


def _reference(arrays):
    a, g, b = (x.astype("float64") for x in arrays[:3])
    mu = a.mean(axis=1, keepdims=True)
    var = ((a - mu) ** 2).mean(axis=1, keepdims=True)
    return (a - mu) / np.sqrt(var + 1e-5) * g + b


@pytest.mark.parametrize("args, dtype, layout", [
    ((7, 45), "float32", [32, 1, 1, 0, 1]),     # ragged threads, shift in a register
    ((5, 96), "float16", [32, 8, 4, 2, 0]),     # 4 rows a block, 5 rows: shift in shared
    ((1, 1), "float16", [32, 1, 1, 1, 0]),      # one element: variance 0
    ((3, 100), "float32", [32, 2, 1, 2, 1]),    # the row in registers, a ragged last step
])
def test_one_pass_computes_the_definition(args, dtype, layout):
    t = get_template("layernorm")
    sp = t.space(args, dtype, "cuda")
    s, tensors = t.instantiate(sp.get(_index(sp, layout, 1)), args, dtype, "cuda")
    f = polytile.lower(s, tensors, target="cuda", stop_after="backend_passes")
    arrays = _arrays(args, dtype, seed=args[1])
    interpret(f, *arrays)
    check(arrays[3], _reference(arrays), k=args[1])


def test_shifted_sums_keep_the_variance_of_rows_far_from_zero():
    """Rows of 1000 + U(-1, 1) in float32: the shift by the row's first element keeps
    ``z`` (docstring of ``layernorm_cuda``) below 2, so the error bound 3 g (1 + z^2) of
    the variance is ~1e-5 relative; unshifted sums would have ``z`` = 1700."""
    t = get_template("layernorm")
    args = (3, 100)
    sp = t.space(args, "float32", "cuda")
    s, tensors = t.instantiate(sp.get(_index(sp, [32, 2, 1, 2, 1], 1)), args, "float32",
                               "cuda")
    f = polytile.lower(s, tensors, target="cuda", stop_after="backend_passes")
    arrays = _arrays(args, "float32", offset=1000.0, seed=3)
    interpret(f, *arrays)
    # the input itself is rounded to float32 (ulp 6e-5 at 1000): the reference reads the
    # rounded values, so the comparison measures the statistics' error only
    check(arrays[3], _reference(arrays), k=args[1])


def test_one_barrier_round_in_the_cuda_source():
    """At 4096 x 4096 float16 (256 threads, 8 warps a row): both sums go through one
    butterfly and one shared round of per-warp partials; two passes need two."""
    t = get_template("layernorm")
    args = (4096, 4096)
    sp = t.space(args, "float16", "cuda")
    src = {}
    for stats in (0, 1):
        s, tensors = t.instantiate(sp.get(_index(sp, [256, 8, 1, 2, 1], stats)), args,
                                   "float16", "cuda")
        src[stats] = polytile.build(s, tensors, target="cuda").get_source()
    assert src[1].count("__syncthreads()") == src[0].count("__syncthreads()") - 1
    assert src[1].count("__shfl_xor_sync") == src[0].count("__shfl_xor_sync") == 16


def test_full_occupancy_bound_in_the_cuda_source():
    """Knob ``occupancy`` = 1: ``__launch_bounds__(threads, blocks)`` for 2048 threads an SM
    (256 threads a row: 8 blocks; 64 threads x 4 rows: 8; 1024 threads: 2)."""
    from polytile.autotune.templates_gpu import full_occupancy_blocks

    assert [full_occupancy_blocks(lay) for lay in ([256, 8, 1, 2, 1], [64, 8, 4, 2, 0],
                                                   [1024, 4, 1, 0, 1], [32, 8, 1, 0, 0],
                                                   [1024, 8, 2, 0, 0])] == [8, 8, 2, 32, 0]
    t = get_template("layernorm")
    args = (64, 4096)
    sp = t.space(args, "float16", "cuda")
    s, tensors = t.instantiate(sp.get(_index(sp, [256, 8, 1, 2, 1], 0, 1)), args, "float16",
                               "cuda")
    src = polytile.build(s, tensors, target="cuda").get_source()
    assert "__launch_bounds__(256, 8)" in src


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_one_pass_runs_on_a_gpu(dtype):
    from polytile.targets.cuda import compile as cc

    if cc.available_compiler() is None:
        pytest.skip("no CUDA compiler")
    t = get_template("layernorm")
    vec = 8 if dtype == "float16" else 4
    for args, offset in (((1024, 4096), 0.0), ((33, 4000), 100.0)):
        sp = t.space(args, dtype, "cuda")
        want = (sp.default().knob_values()["layout"], [128, vec, 1, 2, 1], [64, 4, 4, 0, 0])
        ran = 0
        for k in range(len(sp)):
            kv = sp.get(k).knob_values()
            if kv["stats"] != 1 or kv["occupancy"] or kv["layout"] not in want:
                continue
            s, tensors = t.instantiate(sp.get(k), args, dtype, "cuda")
            f = polytile.build(s, tensors, target="cuda")
            arrays = _arrays(args, dtype, offset=offset, seed=k)
            dev = [polytile.nd.array(x, device="cuda") for x in arrays]
            f(*dev)
            check(dev[3].numpy(), _reference(arrays), k=args[1])
            ran += 1
        assert ran >= 2, args


def test_float16_default_is_one_pass_on_long_rows():
    """The measured float16 default (``ONE_PASS_DTYPES``): one pass at rows of 1024 and
    more; two passes for float32 and for short rows."""
    t = get_template("layernorm")
    stats = {(args, dt): t.space(args, dt, "cuda").default().knob_values()["stats"]
             for args in ((4096, 4096), (8, 1024), (7, 45)) for dt in ("float16", "float32")}
    assert [k for k, v in stats.items() if v] == [((4096, 4096), "float16"),
                                                  ((8, 1024), "float16")]
