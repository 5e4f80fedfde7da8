"""Warp-shuffle combines of cross-thread reductions (``schedule/passes/warp_reduce.py``,
a CUDA backend pass): softmax (max, then sum) and layer normalisation (two sums) over
thread extents 1, 7, 32, 33, 100, 256 in float32 and float16 (float32 statistics), rows
on ``threadIdx.y`` in the fused row templates; run by the reference interpreter (which
executes ``WarpShuffle`` per block at a synchronization point, races and divergent
barriers checked), by the emulated driver (``__shfl_xor_sync`` emulated with a slot per
thread and block barriers) and on a GPU (``gpu`` marker). Extents the pass cannot shuffle
(7, 33, 100: no power of two of whole warps or rows) keep the serial combine. Outputs are
poisoned before each run."""

from __future__ import annotations

import numpy as np
import pytest
from allreduce_cases import layernorm, softmax
from helpers import check, poison

import polytile
from polytile.autotune.data import make_inputs, output_positions
from polytile.autotune.template import get_template
from polytile.schedule.interpreter import run as interpret
from polytile.schedule.loop_ir import WarpShuffle, walk_stmts

#: thread extent -> whether the combine is shuffled
EXTENTS = {1: False, 7: False, 32: True, 33: False, 100: False, 256: True}


def _lowered(s, args):
    """The function as the CUDA backend builds it (its passes included)."""
    return polytile.lower(s, args, target="cuda", stop_after="backend_passes")


def _shuffles(f) -> int:
    return sum(isinstance(x, WarpShuffle) for x in walk_stmts(f.body))


def _case(kind: str, threads: int, dtype: str):
    m, n = (2, 300) if threads > 32 else (3, 45)
    if kind == "softmax":
        return softmax(m, n, threads, dtype, seed=threads)
    return layernorm(m, n, threads, dtype, seed=threads)


@pytest.mark.parametrize("threads", list(EXTENTS))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("kind", ["softmax", "layernorm"])
def test_interpreted_shuffle_combine(kind, dtype, threads):
    s, args, inputs, ref = _case(kind, threads, dtype)
    f = _lowered(s, args)
    # two reductions, log2 steps each (plus one for the warps of a row past 32 threads)
    steps = {32: 5, 256: 5 + 3}.get(threads, 0)
    assert _shuffles(f) == 2 * steps
    out = poison(args[-1].shape, args[-1].dtype)
    interpret(f, *inputs, out)
    check(out, ref, k=args[0].shape[1])


def test_rows_on_threadidx_y_and_local_statistics():
    """The fused row templates: several rows per block (``threadIdx.y``) with 32, 64 and
    128 threads a row, and ``local`` statistics (every thread combines), all shuffled."""
    t = get_template("layernorm")
    args = (5, 70)
    sp = t.space(args, "float16", "cuda")
    seen = 0
    lays = ([32, 1, 4, 0, 0], [64, 1, 2, 1, 0], [32, 1, 1, 0, 1], [128, 1, 2, 0, 0],
            [64, 1, 1, 1, 1])
    for k in range(len(sp)):
        kv = sp.get(k).knob_values()
        lay = kv["layout"]
        # the statistics in two passes or one (a tuple reduction), alternately
        if lay not in lays or kv["stats"] != lays.index(lay) % 2 or kv["occupancy"]:
            continue
        if any(kv.get(knob, 0) for knob in ("scalars", "affine", "hints", "stores")):
            continue  # the output step's knobs (test_layernorm_affine) at their legacy 0
        seen += 1
        s, tensors = t.instantiate(sp.get(k), args, "float16", "cuda")
        f = _lowered(s, tensors)
        assert _shuffles(f) > 0, lay
        arrays = make_inputs(tensors, 1, args)
        out = output_positions(tensors)[0]
        arrays[out][...] = poison(arrays[out].shape, arrays[out].dtype.name)
        interpret(f, *arrays)
        ref = t.reference(*[a.astype("float64") for i, a in enumerate(arrays) if i != out],
                          args=args)
        check(arrays[out], ref, k=args[1])
    assert seen == 5


@pytest.mark.parametrize("threads", [7, 32, 256])
@pytest.mark.parametrize("kind, dtype", [("softmax", "float32"), ("layernorm", "float16")])
def test_built_shuffle_combine(cuda_build, kind, dtype, threads):
    s, args, inputs, ref = _case(kind, threads, dtype)
    dev = [polytile.nd.array(x, device="cuda") for x in inputs]
    out = polytile.nd.array(poison(args[-1].shape, args[-1].dtype), device="cuda")
    cuda_build(s, args)(*dev, out)
    check(out.numpy(), ref, k=args[0].shape[1])
    assert np.isfinite(out.numpy().astype("float64")).all()


def _exchange_kernel(threads: int, lane_xor: int, mask: int = 0xFFFFFFFF):
    """``out[tx] = in[tx ^ lane_xor]`` through one warp shuffle, in one block."""
    from polytile.schedule.loop_ir import (Allocate, Buffer, KernelLaunch, Load, PrimFunc,
                                           Store, seq)
    from polytile.te.expr import Const, Var

    tx = Var("int64", "threadIdx.x")
    a = Buffer("a", (threads,), "float32")
    o = Buffer("o", (threads,), "float32")
    v = Buffer("v", (1,), "float32", "local")
    zero = Const("int64", 0)
    body = Allocate(v, seq(WarpShuffle(v, (zero,), Load("float32", a, (tx,)), lane_xor, mask),
                           Store(o, (tx,), Load("float32", v, (zero,)))))
    k = KernelLaunch("k", (1, 1, 1), (threads, 1, 1), ((tx, "threadIdx.x"),), body)
    return PrimFunc("main", (a, o), k)


def test_interpreter_exchanges_lanes_and_refuses_missing_partners():
    x = np.arange(1, 65, dtype="float32")
    out = poison((64,), "float32")
    interpret(_exchange_kernel(64, 5), x, out)
    np.testing.assert_array_equal(out, x[np.arange(64) ^ 5])
    with pytest.raises(RuntimeError, match="does not take part"):
        interpret(_exchange_kernel(7, 4, 0x7F), x[:7], poison((7,), "float32"))
    with pytest.raises(RuntimeError, match="does not take part"):
        interpret(_exchange_kernel(8, 1, 0x0F), x[:8], poison((8,), "float32"))
