"""The node side of :mod:`.ray_measure`: what runs in Ray's worker processes.

Everything here takes and returns JSON strings (the same JSON as records), so nothing
but plain data crosses the cluster: :func:`probe_node` (a node's devices),
:func:`features_task` (loop-IR features of configs, a Ray task) and :class:`MeasureActor`
(a :class:`~.measure.LocalMeasurer` on one device of one node). The functions converting
results and comparisons to data and back are shared with the driver.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess

from .anchors import Comparison
from .measure import MeasureOptions, MeasureResult
from .template import Workload
from .timing import Timing


# ---------------------------------------------------------------------------- plain data


def result_to_data(r: MeasureResult) -> dict:
    """A MeasureResult as JSON-able data (the inverse of :func:`result_from_data`)."""
    return {"costs": [float(c) for c in r.costs], "error": r.error, "error_msg": r.error_msg,
            "build_s": r.build_s, "run_s": r.run_s,
            "features": None if r.features is None else [float(x) for x in r.features],
            "trace": r.trace, "timing": r.timing.to_json() if r.timing is not None else None}


def result_from_data(d: dict) -> MeasureResult:
    return MeasureResult(costs=list(d["costs"]), error=d["error"], error_msg=d["error_msg"],
                         build_s=d["build_s"], run_s=d["run_s"], features=d["features"],
                         trace=d["trace"],
                         timing=Timing.from_json(d["timing"]) if d["timing"] else None)


def comparison_to_data(c: Comparison) -> dict:
    return {"names": c.names, "anchors": c.anchors, "errors": {k: list(v) for k, v in
                                                               c.errors.items()},
            "order": c.order, "extended": c.extended,
            "rounds": [{k: t.to_json() for k, t in r.items()} for r in c.rounds]}


def comparison_from_data(d: dict) -> Comparison:
    return Comparison(d["names"], d["anchors"],
                      rounds=[{k: Timing.from_json(t) for k, t in r.items()}
                              for r in d["rounds"]],
                      errors={k: tuple(v) for k, v in d["errors"].items()},
                      order=d["order"], extended=d["extended"])




def _gpus() -> list:
    """``[{"name", "cc"}]`` of this machine's NVIDIA GPUs (empty without nvidia-smi)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        name, _, cc = line.rpartition(",")
        if name.strip():
            gpus.append({"name": name.strip(), "cc": cc.strip()})
    return gpus


def probe_node() -> str:
    """JSON of this node: id, host name, cores and devices (``[{"id", "target"}]``)."""
    import ray

    from .context import canonical_target

    devices = [{"id": "cpu", "kind": "cpu", "target": canonical_target("llvm")}]
    for k, g in enumerate(_gpus()):
        devices.append({"id": f"gpu{k}", "kind": "gpu", "name": g["name"],
                        "target": f"cuda -arch=sm_{g['cc'].replace('.', '')}"})
    return json.dumps({"node_id": ray.get_runtime_context().get_node_id(),
                       "host": socket.gethostname(), "cores": os.cpu_count(),
                       "devices": devices})


_TASK_WORKERS: dict = {}


def features_task(setup_json: str, items_json: str) -> str:
    """A Ray task: the loop-IR features of configs ``[[cid, knobs]]`` ->
    ``[[cid, features or null, code, msg]]`` (JSON). The template is loaded once per
    Ray worker process."""
    from .worker import _Worker

    w = _TASK_WORKERS.get(setup_json)
    if w is None:
        w = _TASK_WORKERS[setup_json] = _Worker(json.loads(setup_json))
    out = []
    for cid, knobs in json.loads(items_json):
        _, _, code, msg, feats = w.features(cid, knobs)
        out.append([cid, None if feats is None else [float(x) for x in feats], code, msg])
    return json.dumps(out)


class MeasureActor:
    """A measuring actor: a :class:`~.measure.LocalMeasurer` on one node's device, driven
    with JSON strings."""

    def __init__(self, setup_json: str):
        from .measure import LocalMeasurer

        s = json.loads(setup_json)
        self.m = LocalMeasurer(Workload.from_key(s["workload"]), s["target"],
                               MeasureOptions(**s["options"]))
        self.m.start()
        self.built: dict = {}

    def info(self) -> str:
        import ray

        return json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "node_id": ray.get_runtime_context().get_node_id()})

    def build(self, items_json: str) -> str:
        """Build ``[[cid, knobs]]``; keep the results; ``[[cid, result]]`` (JSON)."""
        items = [(cid, knobs) for cid, knobs in json.loads(items_json)]
        got = self.m.build(items, want_features=True)
        self.built.update(got)
        return json.dumps([[cid, result_to_data(got[cid])] for cid, _ in items])

    def run(self, cid: int, knobs_json: str, best: float | None) -> str:
        """Time built candidate ``cid`` (the cut-off from ``best`` seconds); its result."""
        res = self.built.pop(cid)
        self.m.run_built(cid, json.loads(knobs_json), res, best)
        return json.dumps(result_to_data(res))

    def drop(self) -> None:
        """Forget the candidates built and not run (their modules in the workers too)."""
        self.built.clear()
        self.m._drop_all()

    def compare(self, spec_json: str) -> str:
        s = json.loads(spec_json)
        cmp = self.m.compare([tuple(x) for x in s["items"]], tuple(s["anchors"]), s["rounds"])
        return json.dumps(comparison_to_data(cmp))

    def close(self) -> None:
        self.m.close()


def first_line(exc: BaseException) -> str:
    """What went wrong, in a line: the innermost ``...Error: message`` of a Ray error's
    remote traceback (a failed actor constructor), else the error's first line."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    causes = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception): ", ln)]
    return (causes[-1] if causes else lines[0] if lines else type(exc).__name__)[:300]
