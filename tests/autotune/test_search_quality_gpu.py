"""``benchmarks/search_quality.py`` on GPU templates (issue 11: the model tuner against
random search on the GPU templates): templates with a dtype (``matmul:float16``), pool
file names that tell dtypes and ``-arch`` apart (float32 CPU pools keep their names)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _sq():
    spec = importlib.util.spec_from_file_location("search_quality", BENCH / "search_quality.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_template_specs_and_pool_names():
    sq = _sq()
    assert sq.split_spec("matmul") == ("matmul", "float32")
    assert sq.split_spec("matmul:float16") == ("matmul", "float16")
    assert sq.split_spec("conv2d") == ("conv2d_nchw", "float32")
    # the recorded CPU pools keep their names
    assert sq.pool_file("softmax", (512, 1024), "float32", "llvm", 192, 0) == \
        "softmax_512x1024_llvm_n192_s0.json"
    assert (BENCH / "pools" / "softmax_512x1024_llvm_n192_s0.json").exists()
    names = {sq.pool_file("matmul", (2048, 2048, 2048), dt, tgt, 48, 0)
             for dt in ("float32", "float16") for tgt in ("cuda", "cuda -arch=sm_90a")}
    assert len(names) == 4
    assert "matmul_2048x2048x2048_float16_cuda_sm_90a_n48_s0.json" in names
    assert ("layernorm", "cuda") in sq.SHAPES and ("softmax", "cuda") in sq.SHAPES
    assert sq.pool_file("matmul", (64, 64, 64), "float32", "cuda", 8, 0, full_space=True) == \
        "matmul_64x64x64_cuda_all_n8_s0.json"


def test_report_rows_at_powers_of_two(capsys):
    """The table has a row at every power of two up to the longest curve (issue 11's
    curves: model against random at k = 1, 2, 4, 8, ...), besides N/2, N, 2N, 4N."""
    sq = _sq()
    curves = {"model": [[4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]] * 2,
              "random": [[4.0, 4.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]] * 2}
    rows: list = []
    sq._report("t on x", curves, 1.0, [2], rows)
    out = capsys.readouterr().out
    ks = [int(line.split()[0]) for line in out.splitlines()[2:]
          if line.split() and line.split()[0].isdigit() and len(line.split()) == 3]
    assert ks == [1, 2, 4, 8]
    assert "model >= random at every k in 1..10: yes" in out
    assert rows[0][:4] == ("t", 2, 0.5, 1.0)   # model@2, random@8
