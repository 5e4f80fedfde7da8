"""Fixtures shared by the tests (helpers live in ``tests/helpers.py``).

Tests marked ``gpu`` are skipped (autouse fixture below) unless a CUDA device is present;
tests marked ``slow`` run only when selected (``pytest -m slow``). CUDA tests run on a GPU
and on the emulated driver of ``tests/targets/cuda_emulator.py`` through ``cuda_device``
and ``cuda_build``.
"""

from __future__ import annotations

import functools
import os
import sys

import pytest
from helpers import BACKENDS, require_backend


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """Each numeric test runs on the interpreter and on the LLVM backend (skipped until
    ``polytile.build`` works on a trivial compute)."""
    require_backend(request.param)
    return request.param


@functools.cache
def cuda_device_status() -> tuple[bool, str]:
    """``(True, "")`` when the CUDA driver (through cuda-python) reports a device, else
    ``(False, reason)``; asked once per session."""
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver
        except ImportError:
            return False, "cuda-python is not installed"
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return False, f"cuInit failed ({err})"
        err, n = driver.cuDeviceGetCount()
        if int(err) != 0 or n < 1:
            return False, "no CUDA device"
    except Exception as ex:  # noqa: BLE001 - no driver library
        return False, f"no CUDA driver ({type(ex).__name__})"
    return True, ""


@pytest.fixture(autouse=True)
def _skip_gpu_tests_without_a_device(request):
    if request.node.get_closest_marker("gpu") is not None:
        ok, why = cuda_device_status()
        if not ok:
            pytest.skip(f"needs an NVIDIA GPU: {why}")


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with pytest -m slow")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


# ------------------------------------------------------------------ CUDA: a GPU or the emulator
def _cuda_emulator():
    """``tests/targets/cuda_emulator.py``, imported under the name the test files use."""
    where = os.path.join(os.path.dirname(os.path.abspath(__file__)), "targets")
    if where not in sys.path:
        sys.path.insert(0, where)
    import cuda_emulator

    return cuda_emulator


@pytest.fixture
def emulated_cuda(tmp_path, monkeypatch):
    """polytile's CUDA runtime on the emulated driver (the generated CUDA C compiled by g++
    for the host) for the duration of the test; the fixture's value is the
    ``EmulatedDriver`` (``.launches`` records each launch). Skips the test without g++."""
    with _cuda_emulator().installed(tmp_path, monkeypatch) as drv:
        yield drv


@pytest.fixture(params=[pytest.param("gpu", marks=pytest.mark.gpu), "emulated"])
def cuda_device(request) -> str:
    """Where a CUDA test runs: ``"gpu"`` (CUDA device 0, test marked ``gpu``) or
    ``"emulated"`` (the driver of :func:`emulated_cuda`, installed for the test)."""
    if request.param == "emulated":
        request.getfixturevalue("emulated_cuda")
    return request.param


@pytest.fixture
def cuda_build(cuda_device, tmp_path):
    """``cuda_build(s, args, **options)``: ``polytile.build(s, args, "cuda", **options)`` on
    the device of :func:`cuda_device` (on a GPU the binaries are cached under ``tmp_path``;
    skipped without a CUDA compiler). ``cuda_build.emulated`` tells which, and
    ``cuda_build.driver`` is the emulated driver (None on a GPU)."""
    import polytile

    if cuda_device == "gpu":
        from polytile.targets.cuda import compile as cc

        if cc.available_compiler() is None:
            pytest.skip("no CUDA compiler")
        options = {"cache_dir": tmp_path}
    else:
        options = {}

    def build(s, args, **kw):
        return polytile.build(s, args, "cuda", **{**options, **kw})

    build.emulated = cuda_device == "emulated"
    build.driver = None
    if build.emulated:
        from polytile.targets.cuda import runtime

        build.driver = runtime._state["driver"]
    return build
