"""layernorm's gamma and beta in registers (``layout`` ``shared`` = 3,
``autotune/templates_gpu.py``): each thread loads its part of the per-column vectors at the
block's row loop, before the reductions, by 16-byte loads; the kernel still computes the
definition (reference interpreter, races and barriers checked, against numpy in float64 at
odd sizes: rows the block does not divide, rows no vector divides, rows on threadIdx.y that
share the vectors); rows with a large mean (``100 + N(0, 1)``: the variance is that of
``A - mean``, not ``E[A^2] - mean^2``); on a GPU (``gpu`` marker) at 1024 x 4096 and
33 x 4000."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, poison

import polytile
from polytile.autotune import gpu_limits
from polytile.autotune.data import make_inputs, output_positions
from polytile.autotune.template import get_template
from polytile.autotune.templates_gpu import REGISTER_ROW_BYTES, register_row_bytes, row_layouts
from polytile.schedule.interpreter import run as interpret


def _index(sp, lay):
    return next(k for k in range(len(sp)) if sp.get(k).knob_values()["layout"] == lay)


def _arrays(tensors, args, seed: int):
    """Inputs whose rows are ``N(0, 1)`` and ``100 + N(0, 1)`` by turns (gamma, beta the
    usual random ones) and a poisoned output."""
    arrays = make_inputs(tensors, 1, args)
    a = arrays[0]
    rng = np.random.default_rng(seed)
    mean = np.where(np.arange(a.shape[0]) % 2 == 1, 100.0, 0.0)[:, None]
    a[...] = (mean + rng.standard_normal(a.shape)).astype(a.dtype)
    out = output_positions(tensors)[0]
    arrays[out][...] = poison(arrays[out].shape, arrays[out].dtype.name)
    return arrays, out


def _reference(arrays, out, args):
    t = get_template("layernorm")
    return t.reference(*[a.astype("float64") for k, a in enumerate(arrays) if k != out],
                       args=args)


#: dtype, (M, N), layout: rows on threadIdx.y sharing the vectors (5 rows, blocks of 4; a
#: ragged last step, 264 = 256 + 8), a ragged last step (100 = 64 + 36), no vector (1001
#: columns, 64 threads of one)
CASES = [pytest.param("float16", (5, 264), [32, 8, 4, 3, 0], marks=pytest.mark.slow),
         ("float32", (2, 100), [32, 2, 1, 3, 1]),
         pytest.param("float16", (2, 1001), [64, 1, 1, 3, 1], marks=pytest.mark.slow)]


@pytest.mark.parametrize("dtype,args,lay", CASES)
def test_params_in_registers_compute_the_definition(dtype, args, lay):
    t = get_template("layernorm")
    sp = t.space(args, dtype, "cuda")
    s, tensors = t.instantiate(sp.get(_index(sp, lay)), args, dtype, "cuda")
    f = polytile.lower(s, tensors, target="cuda")
    text = str(f)
    steps = -(-args[1] // (lay[0] * lay[1]))
    for name in ("gamma", "beta"):
        assert f"{name}_regs = alloc({dtype}[{steps}, 1, {lay[1]}], scope='local')" in text
        assert text.count(f"{name}[") == steps, text   # read once, a vector per step
    arrays, out = _arrays(tensors, args, args[1])
    interpret(f, *arrays)
    check(arrays[out], _reference(arrays, out, args), k=args[1])


def test_params_are_loaded_before_the_reductions():
    """float16 4096 x 4096, 256 threads of 8: two 16-byte loads each of gamma and beta,
    before the first barrier (their latency overlaps the reductions), none after."""
    t = get_template("layernorm")
    sp = t.space((4096, 4096), "float16", "cuda -arch=sm_90")
    s, tensors = t.instantiate(sp.get(_index(sp, [256, 8, 1, 3, 1])), (4096, 4096),
                               "float16", "cuda -arch=sm_90")
    src = polytile.build(s, tensors, target="cuda -arch=sm_90").get_source()
    first_sync = src.index("__syncthreads()")
    for name in ("gamma", "beta"):
        assert f"half {name}_regs[16];" in src
        loads = [k for k in range(len(src)) if src.startswith(f"(const uint4*)(&{name}[", k)]
        assert len(loads) == 2 and all(k < first_sync for k in loads), src
        assert src.count(f"&{name}[") == 2


def test_param_layouts_in_the_space():
    """shared = 3 only for templates with per-column vectors (layernorm, not softmax), only
    where the row's part and the two vectors' together fit :data:`REGISTER_ROW_BYTES` and
    the row spans the block's threads."""
    lim = gpu_limits.GPULimits("sm_90", max_threads_per_block=1024,
                               shared_bytes_per_block=49152)
    assert not any(lay[3] == 3 for lay in row_layouts(lim, 4096, 4096, "float16"))
    lays = row_layouts(lim, 4096, 4096, "float16", params=2)
    three = [lay for lay in lays if lay[3] == 3]
    assert three and {lay[0] for lay in three} == {128, 256, 512, 1024}
    assert all(3 * register_row_bytes(4096, th, vec, 2) <= REGISTER_ROW_BYTES
               for th, vec, _, _, _ in three)
    assert not any(lay[3] == 3 for lay in row_layouts(lim, 8, 96, "float16", params=2)
                   if lay[0] * lay[1] > 96)
    assert {tuple(lay[:3]) + tuple(lay[4:]) for lay in three} <= {
        tuple(lay[:3]) + tuple(lay[4:]) for lay in lays if lay[3] == 2}
    for name, want in (("layernorm", True), ("softmax", False), ("rmsnorm", False)):
        sp = get_template(name).space((64, 4096), "float16", "cuda")
        assert any(sp.get(k).knob_values()["layout"][3] == 3 for k in range(len(sp))) == want


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_params_in_registers_run(dtype):
    t = get_template("layernorm")
    for args in ((1024, 4096), (33, 4000)):
        sp = t.space(args, dtype, "cuda")
        picks = [k for k in range(len(sp)) if sp.get(k).knob_values()["layout"][3] == 3]
        assert picks
        for i in picks[:2] + picks[-1:]:
            s, tensors = t.instantiate(sp.get(i), args, dtype, "cuda")
            f = polytile.build(s, tensors, target="cuda")
            arrays, out = _arrays(tensors, args, 3)
            dev = [polytile.nd.array(a, device="cuda") for a in arrays]
            f(*dev)
            check(dev[out].numpy(), _reference(arrays, out, args), k=args[1])
