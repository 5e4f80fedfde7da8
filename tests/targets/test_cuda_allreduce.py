"""Attached cross-thread reductions (``tests/allreduce_cases.py``) built for CUDA and run:
on the host through the emulated driver (the generated CUDA C compiled by g++, each
block's threads as OS threads meeting at ``std::barrier``, so a barrier in divergent code
hangs or mis-pairs there as on a GPU), and on a GPU where there is one (``gpu`` marker).
Outputs are poisoned before each run."""

from __future__ import annotations

import pytest
from allreduce_cases import explicit_rfactor, layernorm, softmax
from helpers import check, poison

import polytile


def _run(cuda_build, case):
    s, args, inputs, ref = case
    dev = [polytile.nd.array(x, device="cuda") for x in inputs]
    out = polytile.nd.array(poison(args[-1].shape, args[-1].dtype), device="cuda")
    cuda_build(s, args)(*dev, out)
    check(out.numpy(), ref, k=args[0].shape[1])


@pytest.mark.parametrize("m, n, threads, dtype", [(5, 37, 8, "float32"), (3, 13, 32, "float16"),
                                                  (7, 97, 16, "float32")])
def test_softmax(cuda_build, m, n, threads, dtype):
    _run(cuda_build, softmax(m, n, threads, dtype))


@pytest.mark.parametrize("scope", [None, "local"])
def test_layernorm(cuda_build, scope):
    _run(cuda_build, layernorm(3, 41, 8, "float16", scope=scope))


def test_explicit_rfactor(cuda_build):
    _run(cuda_build, explicit_rfactor(3, 11, 4))
