"""Generated code of representative schedules, pinned: compile-time work must not change it.

Each case lowers a schedule of the tutorials for ``cuda`` or ``llvm`` and prints what the
compiler receives: the lowered loop IR (``str`` of the flattened ``PrimFunc``) and the CUDA
C source or the LLVM IR as generated (before LLVM's optimisation). The sha256 of that
text, its line count and its counts of loads and stores are compared with
``golden/codegen.json``, recorded on main (first at 1eae569, last at fa6057a): the
optimisations of lowering (issue 11, fast builds) must leave every byte of it as it was.

A deliberate change of the generated code (a new pass, another printing) changes these
figures too: check the new code, then record it with
``python -m tests.targets.test_codegen_golden --update`` and say so in the commit.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import pathlib
import sys

import pytest

from polytile.backend import Target
from polytile.schedule.pipeline import lower

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden" / "codegen.json"


def _tutorial(name: str):
    spec = importlib.util.spec_from_file_location(f"golden_{name}",
                                                  ROOT / "tutorials" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cases() -> dict:
    """name -> (target, make), ``make()`` returning ``(schedule, args)``."""
    t2, t4 = _tutorial("02_cpu_matmul"), _tutorial("04_cuda_gemm")
    t7 = _tutorial("07_dynamic_shapes")
    from polytile.targets.cuda import tensor_core as tc

    return {
        "cuda_naive_131": ("cuda", lambda: t4.naive(131, 131, 131)),
        "cuda_shared_131": ("cuda", lambda: t4.shared_tiles(131, 131, 131)),
        "cuda_register_tiles_4096": ("cuda", lambda: t4.register_tiles(4096, 4096, 4096)),
        "cuda_register_tiles_131": ("cuda", lambda: t4.register_tiles(131, 131, 131)),
        "cuda_wmma_32x64x48": ("cuda", lambda: tc.wmma_gemm(
            32, 64, 48, acc="float32", block=(32, 32, 16), warp=(16, 32), isa="wmma")),
        "cuda_mma_2stage_32x64x48": ("cuda", lambda: tc.wmma_gemm(
            32, 64, 48, acc="float32", block=(32, 32, 16), warp=(16, 32), isa="mma",
            stages=2)),
        "llvm_blocked_131": ("llvm", lambda: t2.blocked(131)),
        "llvm_packed_parallel_131": ("llvm", lambda: t2.packed(131, threads=True)),
        "llvm_register_tiled_parallel_131": ("llvm", lambda: t2.register_tiled(
            131, threads=True)),
        "llvm_blas_like_131": ("llvm", lambda: t2.blas_like(131)),
        "llvm_rows_size_var": ("llvm", lambda: t7.rows_program()[:2]),
    }


def generated(target: str, make) -> str:
    """The lowered function and the code generated from it, as one text."""
    tgt = Target.parse(target)
    s, args = make()
    func = lower(s, args, target=tgt, stop_after=None, who="build")
    if tgt.is_gpu:
        from polytile.targets.c_printer import print_c_module
        from polytile.targets.cuda.runtime import CUDAModule

        code = print_c_module(func, CUDAModule.dialect, fast_math=tgt.fast_math,
                              limits=tgt.limits).source
    else:
        from polytile.targets.llvm.codegen import codegen_llvm

        code = str(codegen_llvm(func, tgt))
    return f"{func}\n=====\n{code}"


def figures(text: str) -> dict:
    """What is compared: the text's sha256 and a few counts that say how it differs."""
    ir = text.split("\n=====\n")[0]
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(),
            "lines": text.count("\n") + 1, "ir_stores": ir.count("] = "),
            "ir_loops": ir.count(" in ")}


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(_cases()))
def test_generated_code_unchanged(name, golden):
    target, make = _cases()[name]
    got = figures(generated(target, make))
    want = golden[name]
    assert got == want, (
        f"{name}: generated code changed ({want} -> {got}); if deliberate, record it "
        "with: python -m tests.targets.test_codegen_golden --update")


def test_golden_covers_every_case(golden):
    assert sorted(golden) == sorted(_cases())


def main(argv=None) -> None:
    """``--update``: record the figures of every case; else print them."""
    argv = sys.argv[1:] if argv is None else argv
    out = {name: figures(generated(t, make)) for name, (t, make) in sorted(_cases().items())}
    if "--update" in argv:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
    else:
        print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
