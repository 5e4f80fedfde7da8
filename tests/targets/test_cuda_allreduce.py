"""Attached cross-thread reductions (``tests/allreduce_cases.py``) built for CUDA and run:
on the host through the emulated driver (the generated CUDA C compiled by g++, each
block's threads as OS threads meeting at ``std::barrier``, so a barrier in divergent code
hangs or mis-pairs there as on a GPU), and on a GPU where there is one (``gpu`` marker).
Outputs are poisoned before each run."""

from __future__ import annotations

import cuda_emulator
import pytest
from allreduce_cases import explicit_rfactor, layernorm, softmax
from helpers import check, poison

import polytile
from polytile.targets.cuda import compile as cc


@pytest.fixture(params=[pytest.param("gpu", marks=pytest.mark.gpu), "emulated"])
def build(request, tmp_path, monkeypatch):
    """``build(s, args)``: a CUDA module on the GPU, or on the emulated driver."""
    if request.param == "gpu":
        if cc.available_compiler() is None:
            pytest.skip("no CUDA compiler")
        yield lambda s, args: polytile.build(s, args, target="cuda", cache_dir=tmp_path)
        return
    if not cuda_emulator.available():
        pytest.skip("no g++ for the emulated driver")
    with cuda_emulator.installed(tmp_path, monkeypatch):
        yield lambda s, args: polytile.build(s, args, target="cuda")


def _run(build, case):
    s, args, inputs, ref = case
    dev = [polytile.nd.array(x, device="cuda") for x in inputs]
    out = polytile.nd.array(poison(args[-1].shape, args[-1].dtype), device="cuda")
    build(s, args)(*dev, out)
    check(out.numpy(), ref, k=args[0].shape[1])


@pytest.mark.parametrize("m, n, threads, dtype", [(5, 37, 8, "float32"), (3, 13, 32, "float16"),
                                                  (7, 97, 16, "float32")])
def test_softmax(build, m, n, threads, dtype):
    _run(build, softmax(m, n, threads, dtype))


@pytest.mark.parametrize("scope", [None, "local"])
def test_layernorm(build, scope):
    _run(build, layernorm(3, 41, 8, "float16", scope=scope))


def test_explicit_rfactor(build):
    _run(build, explicit_rfactor(3, 11, 4))
