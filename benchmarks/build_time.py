"""Benchmark: how long lowering and compiling one candidate takes, split by phase (issue 11).

Five kernels: the SGEMM of ``tutorials/04_cuda_gemm.py``'s default step (``TUNED``: 128 x
256 blocks, 16 x 8 outputs per thread, ``cuda``, the issue's GPU figure), its 128 x 128
vthread SGEMM (``pipelined_tiles``, ``cuda-vthread``) and register-tiled one
(``register_tiles``, ``cuda-reg``), the CPU matmul of ``tutorials/02_cpu_matmul.py``
with an 8x32 register tile (``register_tiled``, target ``llvm``: the issue's CPU figure,
about 0.25 s before the issue), and that tutorial's ``best`` (BLAS-like packing, parallel;
``llvm-best``, no goal: LLVM's O3 of its micro-kernel alone takes seconds). Each is built
``--repeat`` times after a warm-up build (imports, isl and LLVM initialised), and one line
per figure prints the median wall time of each group of phases, in seconds:

==============  ========================================================================
te_to_isl       lowering phases ``inputs`` .. ``kernels``: statements, domains,
                accesses, dependences and legality, GPU kernels
isl_ast         phase ``ast``: isl schedule trees, AST generation, conversion to loop IR
loop_passes     phases ``loop_passes`` .. ``backend_passes``: simplifier, unrolling,
                allocation, storage flattening, index narrowing
codegen         CUDA C printing (``print_c_module``) or LLVM IR emission (``codegen_llvm``
                and its text)
compiler        CUDA: NVRTC when ``cuda-python`` imports, else ``nvcc -cubin`` (a process:
                its start-up dominates), cache off; LLVM: parse, verify, O3 and MCJIT
                (the ``LLVMModule`` construction less the median ``codegen``)
lower           te_to_isl + isl_ast + loop_passes
lower_cpu       processor time of this process for ``lower`` alone (timed separately)
lower+codegen   what polytile itself spends before the compiler
total           everything, beside the goal of issue 11 (lower + NVRTC <= 0.3 s for the
                SGEMM, lower + LLVM build <= 0.1 s for the CPU matmul)
==============  ========================================================================

Each timed build starts cold (``cold()``: what lowering keeps from one build to the next,
the isl texts parsed, is forgotten first), as a new candidate's build would: the figures
are not those of the same schedule built again. ``--tune N`` prints, first, the median
processor time of lowering ``N`` distinct candidates of the ``matmul`` template for
``cuda`` one after the other (what a tuner's build worker does, the memo kept), and the
candidates lowered per second.

Figures depend on the machine's load: the load average is printed with them.
Run: ``python benchmarks/build_time.py [--repeat 5] [--only NAME] [--tune N] [--profile]``
(``--profile`` prints the cProfile top of the lowering of each kernel, by cumulative time).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import statistics
import time

from polytile.schedule import isl_util as iu
from polytile.schedule.pipeline import lower

GROUPS = {
    "te_to_isl": ("inputs", "cross_thread", "model", "legality", "tensorize", "kernels"),
    "isl_ast": ("ast",),
    "loop_passes": ("loop_passes", "kernel_launch", "allocation", "storage_flattening",
                    "backend_passes"),
}
GOALS = {"cuda": 0.3, "cuda-vthread": None, "cuda-reg": None, "llvm": 0.1,
         "llvm-best": None}


def _tutorial(name: str):
    path = pathlib.Path(__file__).resolve().parent.parent / "tutorials" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"tutorial_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def schedules(n_gpu: int = 4096, n_cpu: int = 1024) -> dict:
    """``name -> (target, title, make)``, ``make()`` returning a fresh ``(schedule, args)``."""
    t4, t2 = _tutorial("04_cuda_gemm"), _tutorial("02_cpu_matmul")
    return {"cuda": ("cuda", f"SGEMM TUNED 128x256 blocks, 16x8 per thread {n_gpu}^3 "
                             "(tutorial 04's default step)",
                     lambda: t4.pipelined_tiles(n_gpu, n_gpu, n_gpu, **t4.TUNED)),
            "cuda-vthread": ("cuda", f"SGEMM vthread 128x128 blocks, 8x8 per thread {n_gpu}^3 "
                                     "(tutorial 04's pipelined_tiles)",
                             lambda: t4.pipelined_tiles(n_gpu, n_gpu, n_gpu)),
            "cuda-reg": ("cuda", f"SGEMM register tiles {n_gpu}^3 (tutorial 04)",
                         lambda: t4.register_tiles(n_gpu, n_gpu, n_gpu)),
            "llvm": ("llvm", f"CPU matmul, 8x32 register tile {n_cpu}^3 (tutorial 02)",
                     lambda: t2.register_tiled(n_cpu)),
            "llvm-best": ("llvm", f"CPU matmul, BLAS-like best {n_cpu}^3 (tutorial 02)",
                          lambda: t2.best(n_cpu))}


def cuda_compiler() -> tuple:
    """``(name, compile(source))`` of the compiler measured: NVRTC if importable, else nvcc."""
    from polytile.targets.cuda import compile as cc

    chosen = cc.available_compiler()
    if chosen is None:
        return "none", None
    name = "NVRTC" if chosen == "nvrtc" else f"nvcc -cubin ({cc.nvcc_version()})"
    return name, lambda src: cc.compile_cuda(src, compiler=chosen, use_cache=False)


def cold() -> None:
    """Forget what lowering keeps from one build to the next (isl texts parsed), so that
    each timed build costs what a new candidate's does."""
    getattr(iu, "forget", lambda: None)()


