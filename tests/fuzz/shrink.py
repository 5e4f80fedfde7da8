"""Shrinking: greedily simplify a failing case while its failure persists.

A candidate is kept when it fails with the same signature (:func:`.runner.signature`: the
class, and for a crash the phase and exception type) and the same likely fault
(:func:`.triage.tag`), so that a new fault does not shrink into a known one. Candidates,
biggest first: drop a schedule step; turn an intermediate stage into an input (or make a
producer the output), pruning what no longer matters; shrink a dim (to 1, half, minus one);
start a reduce axis at 0, drop ``where``/``init``; replace an expression node by one of its
operands; plain data instead of NaN. Each accepted candidate restarts the search, until
none is accepted or the budget (attempts, seconds) is spent.
"""

from __future__ import annotations

import copy
import time

from .runner import signature
from .triage import tag
from .spec import args_of, subtrees, tensor_reads
from .worker import Worker


def _base(name: str) -> str:
    return name.split(".")[0]


def _step_names(step: list) -> list:
    names = [step[1]]
    if step[0] == "compute_at":
        names.append(step[2])
    if step[0] == "cache_read":
        names += list(step[3])
    if step[0] == "create_group":
        names += list(step[2])
    if step[0] == "group_compute_at":
        names.append(step[2])
    return names


def prune(case: dict) -> dict:
    """Drop tensors the outputs do not read and steps naming stages that are gone."""
    prog = case["program"]
    by = {t["name"]: t for t in prog["tensors"]}
    keep, todo = set(), list(prog["outputs"])
    while todo:
        n = todo.pop()
        if n not in keep:
            keep.add(n)
            todo.extend(tensor_reads(by[n]))
    prog["tensors"] = [t for t in prog["tensors"] if t["name"] in keep]
    case["steps"] = [s for s in case["steps"]
                     if all(_base(n) in keep for n in _step_names(s))]
    return case


def _dtypes(prog: dict) -> dict:
    from polytile import te

    from .spec import ident, program_code

    ns = {"te": te}
    exec(program_code(prog), ns)  # noqa: S102
    return {t["name"]: (ns[ident(t["name"])].dtype, list(ns[ident(t["name"])].shape))
            for t in prog["tensors"]}


def candidates(case: dict):
    """Simpler variants of ``case``, biggest simplifications first."""
    prog = case["program"]
    for k in reversed(range(len(case["steps"]))):
        c = copy.deepcopy(case)
        del c["steps"][k]
        yield c
    try:
        types = _dtypes(prog)
    except Exception:  # noqa: BLE001
        types = {}
    computes = [t for t in prog["tensors"] if "body" in t or "binop" in t]
    for t in computes:
        if t["name"] in prog["outputs"]:
            continue
        if t["name"] in types:  # the stage becomes an input of the same shape and dtype
            c = copy.deepcopy(case)
            d, shape = types[t["name"]]
            shape = t.get("shape") or [str(n) for n in shape]  # keep it tied to the dims
            c["program"]["tensors"] = [
                x if x["name"] != t["name"] else {"name": x["name"], "dtype": d,
                                                  "shape": list(shape)}
                for x in c["program"]["tensors"]]
            yield prune(c)
    for o in prog["outputs"]:
        out = next(t for t in prog["tensors"] if t["name"] == o)
        for r in sorted(tensor_reads(out)):
            if any(t["name"] == r and ("body" in t or "binop" in t) for t in prog["tensors"]):
                c = copy.deepcopy(case)
                c["program"]["outputs"] = [r if x == o else x for x in prog["outputs"]]
                yield prune(c)
    for d, v in prog["dims"].items():
        for nv in dict.fromkeys((1, v // 2, v - 1)):
            if 1 <= nv < v:
                c = copy.deepcopy(case)
                c["program"]["dims"][d] = nv
                yield c
    for k, t in enumerate(prog["tensors"]):
        red = t.get("reduce")
        if not red:
            continue
        for j, (name, lo, hi) in enumerate(red["axes"]):
            if lo != "0":
                c = copy.deepcopy(case)
                c["program"]["tensors"][k]["reduce"]["axes"][j] = [name, "0", hi]
                yield c
        for part in ("where", "init"):
            if red.get(part) is not None:
                c = copy.deepcopy(case)
                c["program"]["tensors"][k]["reduce"][part] = None
                yield c
    for k, t in enumerate(prog["tensors"]):
        if "body" not in t:
            continue
        for path, node in subtrees(t["body"]):
            for child in _operands(node):
                c = copy.deepcopy(case)
                c["program"]["tensors"][k]["body"] = _replace(t["body"], path, child)
                yield prune(c)
    if case.get("data", {}).get("mode") != "uniform":
        c = copy.deepcopy(case)
        c["data"]["mode"] = "uniform"
        yield c


def _operands(node) -> list:
    tag = node[0]
    if tag in ("op", "cmp"):
        return [node[2], node[3]]
    if tag == "fn":
        return list(node[2:])
    if tag == "cast":
        return [node[2]]
    if tag == "sel":
        return [node[2], node[3]]
    if tag == "neg":
        return [node[1]]
    return []


def _replace(e, path, new):
    from .spec import replace_at

    return replace_at(e, path, new)


def size(case: dict) -> tuple:
    """How big a case is (smaller is simpler), for reports."""
    prog = case["program"]
    return (len(case["steps"]), len(prog["tensors"]), sum(prog["dims"].values()))


def shrink(case: dict, out: dict, timeout: float = 20.0, worker: Worker | None = None,
           max_tries: int = 400, max_seconds: float = 300.0, log=None) -> tuple:
    """The smallest case found that fails like ``case`` (outcome ``out``), with its
    outcome. ``worker``: a worker of the case's target to use (else one is started)."""
    sig = signature(out), tag(case, out)
    own = worker is None
    w = worker or Worker(case.get("target", "llvm"))
    if sig[0] == ("hang",):
        max_tries = min(max_tries, 40)
    t0 = time.perf_counter()
    tries = 0
    best, best_out = case, out
    try:
        progress = True
        while progress and tries < max_tries and time.perf_counter() - t0 < max_seconds:
            progress = False
            for cand in candidates(best):
                if tries >= max_tries or time.perf_counter() - t0 >= max_seconds:
                    break
                try:
                    args_of(cand["program"])
                except Exception:  # noqa: BLE001 - pruned into nonsense
                    continue
                tries += 1
                o = w.run(cand, timeout)
                if signature(o) == sig[0] and tag(cand, o) == sig[1]:
                    best, best_out = cand, o
                    progress = True
                    if log:
                        log(f"shrink: {size(best)} after {tries} tries")
                    break
    finally:
        if own:
            w.close()
    best_out = dict(best_out, shrink_tries=tries)
    return best, best_out
