"""Benchmark: fp32 SGEMM on the GPU, polytile's tutorial schedules vs cuBLAS (tensor cores off).

Prints one line per figure: TFLOP/s of cuBLAS (through torch, ``allow_tf32 = False``), of
each schedule of ``tutorials/04_cuda_gemm.py`` and its ratio to cuBLAS, all measured in
this run, plus the time to lower and compile (NVRTC) the best schedule.
Run on a machine with an NVIDIA GPU: ``python benchmarks/gpu_gemm.py [--n 4096]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib


def _tutorial():
    path = pathlib.Path(__file__).resolve().parent.parent / "tutorials" / "04_cuda_gemm.py"
    spec = importlib.util.spec_from_file_location("cuda_gemm_tutorial", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    args = ap.parse_args()
    _tutorial().main(["--n", str(args.n)])


if __name__ == "__main__":
    main()
