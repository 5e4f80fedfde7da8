"""The tutorials run as scripts at small sizes (each checks its own results and exits
non-zero on a wrong one)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

TUTORIALS = pathlib.Path(__file__).resolve().parents[2] / "tutorials"


def _run(script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(TUTORIALS / script), *args],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_01_compute_and_schedule():
    out = _run("01_compute_and_schedule.py", "--n", "13")
    assert out.count("result matches numpy") == 11
    assert "for i.outer in parallel(" in out
    assert "parallel: loop 'k' of stage 'E' carries a dependence" in out


def test_02_cpu_matmul():
    out = _run("02_cpu_matmul.py", "--n", "96", "--threads", "2")
    assert "numpy (OpenBLAS)" in out
    assert out.count("x numpy") == 8


def test_04_cuda_gemm_builds_without_a_gpu():
    from polytile.targets.cuda import compile as cc

    if cc.nvcc_path() is None and cc.nvrtc_version() is None:
        pytest.skip("neither NVRTC nor nvcc is available")
    out = _run("04_cuda_gemm.py", "--n", "256", "--no-run")
    assert out.count("built in") == 3
