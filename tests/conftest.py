"""Fixtures shared by the te/ and schedule/ tests (helpers live in ``tests/helpers.py``).

Tests marked ``gpu`` are skipped (autouse fixture below) unless a CUDA device is present;
tests marked ``slow`` run only when selected (``pytest -m slow``).
"""

from __future__ import annotations

import functools

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
