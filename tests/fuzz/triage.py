"""Name the known fault a failure most likely comes from, for reports (never for pass/fail).

The heuristics look at the case (not at the compiler): an rfactor of a reduction whose
reduce axis does not start at 0, a float16 sum, NaN data through max/min, nested unrolls,
a refusal message without the stage. ``untriaged`` failures are the new ones to read.
"""

from __future__ import annotations

from .spec import ident, program_code

#: tag -> one line about the fault (case files in /work/shared/cases name the IDs)
FAULTS = {
    "rfactor-offset": "rfactor of a reduction whose reduce axis does not start at 0 "
                      "(cases F1/R1)",
    "fp16-sum": "float16 sum not accumulated in float32 (case D4)",
    "nan-maxmin": "max/min do not propagate NaN (case D3)",
    "nested-unroll": "nested unrolls multiply build time (cases F3/B3)",
    "vague-refusal": "a refusal whose message names no stage (fuse of mixed axes, rfactor "
                     "factor_axis=-1: case R2)",
    "cuda-none-statement": "CUDA: lowering leaves a None statement (BuildError 'unknown "
                           "statement NoneType', case F2)",
    "gpu-attached-threads": "GPU: an attached stage with a loop bound to threadIdx computes "
                            "the wrong region (a 'local' cache filled by other threads, an "
                            "rfactor stage in an unbound root)",
}


def _ops(prog: dict) -> dict:
    from polytile import te

    ns = {"te": te}
    exec(program_code(prog), ns)  # noqa: S102
    return {t["name"]: ns[ident(t["name"])] for t in prog["tensors"]}


def tag(case: dict, out: dict) -> str:
    """The most likely fault tag of a failing ``case`` with outcome ``out``."""
    prog, steps = case["program"], case["steps"]
    cls = out["cls"]
    if cls == "vague":
        return "vague-refusal"
    if cls == "crash" and "unknown statement NoneType" in out.get("message", ""):
        return "cuda-none-statement"
    unrolled = [s for s in steps if s[0] == "unroll"]
    if cls == "hang" and len(unrolled) >= 2:
        return "nested-unroll"
    try:
        tensors = _ops(prog)
    except Exception:  # noqa: BLE001
        return "untriaged"
    rf = {s[1] for s in steps if s[0] == "rfactor"}
    for t in prog["tensors"]:
        red = t.get("reduce")
        if red and t["name"] in rf and any(lo != "0" for _, lo, _ in red["axes"]):
            return "rfactor-offset"
    if cls != "wrong":
        return "untriaged"
    attached = {s[1] for s in steps if s[0] == "compute_at"}
    if any(s[0] == "bind" and s[1] in attached and s[3].startswith("threadIdx")
           for s in steps):
        return "gpu-attached-threads"
    if case.get("data", {}).get("mode") == "nan" and _uses_maxmin(prog):
        return "nan-maxmin"
    for t in prog["tensors"]:
        red = t.get("reduce")
        if red and red["op"] == "sum" and tensors[t["name"]].dtype == "float16":
            return "fp16-sum"
    return "untriaged"


def _uses_maxmin(prog: dict) -> bool:
    text = program_code(prog)
    return "te.max(" in text or "te.min(" in text
