"""Measurement on a Ray cluster: ``tune(..., ray="auto")``, ``polytile tune --ray auto``.

:class:`RayMeasurer` has the interface of :class:`~.measure.LocalMeasurer` (``start``,
``features``, ``measure``, ``compare``, ``close``, ``busy_s``), so the tuning loop of
:func:`~.tune.tune` is the same for both; only where candidates are built and timed
changes.

* **Discovery.** At start a probe task pinned to every live node (Ray's node-affinity
  scheduling) reports the node's devices as :func:`~.context.canonical_target` sees them
  there: ``llvm -mcpu=<its CPU>`` (and its GPUs with ``nvidia-smi``). Nothing is
  configured by hand, and the driver may lack the device it tunes for. A target that no
  node's device matches (same kind, the device's ``-mcpu``/``-arch`` among the target's
  options) is refused with the list of what the nodes have.
* **Measuring actors.** One actor per matching device, pinned to its node and named
  ``polytile-measure:<node>:<device>`` in the ``polytile`` namespace: a name is unique
  in a cluster, so two tuning runs never time on one device at once. An actor holds a
  :class:`~.measure.LocalMeasurer`, so a timing on a node keeps every guarantee of a
  local run: the candidate is compiled in a worker process of that node (JIT machine code
  never crosses processes), the node's other workers are stopped while it runs, crashes
  and hangs cost one worker, workers have an address-space limit.
* **Builds as Ray tasks.** Lowering candidates for the model tuner's features (the
  cascade lowers dozens per batch, :mod:`.tuner`) runs as Ray tasks on any node, between
  batches, when no actor is timing.
* **Plain data.** Every argument and result crossing the cluster is a JSON string: the
  workload key, the target, the options, knob values and results, the same JSON as
  records. A template travels by name (a ``file.py:function`` template must exist at the
  same path on every node); no callable is ever pickled to or from the network.
* **The driver writes the log**, as in a local run (``on_result`` of the tuning loop).
  When an actor dies (its process killed, its node gone) or stops answering, every trial
  it held is recorded failed (``runtime_error``, the reason in ``error_msg``) and queued
  once more on a live actor (a new one on the same node when the node is alive). An
  interrupted driver leaves a valid log that ``resume=True`` continues.
* **Throughput.** A batch is ``16`` candidates per measuring actor (the local batch per
  machine), spread over the actors round-robin; each actor builds its share in its worker
  processes, then times it one candidate at a time. :meth:`RayMeasurer.node_stats` gives
  trials/s per node for the summary.

What runs on the nodes (the probe, the feature task, the measuring actor) is in
:mod:`.ray_node`. Ray is imported only in these two modules and only when used:
``import polytile`` never imports it.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field

from polytile.errors import TuneError, format_error

from .anchors import Comparison
from .measure import MeasureOptions, MeasureResult
from .ray_node import (MeasureActor, comparison_from_data, features_task, first_line,
                       probe_node, result_from_data)
from .template import Workload

#: Ray namespace of the measuring actors (their names lock devices cluster-wide).
NAMESPACE = "polytile"
#: Candidates per measuring actor in a batch (a local run's batch on one machine).
BATCH_PER_ACTOR = 16
#: Configs lowered per feature task (amortises a task's ~1 ms of scheduling).
FEATURE_CHUNK = 4
_INSTALL_HINT = 'pip install "polytile[ray]"'


def import_ray():
    """The ``ray`` module.

    Raises
    ------
    TuneError
        When Ray is not installed, naming the extra that installs it.
    """
    try:
        import ray
    except ImportError:
        raise TuneError(format_error(
            "tune", "--ray needs the package 'ray', which is not installed",
            "expected Ray 2.9 or later", hint=_INSTALL_HINT)) from None
    return ray


def connect(address: str) -> bool:
    """Connect this process to Ray: ``"local"`` starts a Ray instance on this machine,
    ``"auto"`` joins the cluster this machine belongs to (``ray start --head`` or
    ``ray start --address=...`` ran here), ``"ray://host:port"`` connects through the
    Ray Client. A process already connected (``ray.init`` called before) keeps its
    connection whatever ``address`` says. Returns True when this call connected (the
    caller then disconnects).

    Raises
    ------
    TuneError
        For another address, no cluster to join, or Ray missing.
    """
    if address == "local":
        kw = {"address": "local", "include_dashboard": False}  # never an existing one
    elif address == "auto" or address.startswith("ray://"):
        kw = {"address": address}
    else:
        raise TuneError(format_error("tune", f"--ray {address!r}",
                                     "expected 'auto', 'local' or 'ray://host:port'"))
    ray = import_ray()
    if ray.is_initialized():
        return False
    try:
        ray.init(namespace=NAMESPACE, log_to_driver=False, **kw)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        hint = ("start one with `ray start --head` (then `ray start --address=<head>:6379` "
                "on the other machines), or use --ray local")
        if address.startswith("ray://"):
            hint += ("; a cluster with token authentication (the default of Ray 2.59 and "
                     "later) wants RAY_AUTH_MODE=token and its token (`ray get-auth-token` "
                     "on the head) in RAY_AUTH_TOKEN here; the Ray Client needs "
                     "pip install 'polytile[ray]' (ray[client])")
        raise TuneError(format_error(
            "tune", f"--ray {address}: cannot connect to a Ray cluster "
            f"({first_line(exc)})", "expected a running cluster", hint=hint)) from None
    return True


# ---------------------------------------------------------------------------- the driver


def device_matches(device_target: str, target: str) -> bool:
    """Whether a node's device (``llvm -mcpu=X``) can measure ``target``: same kind, and
    each option of the device among the target's."""
    d, t = device_target.split(), target.split()
    return bool(d) and bool(t) and d[0] == t[0] and set(d[1:]) <= set(t[1:])


