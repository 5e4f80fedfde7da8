"""Hashes of the generated code of many kernels, to show that a compile-time change of
lowering leaves every byte of it as it was (issue 11, fast builds).

Run from the root of a checkout, once on main and once on the branch, and compare::

    python tools/codegen_hashes.py main.json tut gold tpl cuda:33000:33200 llvm:33000:33150
    python tools/codegen_hashes.py branch.json tut gold tpl cuda:33000:33200 llvm:33000:33150
    python tools/codegen_hashes.py --compare main.json branch.json

Each case is lowered for its target and printed as ``tests.targets.test_codegen_golden``
prints it (the loop IR of the flattened function, then the CUDA C source or the LLVM IR as
generated); the JSON maps case name -> the first 16 hex digits of its sha256, or the
error (type and message) of a refused schedule. Groups of cases: ``tut`` the kernels of
``benchmarks/build_time.py`` (at 131 and at their sizes), ``gold`` those of
``test_codegen_golden``, ``tpl`` sampled configs of the GPU and CPU templates (row
templates, fp32 and fp16 GEMMs, tensor cores, conv2d), ``TARGET:A:B`` fuzz seeds A..B-1.
A case taking more than 300 s is recorded as ``TIMEOUT``. Nothing imports this module.
"""

from __future__ import annotations

import hashlib
import json
import random
import signal
import sys
import time
import warnings

TEMPLATES = [
    ("softmax", (7, 45), "float32", "cuda"), ("softmax", (33, 4093), "float16", "cuda"),
    ("layernorm", (7, 45), "float32", "cuda"), ("layernorm", (1024, 4096), "float16", "cuda"),
    ("rmsnorm", (3, 256), "float32", "cuda"), ("row_sum", (33, 4093), "float32", "cuda"),
    ("matmul", (131, 67, 45), "float32", "cuda"), ("matmul", (1024, 1024, 1024), "float32", "cuda"),
    ("matmul", (256, 256, 256), "float16", "cuda"),
    ("matmul", (1024, 1024, 1024), "float16", "cuda"),
    ("matmul", (512, 512, 512), "float16", "cuda -arch=sm_90a"),
    ("batch_matmul", (2, 64, 48, 40), "float32", "cuda"),
    ("conv2d_nchw", (1, 16, 14, 14, 32, 3, 3, 1, 1), "float32", "cuda"),
    ("conv2d_nhwc", (1, 14, 14, 16, 32, 3, 3, 1, 1), "float32", "cuda"),
    ("matmul", (131, 67, 45), "float32", "llvm"),
    ("conv2d_nchw", (1, 16, 14, 14, 32, 3, 3, 1, 1), "float32", "llvm"),
    ("softmax", (7, 45), "float32", "llvm"),
]


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout()


def _fuzz_make(case):
    from polytile import te
    from tests.fuzz.spec import args_of, ident, program_code, schedule_code, tensor_names

    prog = case["program"]
    ns = {"te": te}
    exec(program_code(prog), ns)
    names = [n for t in prog["tensors"] for n in tensor_names(t)]
    tensors = {n: ns[ident(n)] for n in names}
    args = [tensors[n] for n in args_of(prog)]
    exec(schedule_code(prog, case["steps"]), ns)
    return ns["s"], args


def cases(spec: str) -> list:
    """``(name, target, make)`` of one group (see the module docstring)."""
    items = []
    if spec == "tut":
        sys.path.insert(0, "benchmarks")
        import build_time as bt

        for k, (tgt, _, make) in bt.schedules(131, 131).items():
            items.append((f"bt-{k}-131", tgt, make))
        for k, (tgt, _, make) in bt.schedules().items():
            if k != "llvm-best":
                items.append((f"bt-{k}", tgt, make))
    elif spec == "gold":
        from tests.targets.test_codegen_golden import _cases

        items += [(f"gold-{k}", tgt, make) for k, (tgt, make) in _cases().items()]
    elif spec == "tpl":
        from polytile.autotune.template import get_template
        from polytile.backend import Target

        for tname, args, dtype, tgt in TEMPLATES:
            try:
                t = get_template(tname)
                sp = t.space(args, dtype, Target.parse(tgt))
            except Exception as ex:   # a template not registered for that target here
                print("skip", tname, args, dtype, tgt, type(ex).__name__, str(ex)[:100])
                continue
            picks = [sp.default_index()] + random.Random(len(sp)).sample(
                range(len(sp)), min(7, len(sp) - 1))
            for i in picks:
                def make(t=t, sp=sp, i=i, args=args, dtype=dtype, tgt=tgt):
                    return t.instantiate(sp.get(i), args, dtype, Target.parse(tgt))
                items.append((f"tpl-{tname}-{args}-{dtype}-{tgt}-{i}", tgt, make))
    else:
        from tests.fuzz.cases import generate

        tgt, lo, hi = spec.split(":")
        for seed in range(int(lo), int(hi)):
            case = generate(seed, tgt)
            items.append((f"{tgt}-{seed}", tgt, lambda c=case: _fuzz_make(c)))
    return items


def main(argv: list) -> None:
    if argv[:1] == ["--compare"]:
        a, b = (json.load(open(p)) for p in argv[1:3])
        diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        print(len(a), len(b), "cases, differ:", len(diff))
        for k in diff:
            print(k, a.get(k), b.get(k))
        return
    sys.path.insert(0, ".")
    warnings.simplefilter("ignore")
    from tests.targets.test_codegen_golden import generated

    signal.signal(signal.SIGALRM, _alarm)
    out, t0 = {}, time.time()
    for spec in argv[1:]:
        for key, tgt, make in cases(spec):
            signal.alarm(300)
            try:
                out[key] = hashlib.sha256(generated(tgt, make).encode()).hexdigest()[:16]
            except _Timeout:
                out[key] = "TIMEOUT"
            except Exception as ex:
                out[key] = f"ERR {type(ex).__name__} {str(ex)[:80]}"
            finally:
                signal.alarm(0)
    with open(argv[0], "w") as fh:
        json.dump(out, fh, indent=0, sort_keys=True)
    print(len(out), "cases", f"{time.time() - t0:.0f} s",
          sum(v.startswith("ERR") for v in out.values()), "refused",
          sum(v == "TIMEOUT" for v in out.values()), "timeouts")


if __name__ == "__main__":
    main(sys.argv[1:])
