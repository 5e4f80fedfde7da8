"""Fixtures shared by the symbolic-shape tests."""

from __future__ import annotations

import os
import sys

import pytest

import polytile
from polytile.targets import Target
from polytile.targets.cuda.runtime import CUDAModule

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "targets"))
import cuda_emulator  # noqa: E402


@pytest.fixture(params=[pytest.param("gpu", marks=pytest.mark.gpu), "emulated"])
def cuda_build(request, tmp_path, monkeypatch):
    """``build(s, args)`` for CUDA: on the GPU, or on the emulated driver
    (``tests/targets/cuda_emulator.py``: the generated CUDA C compiled by g++)."""
    if request.param == "gpu":
        yield lambda s, args: polytile.build(s, args, target="cuda")
        return
    with cuda_emulator.installed(tmp_path, monkeypatch):
        yield lambda s, args: CUDAModule(polytile.lower(s, args, target="cuda",
                                                        stop_after=None), Target.parse("cuda"))