@dataclass(eq=False)
class _Slot:
    """A measuring actor as the driver sees it, and what it holds."""

    handle: object
    node: dict
    device: dict
    name: str
    pid: int = 0
    dead: bool = False
    todo: list = field(default_factory=list)  # item positions to build
    to_run: list = field(default_factory=list)  # built, waiting to run
    ref: object = None  # the call in flight
    kind: str = ""
    held: list = field(default_factory=list)  # positions of the call in flight
    since: float = 0.0
    limit: float = 0.0
    trials: int = 0
    busy_s: float = 0.0
    served: int = 0  # trials final on this actor (not counting the ones lost with it)


class RayMeasurer:
    """Build and time candidates of one workload on a Ray cluster; see the module
    docstring. Same interface as :class:`~.measure.LocalMeasurer`.

    Parameters
    ----------
    address : str
        ``"auto"``, ``"local"`` or ``"ray://host:port"`` (:func:`connect`).
    """

    def __init__(self, workload: Workload, target: str, options: MeasureOptions | None = None,
                 address: str = "auto"):
        self.workload = workload
        self.target = target
        self.opt = options or MeasureOptions()
        self.address = address
        self.busy_s = 0.0
        self.slots: list[_Slot] = []
        self.nodes: list = []
        self.measure_s = 0.0  # wall seconds inside measure()
        self.startup_s = 0.0
        self._built: dict = {}  # item position -> its build's result, until it runs
        self._warming: list = []
        self._feature_task = None
        self._owned = False
        self._ray = None
        key = workload.key()
        key["template"] = _portable_spec(workload.template)
        self._setup = json.dumps({"workload": key, "target": target,
                                  "options": asdict(self.opt)})
        self._worker_setup = json.dumps({
            "template": key["template"], "args": list(workload.args),
            "dtype": workload.dtype, "target": target, "threads": self.opt.threads,
            "seed": self.opt.seed})

    @property
    def batch_size(self) -> int:
        """Candidates per batch: :data:`BATCH_PER_ACTOR` per measuring actor."""
        return BATCH_PER_ACTOR * max(1, sum(not s.dead for s in self.slots))

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Connect, discover the nodes, start one measuring actor per matching device and
        wait until each has started its worker processes.

        Raises
        ------
        TuneError
            Ray missing, no cluster, no node able to measure the target, or every
            matching device already measuring for another run.
        """
        if self.slots:
            return
        self._owned = connect(self.address)
        self._ray = ray = import_ray()
        self.nodes = self._discover()
        wanted = [(n, d) for n in self.nodes for d in n["devices"]
                  if device_matches(d["target"], self.target)]
        if not wanted:
            have = "; ".join(f"{n['host']} ({n['node_id'][:8]}): "
                             + ", ".join(repr(d["target"]) for d in n["devices"])
                             for n in self.nodes) or "no live node"
            raise TuneError(format_error(
                "tune", f"no node of the Ray cluster can measure '{self.target}'",
                "expected a node with that device (its -mcpu/-arch)", Nodes=have,
                hint="start `ray start --address=<head>:6379` on a machine with that "
                "device, or tune for a target a node has"))
        busy = []
        for n, d in wanted:
            try:
                self.slots.append(self._spawn(n, d))
            except ValueError:  # the name is taken: another run measures on that device
                busy.append(f"{n['host']}:{d['id']}")
        if not self.slots:
            raise TuneError(format_error(
                "tune", f"every device able to measure '{self.target}' is measuring for "
                f"another tuning run ({', '.join(busy)})", "expected a free device",
                hint="wait for the other run to end"))
        t0 = time.perf_counter()
        self._warm_feature_workers()
        for s in list(self.slots):
            try:
                s.pid = json.loads(ray.get(s.handle.info.remote(), timeout=180))["pid"]
            except Exception as exc:
                self._kill(s)
                s.dead = True
                why = first_line(exc)
                if all(x.dead for x in self.slots):
                    raise TuneError(format_error(
                        "tune", f"no measuring actor started: {why}",
                        "expected Ray workers able to load the template (a file template "
                        "at the same path on every node)")) from None
        self.startup_s = time.perf_counter() - t0

    def _warm_feature_workers(self) -> None:
        """One empty feature task per Ray CPU of the cluster, spread over the nodes, so
        that the Ray workers have loaded polytile and the template when the model tuner
        first asks for features (a second or two each otherwise, inside the search)."""
        ray = self._ray
        cpus = int(sum(n.get("Resources", {}).get("CPU", 0) for n in ray.nodes()
                       if n.get("Alive")))
        task = ray.remote(num_cpus=1, max_retries=0)(features_task).options(
            scheduling_strategy="SPREAD")
        self._warming = [task.remote(self._worker_setup, "[]") for _ in range(cpus)]

    def _discover(self) -> list:
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = ray.remote(num_cpus=0, max_retries=0)(probe_node)
        refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote() for n in ray.nodes() if n.get("Alive")]
        nodes = []
        for ref in refs:
            try:
                nodes.append(json.loads(ray.get(ref, timeout=120)))
            except Exception:  # a node that cannot run a probe cannot measure either
                continue
        return nodes

    def _spawn(self, node: dict, device: dict) -> _Slot:
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        name = f"polytile-measure:{node['node_id'][:16]}:{device['id']}"
        # A CPU actor claims no Ray CPU: the feature tasks need the node's CPUs between
        # batches (a 1-CPU node would starve them), and its own worker processes are
        # outside Ray's accounting anyway. Its name, not a resource, makes it the
        # device's only measuring actor.
        res = {"num_gpus": 1, "num_cpus": 0} if device["kind"] == "gpu" else {"num_cpus": 0}
        cls = ray.remote(max_restarts=0, max_task_retries=0, **res)(MeasureActor)
        for attempt in range(20):
            try:
                h = cls.options(name=name, namespace=NAMESPACE,
                                scheduling_strategy=NodeAffinitySchedulingStrategy(
                                    node["node_id"], soft=False)).remote(self._setup)
                return _Slot(h, node, device, name)
            except ValueError:
                # a dead actor's name is freed a moment after its death is noticed
                if attempt == 19:
                    raise
                time.sleep(0.25)
        raise AssertionError("unreachable")

    def _kill(self, s: _Slot) -> None:
        try:
            self._ray.kill(s.handle, no_restart=True)
        except Exception:
            pass

    def close(self) -> None:
        ray = self._ray
        if ray is None:
            return
        live = [s for s in self.slots if not s.dead]
        try:
            ray.get([s.handle.close.remote() for s in live], timeout=15)
        except Exception:
            pass
        for s in live:
            self._kill(s)
        self.slots = []
        if self._owned:
            ray.shutdown()
            self._owned = False

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ features
    def features(self, items: list) -> dict:
        """Loop-IR features of configs ``items`` [(cid, knobs)], lowered by Ray tasks on
        any node: cid -> (features or None, error code, message)."""
        ray = self._ray
        if self._feature_task is None:
            self._feature_task = ray.remote(num_cpus=1, max_retries=1)(features_task)
        task = self._feature_task
        chunks = [items[k:k + FEATURE_CHUNK] for k in range(0, len(items), FEATURE_CHUNK)]
        refs = {task.remote(self._worker_setup, json.dumps([[c, k] for c, k in ch])): ch
                for ch in chunks}
        out: dict = {}
        limit = time.time() + self.opt.build_timeout * FEATURE_CHUNK + 60
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1,
                                      timeout=max(0.0, limit - time.time()))
            if not ready:
                for ref in pending:
                    ray.cancel(ref, force=True)
                    for cid, _ in refs[ref]:
                        out[cid] = (None, "timeout", "features: no answer in time")
                break
            ref = ready[0]
            try:
                for cid, feats, code, msg in json.loads(ray.get(ref)):
                    out[cid] = (feats, code, msg)
            except Exception as exc:
                for cid, _ in refs[ref]:
                    out[cid] = (None, "build_error", "features: " + first_line(exc))
        return out

    # ------------------------------------------------------------------ measure
    def measure(self, items: list, best_cost: float | None = None,
                on_result=None, deadline: float | None = None) -> list:
        """Build and run candidates ``items`` [(cid, knobs)] over the measuring actors;
        calls ``on_result(k, result)`` as each is final (in completion order: a trial
        lost with its actor is reported failed, then once more when its second attempt
        is final). Past ``deadline`` (a ``time.perf_counter()`` value) no candidate
        starts running. Returns the final results, in the order of ``items``.

        Raises
        ------
        TuneError
            When every measuring actor is lost.
        """
        ray = self._ray
        t_start = time.perf_counter()
        final: dict = {}
        retried: set = set()
        best = [best_cost]

        def assign(ks: list) -> None:
            live = [s for s in self.slots if not s.dead]
            if not live:
                raise TuneError(format_error(
                    "tune", "every measuring actor of the Ray cluster was lost",
                    "expected a live node able to measure "
                    f"'{self.target}'", hint="the log holds every trial measured so far; "
                    "continue with --resume once nodes are back"))
            for j, k in enumerate(ks):
                live[j % len(live)].todo.append(k)

        def submit(s: _Slot) -> None:
            if s.dead or s.ref is not None:
                return
            if s.todo:
                ks, s.todo = s.todo, []
                s.ref = s.handle.build.remote(json.dumps([[items[k][0], items[k][1]]
                                                          for k in ks]))
                s.kind, s.held = "build", ks
                s.limit = (self.opt.build_timeout * math.ceil(len(ks) / self.opt.parallel)
                           + 60 + (0 if s.served else 120))  # a new actor starts first
            elif s.to_run and (deadline is None or time.perf_counter() < deadline):
                k = s.to_run.pop(0)
                cid, knobs = items[k]
                s.ref = s.handle.run.remote(cid, json.dumps(knobs), best[0])
                s.kind, s.held = "run", [k]
                s.limit = self.opt.run_timeout * 2 + self.opt.build_timeout + 30
            else:
                return
            s.since = time.perf_counter()

        def done(s: _Slot, k: int, r: MeasureResult, was_lost: bool = False) -> None:
            final[k] = r
            s.trials += 1
            s.served += not was_lost
            if r.ok and (best[0] is None or r.cost < best[0]):
                best[0] = r.cost
            if on_result is not None:
                on_result(k, r)

        def lost(s: _Slot, why: str) -> None:
            s.dead = True
            self._kill(s)
            ks = s.held + s.to_run + s.todo
            s.ref, s.held, s.to_run, s.todo = None, [], [], []
            again = []
            for k in ks:
                r = MeasureResult(error="runtime_error", error_msg=f"lost: {why}"
                                  + ("" if k in retried else "; queued again"))
                done(s, k, r, was_lost=True)
                if k not in retried:
                    retried.add(k)
                    again.append(k)
            self._replace(s)
            if again:
                assign(again)

        assign(list(range(len(items))))
        try:
            while True:
                for s in self.slots:
                    submit(s)
                flying = {s.ref: s for s in self.slots if s.ref is not None and not s.dead}
                if not flying:
                    break
                ready, _ = ray.wait(list(flying), num_returns=1, timeout=1.0)
                now = time.perf_counter()
                if not ready:
                    for s in flying.values():
                        if now - s.since > s.limit:
                            lost(s, f"measuring actor on {s.node['host']} gave no answer "
                                 f"within {s.limit:g} s")
                    continue
                s = flying[ready[0]]
                s.busy_s += now - s.since
                self.busy_s += now - s.since
                kind, held = s.kind, s.held
                s.ref, s.held = None, []
                try:
                    reply = json.loads(ray.get(ready[0]))
                except Exception as exc:  # the actor died (process killed, node gone)
                    s.held = held
                    lost(s, f"measuring actor on {s.node['host']} "
                         f"({s.node['node_id'][:8]}) died: {first_line(exc)}")
                    continue
                if kind == "build":
                    for k, (_, data) in zip(held, reply):
                        r = result_from_data(data)
                        if r.error is None:
                            s.to_run.append(k)
                            self._built[k] = r
                        else:
                            done(s, k, r)
                else:
                    r = result_from_data(reply)
                    prev = self._built.pop(held[0], None)
                    if prev is not None:  # the build's features, build_s and trace
                        r.features = r.features or prev.features
                        r.trace = r.trace or prev.trace
                        r.build_s = r.build_s or prev.build_s
                    done(s, held[0], r)
        finally:
            self._built.clear()
            for s in self.slots:
                if s.to_run and not s.dead:  # built, never run (deadline, Ctrl-C)
                    s.handle.drop.remote()
                s.todo, s.to_run = [], []
            self.measure_s += time.perf_counter() - t_start
        return [final[k] for k in range(len(items)) if k in final]

    def _replace(self, dead: _Slot) -> None:
        """A new actor for ``dead``'s device when its node is still alive and ``dead``
        measured something (an actor that dies before its first trial would again)."""
        ray = self._ray
        if not dead.served:
            return
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        if dead.node["node_id"] not in alive:
            return
        try:
            s = self._spawn(dead.node, dead.device)
        except Exception:
            return
        s.trials, s.busy_s = dead.trials, dead.busy_s
        dead.trials = dead.busy_s = 0
        self.slots.append(s)

    def compare(self, items: list, anchors=("numpy",), rounds: int = 4) -> Comparison:
        """:meth:`.measure.LocalMeasurer.compare` on the first live measuring actor."""
        s = next((x for x in self.slots if not x.dead), None)
        if s is None:
            cmp = Comparison([n for n, _ in items], list(anchors))
            for n, _ in items:
                cmp.errors[n] = ("runtime_error", "no measuring actor left")
            return cmp
        spec = json.dumps({"items": [[n, k] for n, k in items], "anchors": list(anchors),
                           "rounds": rounds})
        t0 = time.perf_counter()
        limit = (self.opt.build_timeout + self.opt.run_timeout * 4 * max(1, rounds) * 2
                 * (len(items) + len(anchors)) + 120)
        try:
            data = json.loads(self._ray.get(s.handle.compare.remote(spec), timeout=limit))
        except Exception as exc:  # the tuning result stands without its comparison
            cmp = Comparison([n for n, _ in items], list(anchors))
            for n, _ in items:
                cmp.errors[n] = ("runtime_error", f"lost: measuring actor on "
                                 f"{s.node['host']}: {first_line(exc)}")
            return cmp
        finally:
            self.busy_s += time.perf_counter() - t0
        return comparison_from_data(data)

    # ------------------------------------------------------------------ report
    def node_stats(self) -> list:
        """Per node: host, node id, devices measured on, trials, busy seconds, and
        trials/s over the wall time of the measurements."""
        per: dict = {}
        for s in self.slots:
            d = per.setdefault(s.node["node_id"], {"host": s.node["host"],
                                                   "node_id": s.node["node_id"],
                                                   "devices": [], "trials": 0, "busy_s": 0.0})
            if s.device["id"] not in d["devices"]:
                d["devices"].append(s.device["id"])
            d["trials"] += s.trials
            d["busy_s"] += s.busy_s
        for d in per.values():
            d["trials_per_s"] = d["trials"] / self.measure_s if self.measure_s else 0.0
        return list(per.values())


def _portable_spec(spec: str) -> str:
    """A ``file.py:function`` template spec with an absolute path (a Ray worker's
    working directory is not the driver's); a registered name as it is. Records keep the
    spec as the user gave it: only what the nodes load changes."""
    path, sep, fn = spec.rpartition(":")
    if sep and os.path.isfile(path):
        return os.path.abspath(path) + ":" + fn
    return spec
