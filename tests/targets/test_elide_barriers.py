"""The CUDA backend pass that drops barriers ordering nothing
(``schedule/passes/elide_barriers.py``): hand-built kernels where a barrier is or is not
needed (each result run on the interpreter, which raises on a race), and the fused row
kernels (softmax, layernorm, rmsnorm) lowered in full at odd sizes: fewer barriers, no
race, the numbers of numpy."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

import polytile
from polytile.autotune.template import get_template
from polytile.schedule.interpreter import RaceError
from polytile.schedule.interpreter import run as interpret
from polytile.schedule.loop_ir import (Allocate, Buffer, For, IfThenElse, KernelLaunch, Load,
                                       PrimFunc, Store, Sync, seq, walk_stmts)
from polytile.schedule.passes.elide_barriers import elide_barriers
from polytile.te.expr import Cmp, Const, Var

sys.path.insert(0, str(Path(__file__).parent.parent / "autotune"))
from helpers import check  # noqa: E402

TX, TY = Var("int64", "threadIdx.x"), Var("int64", "threadIdx.y")
S = Buffer("S", (8,), "float32", "shared")
O = Buffer("O", (8,), "float32")


def _i(v: int) -> Const:
    return Const("int64", v)


def _own():   # thread (x, y) of a 4 x 2 block owns element 2 x + y
    return TX * _i(2) + TY


def _kernel(*body) -> PrimFunc:
    k = KernelLaunch("k", (1, 1, 1), (4, 2, 1), ((TX, "threadIdx.x"), (TY, "threadIdx.y")),
                     Allocate(S, seq(*body)))
    return PrimFunc("f", (O,), k)


def _syncs(f: PrimFunc) -> int:
    return sum(isinstance(s, Sync) for s in walk_stmts(f.body))


def _run(f: PrimFunc) -> np.ndarray:
    out = np.full(8, np.nan, dtype="float32")
    interpret(f, out)
    return out


def test_a_threads_own_element_needs_no_barrier():
    """Written then read by the same thread (the kernel's leading barrier goes too)."""
    f = _kernel(Sync(), Store(S, (_own(),), Const("float32", 1.0)), Sync(),
                Store(O, (_own(),), Load("float32", S, (_own(),)) + Const("float32", 1.0)))
    g = elide_barriers(f)
    assert _syncs(f) == 2 and _syncs(g) == 0
    assert (_run(g) == 2.0).all()


@pytest.mark.parametrize("index", ["neighbour", "not_injective", "loop"])
def test_another_threads_element_keeps_the_barrier(index):
    """Read at another thread's element, at an index two threads share, or through a
    loop variable: the barrier stays (and is needed: without it the interpreter sees a
    race)."""
    j = Var("int64", "j")
    write = Store(S, (_own(),), Const("float32", 1.0))
    read = {"neighbour": (_i(7) - _own(),),
            "not_injective": (TX + TY,), "loop": (j,)}[index]
    use = Store(O, (_own(),), Load("float32", S, read))
    if index == "loop":
        use = For(j, _i(0), _i(8), "serial", Store(O, (_own(),), Load("float32", S, (j,))))
    f = _kernel(write, Sync(), use)
    g = elide_barriers(f)
    assert _syncs(g) == 1
    assert (_run(g) == 1.0).all()
    with pytest.raises(RaceError):
        _run(_kernel(write, use))


def test_a_value_thread_0_writes_for_all_keeps_the_barrier():
    """``if threadIdx.x == 0: S[y] = ..`` then every thread reads ``S[y]``: needed; the
    same guarded thread writing twice (an initial value, then the combine) is not."""
    first = IfThenElse(Cmp("bool", "eq", TX, _i(0)), Store(S, (TY,), Const("float32", 2.0)))
    again = IfThenElse(Cmp("bool", "eq", TX, _i(0)), Store(
        S, (TY,), Load("float32", S, (TY,)) + Const("float32", 1.0)))
    f = _kernel(first, Sync(), again, Sync(), Store(O, (_own(),), Load("float32", S, (TY,))))
    g = elide_barriers(f)
    assert _syncs(g) == 1
    assert (_run(g) == 3.0).all()


def test_barriers_in_a_loop_body_keep_their_neighbours():
    """Inside a loop only a barrier between two others of the same body may go (the next
    iteration follows the last barrier): here the middle one goes, the first and last
    stay (they order the read of S[7 - own] against the next iteration's write and this
    one's update)."""
    j = Var("int64", "j")
    body = seq(Sync(), Store(S, (_own(),), Const("float32", 1.0)), Sync(),
               Store(S, (_own(),), Load("float32", S, (_own(),)) + Const("float32", 1.0)),
               Sync(),
               Store(O, (_own(),), Load("float32", S, (_i(7) - _own(),))))
    f = _kernel(For(j, _i(0), _i(3), "serial", body))
    g = elide_barriers(f)
    assert _syncs(g) == 2
    assert (_run(g) == 2.0).all()


def _picks(sp, n: int, seed: int) -> list:
    lays = [sp.get(k).knob_values()["layout"] for k in range(len(sp))]
    small = [k for k, lay in enumerate(lays) if lay[0] * lay[2] <= 128]
    return [sp.default_index()] + random.Random(seed).sample(small, min(n, len(small)))


@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("args", [(5, 136), (7, 45), (2, 97)])
def test_row_kernels_lowered_in_full(name, dtype, args):
    """The row kernels after every pass (warp shuffles, barriers dropped) on the
    interpreter at odd sizes: numpy's numbers, no race; NaN rows stay NaN."""
    from test_gpu_rows import _inputs, _reference

    t = get_template(name)
    sp = t.space(args, dtype, "cuda")
    for i in _picks(sp, 2, args[1]):
        s, tensors = t.instantiate(sp.get(i), args, dtype, "cuda")
        f = polytile.lower(s, tensors, target="cuda", stop_after=None)
        arrays, out = _inputs(tensors, args)
        arrays[0][min(1, args[0] - 1), 3] = np.nan
        interpret(f, *arrays)
        ref = _reference(t, arrays, out, args)
        nan_row = min(1, args[0] - 1)
        assert np.isnan(arrays[out][nan_row]).all()
        keep = [r for r in range(args[0]) if r != nan_row]
        if keep:
            check(arrays[out][keep], ref[keep], k=args[1])


def test_fused_softmax_barriers():
    """softmax 4096 x 4096, 128 threads a row, 4 rows a block: of the 11 barriers of the
    conservative placement, 4 remain (two per reduction: the warps' partials, and the
    row's statistic that thread 0 writes for all)."""
    t = get_template("softmax")
    sp = t.space((4096, 4096), "float16", "cuda -arch=sm_90")
    idx = next(k for k in range(len(sp))
               if sp.get(k).knob_values()["layout"] == [128, 4, 4, 0, 0])
    s, tensors = t.instantiate(sp.get(idx), (4096, 4096), "float16", "cuda -arch=sm_90")
    src = polytile.build(s, tensors, target="cuda -arch=sm_90").get_source()
    assert src.count("__syncthreads()") == 4
