"""Replayed searches: tuners compared on a pool of configs measured once.

Measuring a candidate costs a build and a run (about 0.3 s on a CPU, more for a GPU
build), so comparing tuners over several seeds live is slow, and on a shared machine the
load changes between the runs being compared. Here a *pool* of configs drawn uniformly
from a template's space is measured once (:func:`measure_pool`, with their loop-IR
features) and saved as JSON; searches are then *replayed* against it
(:func:`replay_search`): a tuner restricted to the pool (``candidates``) proposes configs,
and a :class:`ReplayOracle` answers with their recorded cost instead of building and
running them. Every tuner sees the same costs, so curves of different tuners and seeds are
comparable and cost milliseconds per trial. A replay measures how well a tuner *ranks*
configs it has not measured, not how its own search explores the whole space (the model
tuner ranks the whole pool instead of evolving): figures from a replay must say so.

Pool file (JSON, one object): ``{"kind": "polytile-replay-pool", "schema": 1,
"workload": {...}, "target": str, "device": dict or null, "gpu_limits": dict or null,
"space_size": int, "seed": int, "load_avg": float, "candidates": int or null (how many
configs the pool was drawn from: the space's preferred ones; null: all of them),
"entries": [{"config": knob values, "costs": [seconds], "error": code or null,
"features": [floats] or null}]}``.
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
from dataclasses import dataclass, field

from polytile.errors import TuneError, format_error

from .measure import LocalMeasurer, MeasureOptions, MeasureResult
from .template import Workload, get_template

POOL_KIND = "polytile-replay-pool"
POOL_SCHEMA = 1


@dataclass
class Pool:
    """Configs of one workload measured once: ``entries`` as in the module docstring."""

    workload: dict
    target: str
    entries: list = field(default_factory=list)
    space_size: int = 0
    seed: int = 0
    device: dict | None = None
    gpu_limits: dict | None = None
    load_avg: float | None = None
    #: How many configs the pool was drawn from: the space's preferred configs (None:
    #: drawn from every config of the space)
    candidates: int | None = None

    def to_json(self) -> dict:
        return {"kind": POOL_KIND, "schema": POOL_SCHEMA, "workload": self.workload,
                "target": self.target, "device": self.device, "gpu_limits": self.gpu_limits,
                "space_size": self.space_size, "seed": self.seed, "load_avg": self.load_avg,
                "candidates": self.candidates, "entries": self.entries}

    def save(self, path: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.to_json(), f, separators=(",", ":"))
        os.replace(tmp, path)

    @staticmethod
    def load(path: str) -> Pool:
        """Read a pool file. TuneError if it is not one (or of a newer schema)."""
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as exc:
            raise TuneError(format_error("replay", f"cannot read pool {path!r}: {exc}"))
        if not isinstance(d, dict) or d.get("kind") != POOL_KIND:
            raise TuneError(format_error("replay", f"{path!r} is not a replay pool"))
        if d.get("schema", 0) > POOL_SCHEMA:
            raise TuneError(format_error("replay", f"{path!r} has pool schema "
                                         f"{d['schema']}", f"at most {POOL_SCHEMA}"))
        return Pool(d["workload"], d["target"], d["entries"], d.get("space_size", 0),
                    d.get("seed", 0), d.get("device"), d.get("gpu_limits"), d.get("load_avg"),
                    d.get("candidates"))

    @property
    def wl(self) -> Workload:
        return Workload.from_key(self.workload)

    def space(self):
        """The template's space for this pool's workload and target."""
        from .gpu_limits import use

        t = get_template(self.workload["template"])
        with use(self.gpu_limits):
            return t.space(tuple(self.workload["args"]), self.workload.get("dtype",
                                                                           "float32"),
                           self.target)

    def best_cost(self) -> float:
        ok = [_cost(e) for e in self.entries]
        return min(ok) if ok else math.inf


#: How :class:`ReplayOracle` summarises an entry's repeats (seconds per call each).
STATS = ("median", "min")


def _cost(e: dict, stat: str = "median") -> float:
    """An entry's cost: the median (what the tuner records) or the minimum of its repeats.

    The minimum suits a pool measured on a loaded machine: load only ever adds time, so
    the fastest of many short repeats is the one least disturbed, where the median of a
    pool measured at load 7-11 on 2 cores moved by 3x between the start and the end of the
    pool (the pool's best config, timed again 1 h later, was 3.5x slower, its neighbours
    not)."""
    if e.get("error") or not e.get("costs"):
        return math.inf
    c = sorted(e["costs"])
    if stat == "min":
        return c[0]
    return c[len(c) // 2] if len(c) % 2 else 0.5 * (c[len(c) // 2 - 1] + c[len(c) // 2])


#: Seconds between two saves of a pool being measured (a save rewrites the whole file).
SAVE_EVERY_S = 2.0


def measure_pool(template, args, dtype: str = "float32", target: str = "llvm",
                 n: int = 256, seed: int = 0, options: MeasureOptions | None = None,
                 path: str | None = None, progress=None, batch: int | None = None,
                 budget_s: float | None = None, full_space: bool = False,
                 on_entry=None) -> Pool:
    """Measure ``n`` configs drawn uniformly (without repetition, ``seed``) from the
    configs of ``template`` at ``args`` that the tuners search (the space's preferred
    configs where the template prefers a part of it, as :func:`.tune.tune` does: GPU
    GEMMs leave out duplicate kernels and known slow regions; every config with
    ``full_space``), with their loop-IR features.

    Saved to ``path`` as candidates finish (at most every :data:`SAVE_EVERY_S` seconds,
    and when the call ends, also by an exception such as ``KeyboardInterrupt`` or
    ``SystemExit``): an interrupted run keeps what it measured, and a later call with
    the same workload, target, seed and ``full_space`` continues it. The draw's order is
    random, so the first ``k`` entries of a pool cut short are a uniform sample too.
    ``budget_s``: seconds (from the call) after which no further batch but the first
    starts (the pool then holds fewer than ``n`` entries; a batch's built candidates are
    all run: runs take a fraction of a second on a GPU, and a candidate built but not run
    would be lost).
    ``batch``: candidates built in parallel before they are run (default: three per
    build worker, at least 16: a build that runs into its timeout holds one worker while
    the others go on; the first batch one per worker, and with ``budget_s`` none longer
    than the time left at the last batch's pace). On a GPU target the next batch builds
    while one runs (the GPU runner times on the device; the workers are not stopped).
    ``progress(done, n)`` after each batch; ``on_entry(k, n, entry, result)`` after each
    candidate (``k`` 1-based). Costs are full measurements (no cut-off by the best so
    far).

    Raises
    ------
    TuneError
        As :func:`.tune.tune` for an unknown template, bad arguments or target.
    """
    import time

    from .data import resolve
    from .tune import open_target, tunable_target

    t0 = time.perf_counter()
    t, wl = resolve(template, args, dtype)
    opt = options or MeasureOptions()
    batch = batch or max(16, 3 * opt.parallel)
    tgt, runner, device, limits, space = open_target(t, wl, tunable_target(target), opt)
    rng = random.Random(seed)
    size = len(space)
    searched = None if full_space else space.preferred()
    picks = rng.sample(range(size) if searched is None else searched,
                       min(n, size if searched is None else len(searched)))
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    pool = Pool(wl.key(), tgt, [], size, seed, device,
                limits.to_json() if limits is not None else None, load,
                None if searched is None else len(searched))
    done = 0
    if path and os.path.exists(path):  # continue a pool an interrupted run left
        try:
            old = Pool.load(path)
        except TuneError:
            old = None
        if (old is not None and old.workload == pool.workload and old.target == tgt
                and old.seed == seed and old.candidates == pool.candidates
                and old.entries):
            mine = [space.get(i).knob_values() for i in picks[:len(old.entries)]]
            if mine == [e["config"] for e in old.entries]:
                pool.entries = old.entries
                done = len(old.entries)
    if done >= len(picks):
        if runner is not None:
            runner.close()
        return pool
    deadline = None if budget_s is None else t0 + budget_s
    measurer = LocalMeasurer(wl, tgt, opt, runner=runner)
    saved = [time.perf_counter()]

    def save(force: bool = False) -> None:
        if path and (force or time.perf_counter() - saved[0] >= SAVE_EVERY_S):
            pool.save(path)
            saved[0] = time.perf_counter()

    per = None  # seconds per candidate in the last batch (builds and runs)
    k = done

    def next_items(now: float, first: bool = False) -> list:
        """The next batch: none past the budget (but the first, whatever the startup
        took), one build per worker while the pace is not known, then batches that fit
        the time left at the last batch's pace."""
        nonlocal k
        if deadline is not None and now >= deadline and not first:
            return []
        m = min(batch, max(1, opt.parallel)) if per is None else batch
        if deadline is not None and per is not None:
            m = min(batch, max(opt.parallel or 1, int((deadline - now) / per)))
        items = [(i, space.get(i).knob_values()) for i in picks[k:k + m]]
        k += len(items)
        return items

    def finished(knobs, r) -> None:
        e = {"config": knobs, "costs": [float(c) for c in r.costs], "error": r.error,
             "features": r.features}
        pool.entries.append(e)
        if on_entry is not None:
            on_entry(len(pool.entries), len(picks), e, r)
        save()

    try:
        measurer.start()
        now = time.perf_counter()
        items = next_items(now, first=True)
        built = measurer.build(items) if measurer.gpu else None
        while items:
            if not measurer.gpu:  # CPU runs stop the workers: no builds meanwhile
                measurer.measure(items, None, lambda j, r: finished(items[j][1], r))
                per = (time.perf_counter() - now) / len(items)
                now = time.perf_counter()
                items = next_items(now)
            else:
                # GPU: the next batch builds in the workers while this one runs in the
                # GPU runner (runs do not stop the workers; the runner times on device)
                nxt = next_items(time.perf_counter())
                got: dict = {}
                th = None
                if nxt:
                    th = threading.Thread(target=lambda: got.update(measurer.build(nxt)),
                                          daemon=True)
                    th.start()
                for cid, knobs in items:
                    r = built[cid]
                    measurer.run_built(cid, knobs, r, None)
                    finished(knobs, r)
                if th is not None:
                    th.join()
                per = (time.perf_counter() - now) / len(items)
                now = time.perf_counter()
                items, built = nxt, got
            if progress is not None:
                progress(len(pool.entries), len(picks))
    finally:
        save(force=True)
        measurer.close()
    return pool


class ReplayOracle:
    """Answers for configs of a pool: their recorded cost and features.

    The pool's configs map to indices of ``space`` (the pool's space unless given);
    configs that no longer fit the space are dropped (``dropped`` counts them). With
    ``refeaturize`` (default), features missing (but of failed entries) or of another
    length than this version's (:data:`.features.N_FEATURES`: a pool measured before the
    features changed) are computed again here (``refeaturized`` counts them); the costs
    are what a pool keeps. Without it the features are used as they are. ``stat``:
    ``"median"`` (default) or ``"min"`` of each entry's repeats (see :func:`_cost`).
    """

    def __init__(self, pool: Pool, space=None, refeaturize: bool = True,
                 stat: str = "median"):
        from .features import N_FEATURES

        if stat not in STATS:
            raise TuneError(format_error("replay", f"unknown cost statistic {stat!r}",
                                         f"expected one of {', '.join(STATS)}"))
        self.pool = pool
        self.stat = stat
        self.space = space if space is not None else pool.space()
        self.cost: dict[int, float] = {}
        self.features: dict[int, list | None] = {}
        self.dropped = 0
        self.refeaturized = 0
        stale = []
        for e in pool.entries:
            try:
                i = self.space.from_json(e["config"]).index
            except TuneError:
                self.dropped += 1
                continue
            self.cost[i] = _cost(e, stat)
            f = e.get("features")
            self.features[i] = f
            # an entry that failed without features (a build error or timeout: lowering
            # it again could take as long) keeps none: the model tuner never proposes it,
            # as in a live search whose feature lowering of it fails
            if refeaturize and (len(f) != N_FEATURES if f is not None
                                else not e.get("error")):
                stale.append((i, e["config"]))
        if stale:
            from .transfer import config_features

            w = pool.wl
            feats, _ = config_features(get_template(w.template), w.args, w.dtype,
                                       pool.target, [k for _, k in stale], pool.gpu_limits)
            for (i, _), f in zip(stale, feats):
                self.features[i] = f
            self.refeaturized = len(stale)

    @property
    def indices(self) -> list[int]:
        return sorted(self.cost)

    def best_cost(self) -> float:
        return min(self.cost.values(), default=math.inf)

    def measure(self, indices: list[int]) -> list[MeasureResult]:
        """Recorded results of ``indices``; TuneError for one outside the pool (a tuner
        that proposes it escaped its candidates)."""
        out = []
        for i in indices:
            if i not in self.cost:
                raise TuneError(format_error("replay", f"config {i} is not in the pool",
                                             "a replayed tuner proposes pool configs only"))
            c = self.cost[i]
            f = self.features.get(i)
            out.append(MeasureResult(costs=[c], features=f) if math.isfinite(c)
                       else MeasureResult(error="runtime_error", features=f))
        return out

    def featurize(self, indices) -> dict:
        """``{index: features or None}`` from the pool (None outside it)."""
        return {i: self.features.get(i) for i in indices}


def replay_search(oracle: ReplayOracle, tuner: str = "model", n_trial: int = 64,
                  seed: int = 0, batch: int = 8, transfer: list = ()) -> list[float]:
    """Replay one search of ``n_trial`` trials of ``tuner`` over ``oracle``'s pool; returns
    the best cost (seconds, ``inf`` before a success) after each trial. ``transfer``:
    oracles of *other* workloads whose measurements warm-start the model tuner (training
    data only, :meth:`.tuner.ModelTuner.add_transfer`)."""
    from .tuner import knob_features, make_tuner

    tn = make_tuner(tuner, oracle.space, oracle.featurize, seed, candidates=oracle.indices)
    for src in transfer:
        if src.pool.workload == oracle.pool.workload:
            raise TuneError(format_error("replay", "transfer from the same workload",
                                         "expected another shape"))
        idx = src.indices
        tn.add_transfer([src.features[i] for i in idx], [src.cost[i] for i in idx],
                        [knob_features(src.space, i) for i in idx])
    curve: list[float] = []
    best = math.inf
    while len(curve) < n_trial and tn.has_next():
        picks = tn.next_batch(min(batch, n_trial - len(curve)))
        if not picks:
            break
        results = oracle.measure(picks)
        for r in results:
            if r.ok:
                best = min(best, r.cost)
            curve.append(best)
        tn.update(picks, results)
    return curve


def trials_to_reach(curve: list[float], target_cost: float) -> int | None:
    """1-based trial at which ``curve`` (best cost so far) first reaches ``target_cost``
    (within 1e-12 relative), or None."""
    for k, c in enumerate(curve, start=1):
        if c <= target_cost * (1 + 1e-12):
            return k
    return None