def build_once(kind: str, make, compile_cuda=None) -> dict:
    """One build of ``make()`` for ``kind``: seconds per group (see the module docstring)."""
    from polytile.backend import Target

    tgt = Target.parse(kind)
    s, args = make()
    cold()
    phases: dict = {}
    func = lower(s, args, target=tgt, stop_after=None, who="build", timings=phases)
    out = {g: sum(phases.get(p, 0.0) for p in names) for g, names in GROUPS.items()}
    t0 = time.perf_counter()
    if kind == "cuda":
        from polytile.targets.c_printer import print_c_module
        from polytile.targets.cuda.runtime import CUDAModule

        src = print_c_module(func, CUDAModule.dialect, fast_math=tgt.fast_math,
                             limits=tgt.limits).source
        t1 = time.perf_counter()
        if compile_cuda is not None:
            compile_cuda(src)
        t2 = time.perf_counter()
        out.update(codegen=t1 - t0, compiler=t2 - t1)
    else:
        from polytile.targets.llvm.codegen import codegen_llvm
        from polytile.targets.llvm.runtime import LLVMModule

        str(codegen_llvm(func, tgt))
        t1 = time.perf_counter()
        LLVMModule(func, tgt)
        t2 = time.perf_counter()
        out.update(codegen=t1 - t0, module=t2 - t1)
    return out


def measure(kind: str, make, repeat: int, compile_cuda=None) -> dict:
    """Median seconds per group over ``repeat`` builds after one warm-up build; ``cpu``:
    the median processor time of this process for lowering alone (less
    sensitive to the machine's load than wall time; the compiler is not in it)."""
    build_once(kind, make, compile_cuda)
    runs, cpu = [], []
    for _ in range(repeat):
        s, args = make()
        cold()
        t0 = time.process_time()
        lower(s, args, target=kind, stop_after=None, who="build")
        cpu.append(time.process_time() - t0)
        runs.append(build_once(kind, make, compile_cuda))
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    if "module" in med:    # the LLVMModule re-emits the IR: the compiler is the rest
        med["compiler"] = max(med.pop("module") - med["codegen"], 0.0)
    med["lower"] = sum(med[g] for g in GROUPS)
    med["lower+codegen"] = med["lower"] + med["codegen"]
    med["total"] = med["lower+codegen"] + med["compiler"]
    med["lower_cpu"] = statistics.median(cpu)
    return med


def tuning_sequence(n: int, kind: str = "cuda", args=(1024, 1024, 1024)) -> tuple:
    """``(median, total, refused)``: processor seconds of lowering each of ``n`` candidates
    of the ``matmul`` float32 template for ``kind`` one after the other in this process,
    as a tuner's build worker does (what one lowering keeps for the next counts here), a
    fixed random sample: the median, the total (refused candidates' time included: the
    tuner spends it too), and how many were refused."""
    import random

    from polytile.autotune.template import get_template
    from polytile.backend import Target

    tgt = Target.parse(kind)
    t = get_template("matmul")
    sp = t.space(args, "float32", tgt)
    times: list = []
    refused = 0
    cold()
    for i in random.Random(7).sample(range(len(sp)), min(len(sp), n)):
        s, a = t.instantiate(sp.get(i), args, "float32", tgt)
        t0 = time.process_time()
        try:
            lower(s, a, target=tgt, stop_after=None, who="build")
        except Exception:  # noqa: BLE001 - a config the lowering refuses: its time counts
            refused += 1
        times.append(time.process_time() - t0)
    return statistics.median(times), sum(times), refused


def profile(make, kind: str, top: int = 30) -> None:
    """cProfile of three lowerings of ``make()``, the ``top`` functions by cumulative time."""
    import cProfile
    import pstats

    def run():
        for _ in range(3):
            s, args = make()
            lower(s, args, target=kind, stop_after=None, who="build")

    prof = cProfile.Profile()
    prof.runcall(run)
    pstats.Stats(prof).sort_stats("cumulative").print_stats(top)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed builds per kernel (default 5)")
    ap.add_argument("--only", choices=tuple(GOALS), help="one kernel only")
    ap.add_argument("--no-compile", action="store_true", help="skip the CUDA compiler")
    ap.add_argument("--profile", action="store_true", help="cProfile the lowering instead")
    ap.add_argument("--tune", type=int, default=0, metavar="N",
                    help="also lower N matmul template candidates for cuda in sequence")
    args = ap.parse_args(argv)
    if args.tune:
        med, total, refused = tuning_sequence(args.tune)
        print(f"matmul template 1024^3 float32 [cuda], {args.tune} candidates lowered in "
              f"sequence ({refused} refused), load {os.getloadavg()[0]:.1f}:\n  tune "
              f"lower_cpu/candidate {med:7.3f} s   total {total:.2f} s   candidates/s "
              f"(lowering) {args.tune / total:.2f}")
    for name, (kind, title, make) in schedules().items():
        if args.only and name != args.only:
            continue
        if args.profile:
            profile(make, kind)
            continue
        cname, compile_fn = ("(skipped)", None) if kind != "cuda" or args.no_compile \
            else cuda_compiler()
        if kind == "llvm":
            cname = "LLVM O3 + MCJIT (llvmlite)"
        med = measure(kind, make, args.repeat, compile_fn)
        load = os.getloadavg()[0]
        print(f"{title} [{kind}], median of {args.repeat} warm builds, load {load:.1f}:")
        goal = GOALS[name]
        for k in ("te_to_isl", "isl_ast", "loop_passes", "codegen", "compiler", "lower",
                  "lower_cpu", "lower+codegen", "total"):
            extra = f"   {cname}" if k == "compiler" else ""
            if k == "total" and goal is not None:
                extra = f"   goal <= {goal:.2f} s (lower + compiler)"
            print(f"  {name} {k:14s} {med[k]:7.3f} s{extra}")


if __name__ == "__main__":
    main()
