"""The ``"min_blocks"`` pragma (``Stage.pragma``): a kernel's ``__launch_bounds__(threads,
N)`` from its root stage, the per-kernel form of the ``-min-blocks=N`` target option; the
schedule's value wins over the target's; bad values are refused; the value survives a
schedule copy (trace replay) and shows in the lowered text; ptxas holds the registers to
the bound (nvcc where it exists)."""

from __future__ import annotations

import pytest
from helpers import compile_with_nvcc

import polytile
from polytile import te
from polytile.errors import ScheduleError


def _kernels(blocks=None):
    A = te.placeholder((64, 256), name="A")
    B = te.compute((64, 256), lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((64, 256), lambda i, j: B[i, j] + 1, name="C")
    s = te.create_schedule(C.op)
    for T in (B, C):
        i, j = T.op.axis
        s[T].bind(i, te.thread_axis("blockIdx.x"))
        s[T].bind(j, te.thread_axis("threadIdx.x"))
    if blocks:
        s[C].pragma(C.op.axis[0], "min_blocks", blocks)
    return s, [A, C]


def _bounds(src: str) -> list:
    return [line.split("__launch_bounds__")[1].split(")")[0] + ")"
            for line in src.splitlines() if "__launch_bounds__" in line]


def test_min_blocks_of_one_kernel():
    s, args = _kernels(8)
    text = str(polytile.lower(s.copy(), args, target="cuda"))
    assert text.count("min_blocks=8") == 1
    src = polytile.build(s, args, target="cuda").get_source()
    assert _bounds(src) == ["(256)", "(256, 8)"]       # B's kernel, then C's
    # the schedule's bound wins over the target's, which holds for the other kernels
    src = polytile.build(s, args, target="cuda -min-blocks=2").get_source()
    assert _bounds(src) == ["(256, 2)", "(256, 8)"]
    compile_with_nvcc(src)


@pytest.mark.parametrize("value", [0, 33, 2.5, True, "8"])
def test_bad_min_blocks_are_refused(value):
    s, args = _kernels()
    C = args[1]
    with pytest.raises(ScheduleError, match="pragma: 'min_blocks' .* an int from 1 to 32"):
        s[C].pragma(C.op.axis[0], "min_blocks", value)
