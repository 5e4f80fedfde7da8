"""The tuning loop: propose, build, run, record, learn, until a stop condition.

``tune("matmul")`` searches the template's space for the default workload on the host CPU
(``target="cuda"``: on the GPU, through the GPU runner) and returns a :class:`TuneResult`;
every trial is appended to the records file as soon as it is measured (so an interrupted
run leaves a valid log, which ``resume=True`` continues without re-measuring). Stop conditions: ``n_trial`` trials in total (resumed ones count),
``early_stopping`` trials without improvement, ``timeout_total`` seconds, an exhausted
space, or Ctrl-C (``TuneResult.interrupted``). With ``anchors`` the run ends with a
comparison: the fastest configs of the search and the default one are re-measured
alternately with the anchors (:func:`finalists`), and the fastest of that re-measure is
the result's best, so that the noise of one measurement per trial (clocks still warming
up for the first, the default) never ranks a slower config above the default.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from polytile.backend import Target, backends
from polytile.errors import TuneError, format_error

from .anchors import Comparison
from .data import resolve
from .device import record_fields, same_class
from .dispatch import canonical_target
from .gpu_limits import use as gpu_limits_use
from .measure import LocalMeasurer, MeasureOptions, MeasureResult
from .records import Record, RecordWriter, read_records, target_matches, workload_matches
from .template import Workload, importing_template_file, require_importable
from .tuner import make_tuner

#: Trials of ``polytile tune`` without ``--trials``: about 25 s for the default matmul on an
#: idle 2-core machine, under two minutes when other processes share the cores.
DEFAULT_TRIALS = 96
#: Wall-clock budget (seconds) of the search of ``polytile tune`` when neither ``--trials``
#: nor ``--timeout-total`` is given, so that the command ends within about two minutes: the
#: final comparison with numpy comes after it (5 to 25 s on a loaded 2-core machine for
#: the default matmul).
DEFAULT_BUDGET_S = 95.0
#: Configs of the search re-measured in the final comparison, besides the default: on an
#: H200 the default tensor-core GEMM measured 682.8 and 657.0 TFLOP/s as the first trial
#: of two runs (704.7 timed alone), so one measurement per trial cannot rank configs
#: 2-4 % apart.
FINAL_TOP = 3
#: A finalist replaces the default config only when its re-measured median is faster by
#: more than this fraction: configs that equal the default within the measurement's
#: resolution (an H200's 128x256 GEMM in groups of 8 or 16 tile rows: 611.9 and 610.2
#: TFLOP/s, interleaved) never make the tuned figure a noise sample below it.
FINAL_MARGIN = 0.01
#: Seconds of untimed turns before the final comparison on a GPU (its clocks, boosted
#: while it idled during the builds, settle): :meth:`.measure.LocalMeasurer.compare`.
FINAL_WARMUP_S = 1.0


@dataclass
class TuneResult:
    """Outcome of :func:`tune`. Times in seconds, throughput in GFLOP/s."""

    workload: Workload
    target: str
    tuner: str
    space_size: int
    log_file: str | None
    records: list = field(default_factory=list)   # this run's trials (resumed ones first)
    best: Record | None = None
    default: Record | None = None
    flops: float | None = None
    wall_s: float = 0.0
    busy_s: float = 0.0
    startup_s: float = 0.0
    resumed: int = 0
    interrupted: bool = False
    stop_reason: str = ""
    comparison: Comparison | None = None  # best/default vs anchors, timed alternately
    threads: int = 0
    device: dict | None = None  # GPU targets: the device the trials ran on
    runner_restarts: int = 0    # GPU targets: times the GPU runner was restarted
    nodes: list | None = None  # with ray: per node, trials and trials/s (RayMeasurer)
    transferred: int = 0        # records of other shapes the model was trained on
    transfer_shapes: int = 0    # how many other shapes they came from
    #: with anchors: the configs re-measured after the search, (record, Timing or None),
    #: the fastest of that re-measure being ``best`` (:func:`finalists`)
    finalists: list = field(default_factory=list)

    def noise(self) -> dict:
        """How noisy this run's measurements were: trials measured, how many were
        re-measured (spread past the threshold), median and largest spread (IQR / median)
        of the trials that ran fully."""
        sp = sorted(r.spread_value for r in self.records if r.ok and len(r.costs) > 1)
        return {"trials": len(sp), "remeasured": sum(r.remeasured for r in self.records),
                "median_spread": sp[len(sp) // 2] if sp else 0.0,
                "max_spread": sp[-1] if sp else 0.0}

    @property
    def n_trials(self) -> int:
        return len(self.records)

    @property
    def n_failed(self) -> int:
        return sum(not r.ok for r in self.records)

    def failures(self) -> dict:
        out: dict = {}
        for r in self.records:
            if not r.ok:
                out[r.error or "runtime_error"] = out.get(r.error or "runtime_error", 0) + 1
        return out

    def gflops(self, rec: Record | None = None) -> float | None:
        rec = rec or self.best
        if rec is None or not rec.ok or not self.flops:
            return None
        return self.flops / rec.cost / 1e9

    def curve(self) -> list[float]:
        """Best-so-far GFLOP/s (or 1/seconds without a flop count) after each trial."""
        out, best = [], math.inf
        for r in self.records:
            if r.ok:
                best = min(best, r.cost)
            if math.isinf(best):
                out.append(0.0)
            else:
                out.append(self.flops / best / 1e9 if self.flops else 1.0 / best)
        return out

    @property
    def overhead_s(self) -> float:
        """Seconds of the loop spent neither building nor running candidates nor starting
        the worker processes: proposing (feature extraction included), training, records."""
        return max(0.0, self.wall_s - self.busy_s - self.startup_s)


def tunable_target(target: str) -> str:
    """The canonical form of ``target`` if its backend can time candidates here
    (``Backend.tunable``: ``llvm``).

    Raises
    ------
    TuneError
        For other backends; TargetError for an unparsable target string.
    """
    tgt = canonical_target(target)
    if not Target.parse(tgt).backend.tunable:
        kinds = " or ".join(repr(b.kind) for b in backends(lambda b: b.tunable))
        raise TuneError(format_error("tune", f"target '{tgt}' cannot be tuned yet",
                                     f"expected an {kinds} target (candidates are timed on "
                                     "this CPU or its NVIDIA GPU)"))
    return tgt


def _with_arch(target: str, arch: str) -> str:
    """``target`` with ``-arch=arch`` unless it names one (GPU records say which)."""
    words = target.split()
    if any(w.startswith("-arch=") for w in words[1:]):
        return target
    return " ".join([words[0], f"-arch={arch}", *words[1:]])


def measure_numpy_isolated(template: str, args=None, dtype: str = "float32",
                           min_time: float = 0.3, threads: int | None = None) -> dict | None:
    """:func:`measure_numpy` in a fresh process: ``{"median": s, "min": s}`` or None
    without a reference. BLAS libraries keep their threads spinning for a while after a
    call, which slows OpenMP kernels timed in the same process right after (on a 2-core
    machine, by up to 2x); a process of its own keeps the two apart."""
    import json
    import subprocess
    import sys

    t, wl = resolve(template, args, dtype)
    if t.reference is None:
        return None
    spec = json.dumps({"template": t.name, "args": list(wl.args), "dtype": dtype,
                       "min_time": min_time, "threads": threads})
    p = subprocess.run([sys.executable, "-m", "polytile.autotune.worker", "numpy", spec],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise TuneError(format_error("numpy", f"timing the numpy reference of {wl} failed: "
                                     f"{(p.stderr.strip().splitlines() or ['?'])[-1]}"))
    return json.loads(p.stdout.strip().splitlines()[-1])


def _record(wl: Workload, target: str, cfg, res: MeasureResult, tuner: str,
            threads: int, device: dict | None = None) -> Record:
    return Record(workload=wl.key(), target=target, config=cfg.knob_values(),
                  config_index=cfg.index, trace=res.trace, costs=list(res.costs),
                  error=res.error, error_msg=res.error_msg, timestamp=time.time(),
                  wall_s=res.build_s + res.run_s, build_s=res.build_s, tuner=tuner,
                  threads=threads, spread=res.spread, remeasured=res.remeasured,
                  device=device)


def finalists(records: list, default: Record | None, top: int) -> list:
    """The records re-measured after the search: the ``top`` fastest successful ones of
    distinct configs (by their searched cost), then the default config's record where it
    ran and is not among them (a search never ends below its baseline through the noise
    of one measurement)."""
    out: list = []
    seen: set = set()
    for r in sorted((r for r in records if r.ok), key=lambda r: r.cost):
        key = json.dumps(r.config, sort_keys=True)
        if key not in seen and len(out) < max(1, top):
            seen.add(key)
            out.append(r)
    if (default is not None and default.ok
            and json.dumps(default.config, sort_keys=True) not in seen):
        out.append(default)
    return out


def _compare_best(res: TuneResult, measurer: LocalMeasurer, anchors, rounds: int,
                  writer: RecordWriter | None, top: int = 1) -> None:
    """Re-measure the :func:`finalists` (``top`` fastest configs of the search and the
    default) alternately with ``anchors`` (on a GPU after :data:`FINAL_WARMUP_S` of
    untimed turns) and make the fastest of that re-measure ``res.best``, the default
    unless one is faster by more than :data:`FINAL_MARGIN` (the search's ranking came
    from one measurement each, minutes apart: clocks warming up, other work on the
    machine); ``res.comparison`` names it
    ``"best"`` (and the default config ``"default"``), ``res.finalists`` keeps every
    finalist's re-measured median. Writes the summary record."""
    fin = finalists(res.records, res.default, top)
    is_default = [res.default is not None and r.config == res.default.config for r in fin]
    names = ["default" if d else f"top{k}" for k, (r, d) in enumerate(zip(fin, is_default))]
    warm = {"warmup_s": FINAL_WARMUP_S} if getattr(measurer, "gpu", False) else {}
    cmp = measurer.compare([(n, r.config) for n, r in zip(names, fin)], anchors, rounds,
                           **warm)
    timed = [(cmp.timing(n).median, k) for k, n in enumerate(names)
             if cmp.timing(n) is not None]
    win = min(timed)[1] if timed else 0
    dk = next((k for k, d in enumerate(is_default) if d), None)
    base = cmp.timing(names[dk]) if dk is not None else None
    if base is not None and timed and min(timed)[0] > base.median * (1 - FINAL_MARGIN):
        win = dk    # no finalist is clearly faster than the default: keep the default
    res.finalists = [(r, cmp.timing(n)) for n, r in zip(names, fin)]
    res.best = fin[win]
    keep = {"best": names[win]}
    dflt = next((n for n, d in zip(names, is_default) if d), None)
    if dflt is not None and dflt != names[win]:
        keep["default"] = dflt
    res.comparison = cmp = cmp.renamed(keep)
    t = cmp.timing("best")
    if writer is None or t is None:
        return
    summary = cmp.to_json()
    summary["search"] = res.noise()
    summary["best_line_cost"] = res.best.cost
    summary["finalists"] = [{"config": r.config, "searched": r.cost,
                             "remeasured": tm.median if tm is not None else None}
                            for r, tm in res.finalists]
    try:
        summary["load_avg"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    writer.write(Record(workload=res.workload.key(), target=res.target,
                        config=res.best.config, config_index=res.best.config_index,
                        costs=list(t.costs), timestamp=time.time(), tuner=res.tuner,
                        threads=res.threads, spread=t.spread, remeasured=t.remeasured,
                        phase="summary", summary=summary, device=res.device))


def _refuse_resume(log_file: str, records: list, wl: Workload, target: str) -> None:
    held = []
    for r in records:
        item = f"{r.workload_str()} on '{r.target}'"
        if item not in held:
            held.append(item)
    more = f" and {len(held) - 3} more" if len(held) > 3 else ""
    raise TuneError(format_error(
        "tune", f"resume: {log_file!r} holds no record of {wl} on '{target}' (it holds "
        f"{'; '.join(held[:3])}{more})", "expected the log of an earlier run of the same "
        "workload and target", hint="check --args/--dtype/--target, or drop --resume to "
        "start a new run in this file (its records are kept)"))


def open_target(t, wl: Workload, tgt: str, opt: MeasureOptions, gpu_runner: bool = True):
    """``(target, runner, device, limits, space)`` for tuning ``wl`` of template ``t`` on
    canonical target ``tgt``: on GPU targets (with ``gpu_runner``) a started GPU runner
    process (it owns the CUDA context: this process never touches the device; its
    description gives the records' ``-arch`` and device and bounds the template's space),
    else None for the runner, device and limits."""
    t.func_for(tgt)  # a template without a schedule for this target kind: say so first
    runner, device, limits = None, None, None
    if Target.parse(tgt).backend.is_gpu and gpu_runner:
        from . import gpu_limits
        from .gpu_runner import GPURunner

        runner = GPURunner({"template": t.name, "args": list(wl.args), "dtype": wl.dtype,
                            "seed": opt.seed}, opt.runner_command)
        info = runner.start()
        tgt = _with_arch(tgt, info["arch"])
        device = record_fields(info)
        limits = gpu_limits.from_device(info)
    try:
        with gpu_limits_use(limits):
            space = t.space(wl.args, wl.dtype, tgt)
    except BaseException:
        if runner is not None:
            runner.close()
        raise
    return tgt, runner, device, limits, space


def _transfer_records(paths, wl: Workload, tgt: str, device) -> list:
    """Records of ``paths`` (``--transfer`` files); TuneError when a file holds none of
    ``wl``'s template, dtype and ``tgt`` (device class included)."""
    from .transfer import transfer_sources

    if not paths:
        return []
    out = []
    for path in [paths] if isinstance(paths, str) else list(paths):
        if not os.path.exists(path):
            raise TuneError(format_error("tune", f"transfer: records file {path!r} does not "
                                         "exist"))
        recs = read_records(path)
        same = [r for r in recs if workload_matches(r, wl.key())
                and target_matches(r.target, tgt) and same_class(r.device, device)]
        if not same and not transfer_sources(recs, wl, tgt,
                                             lambda d: same_class(d, device)):
            raise TuneError(format_error(
                "tune", f"transfer: {path!r} holds no record of {wl.template} "
                f"{wl.dtype} on '{tgt}'", "expected records of the same template, dtype "
                "and target (another shape)"))
        out += recs
    return out


def _warm_start(tn, res: TuneResult, t, wl: Workload, tgt: str, limits, records: list,
                device) -> None:
    """Train ``tn`` on ``records`` of other shapes (:mod:`.transfer`)."""
    from .transfer import source_data, transfer_sources

    srcs = transfer_sources(records, wl, tgt, lambda d: same_class(d, device))
    for args, recs in srcs.items():
        feats, costs, kfs = source_data(t, args, wl.dtype, tgt, recs, limits)
        n = tn.add_transfer(feats, costs, kfs)
        if n:
            res.transferred += n
            res.transfer_shapes += 1


def tune(template, args=None, dtype: str = "float32", target: str = "llvm",
         tuner: str = "model", n_trial: int = DEFAULT_TRIALS,
         measure_option: MeasureOptions | None = None, log_file: str | None = None,
         resume: bool = False, early_stopping: int | None = None,
         timeout_total: float | None = None, seed: int | None = 0,
         include_default: bool = True, batch_size: int | None = None,
         transfer: bool = True, callbacks: list[Callable] = (),
         anchors: tuple | None = None, compare_rounds: int = 4,
         ray: str | None = None, transfer_from=None, full_space: bool = False,
         final_top: int = FINAL_TOP) -> TuneResult:
    """Tune ``template`` at ``args``; see the module docstring.

    Parameters
    ----------
    template : str or Template
        A registered name (``"matmul"``) or ``"path/to/file.py:function"``.
    args : sequence, optional
        Workload arguments (default: the template's ``default_args``).
    target : str
        ``"llvm"`` (this CPU) or ``"cuda"`` (built here, timed on the NVIDIA GPU by the GPU
        runner process, :mod:`.gpu_runner`; the records get ``-arch`` and the device).
    tuner : {"model", "random", "grid"}
    n_trial : int
        Trials in total, counting resumed ones.
    log_file : str, optional
        JSON Lines records file to append to (None: keep records in memory only).
    resume : bool
        Continue from the records of ``log_file`` for this workload and target: they
        count as trials and are not measured again.
    include_default : bool
        Measure the template's default config first (a baseline the result never falls
        below).
    transfer : bool
        Train the model tuner on records of the same workload and target found in
        ``log_file`` or ``transfer_from`` (without ``resume``: they are not measured
        again, nor counted as trials) and on records of the same template, dtype and
        target at *other* arguments found there (a nearby shape warm-starts the model,
        :mod:`.transfer`; those are training data only, never measured, counted or taken
        as the best).
    transfer_from : str or list of str, optional
        Records files to warm-start the model tuner from (``--transfer``).
    full_space : bool
        Search every config of the space, also where the template prefers a part of it
        (:meth:`.space.ConfigSpace.prefer`: duplicates and known slow regions left out;
        the search then ends when every preferred config was measured).
    callbacks : list of callable
        Each called as ``cb(result, record)`` after every trial.
    anchors : tuple of str, optional
        With a tuple (``("numpy",)``, or empty for none), after the search the best and
        default configs are timed ``compare_rounds`` times alternately with these anchors
        (:meth:`.measure.LocalMeasurer.compare`; ``TuneResult.comparison``) and a
        ``"summary"`` record ends the log. None (default): no final comparison.
    final_top : int
        With ``anchors``: the ``final_top`` fastest configs of the search and the default
        config are timed in that comparison (:func:`finalists`), and the fastest there
        becomes ``TuneResult.best`` (the default unless one is faster by more than
        :data:`FINAL_MARGIN`; 1: the search's best and the default alone).
    ray : str, optional
        Build and measure on a Ray cluster (:mod:`.ray_measure`): ``"auto"`` (the cluster
        this machine joined with ``ray start``), ``"local"`` (a Ray instance started
        here) or ``"ray://host:port"``; in a process that called ``ray.init`` already,
        that connection. Records, resume and stop conditions are those of a local run;
        ``TuneResult.nodes`` gives trials/s per node. ``batch_size`` defaults to 16 per
        measuring actor.

    Raises
    ------
    TuneError
        For an unknown template or tuner, bad arguments, a workload whose template
        fails to build its space, a ``log_file`` that is not a records file, or ``resume``
        onto a log without records of this workload and target, a ``transfer_from``
        file without records of this template, dtype and target. With ``ray``: Ray not
        installed (naming the extra ``polytile[ray]``), no cluster, or no node able to
        measure ``target``.
    """
    t0 = time.perf_counter()
    importing = importing_template_file()
    if importing is not None:
        raise TuneError(format_error(
            "tune", f"called while {importing!r} is imported for its templates (a worker "
            "process, or get_template of a path, runs the file's top-level code)",
            "start the tuning under `if __name__ == \"__main__\":` in that file"))
    t, wl = resolve(template, args, dtype)
    require_importable(t.name)
    tgt = tunable_target(target)
    opt = measure_option or MeasureOptions()
    if n_trial < 1:
        raise TuneError(format_error("tune", f"n_trial={n_trial}", "expected at least 1"))
    tgt, runner, device, limits, space = open_target(t, wl, tgt, opt, gpu_runner=not ray)
    res = TuneResult(wl, tgt, tuner, len(space), log_file,
                     flops=t.flops(wl.args) or space.flop or None,
                     threads=opt.threads, device=device)
    history = []
    everything: list = []
    if log_file and os.path.exists(log_file):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            everything = read_records(log_file)
            # GPU: only trials of this device class resume or teach the model
            history = [r for r in everything
                       if workload_matches(r, wl.key()) and target_matches(r.target, tgt)
                       and same_class(r.device, device)]
        for w in caught:
            warnings.warn(w.message, w.category, stacklevel=2)
        if resume and everything and not history:
            _refuse_resume(log_file, everything, wl, tgt)
    others = _transfer_records(transfer_from, wl, tgt, device) if transfer else []
    if tuner == "model":
        history += [r for r in others if workload_matches(r, wl.key())
                    and target_matches(r.target, tgt) and same_class(r.device, device)]
    try:
        writer = RecordWriter(log_file) if log_file else None
        if ray:
            from .ray_measure import RayMeasurer

            measurer = RayMeasurer(wl, tgt, opt, address=ray)
        else:
            measurer = LocalMeasurer(wl, tgt, opt, runner=runner)
    except BaseException:
        if runner is not None:
            runner.close()
        raise
    try:
        t_start = time.perf_counter()
        measurer.start()
        res.startup_s = time.perf_counter() - t_start
        batch = batch_size or getattr(measurer, "batch_size", 16)

        def featurize(indices):
            got = measurer.features([(i, space.get(i).knob_values()) for i in indices])
            return {i: got[i][0] for i in indices}

        tn = make_tuner(tuner, space, featurize, seed,
                        candidates=None if full_space else space.preferred())
        best_trial = 0
        if history and (resume or (transfer and tuner == "model")):
            idx, results = [], []
            for r in history:
                try:
                    cfg = space.from_json(r.config)
                except TuneError:
                    continue
                idx.append(cfg.index)
                results.append(MeasureResult(costs=r.costs, error=r.error))
                if resume:
                    res.records.append(r)
                    if r.ok and (res.best is None or r.cost < res.best.cost):
                        res.best, best_trial = r, len(res.records)
            tn.load_history(idx, results)
            res.resumed = len(res.records) if resume else 0
        if transfer and tuner == "model":
            _warm_start(tn, res, t, wl, tgt, limits, everything + others, device)
        default_idx = space.default_index()
        while True:
            done = len(res.records)
            if done >= n_trial:
                res.stop_reason = f"{n_trial} trials"
                break
            if early_stopping and done - best_trial >= early_stopping and done > 0:
                res.stop_reason = f"no improvement in {early_stopping} trials"
                break
            if timeout_total and time.perf_counter() - t0 >= timeout_total:
                res.stop_reason = f"time budget of {timeout_total:g} s"
                break
            n = min(batch, n_trial - done)
            if early_stopping:
                n = min(n, max(1, early_stopping - (done - best_trial)))
            picks = []
            if include_default and default_idx not in tn.visited:
                tn.visited.add(default_idx)
                picks.append(default_idx)
            picks += tn.next_batch(n - len(picks)) if n > len(picks) else []
            if not picks:
                res.stop_reason = "space exhausted"
                break
            items = [(i, space.get(i).knob_values()) for i in picks]
            best_cost = res.best.cost if res.best is not None else None
            final: dict = {}  # item position -> its last result (a lost trial gets two)

            def on_result(k, r):
                nonlocal best_trial
                final[k] = r
                rec = _record(wl, tgt, space.get(picks[k]), r, tuner, opt.threads, device)
                if writer:
                    writer.write(rec)
                res.records.append(rec)
                if picks[k] == default_idx:
                    res.default = rec
                if rec.ok and (res.best is None or rec.cost < res.best.cost):
                    res.best, best_trial = rec, len(res.records)
                for cb in callbacks:
                    cb(res, rec)

            deadline = t0 + timeout_total if timeout_total else None
            measurer.measure(items, best_cost, on_result, deadline)
            ks = sorted(final)
            tn.update([picks[k] for k in ks], [final[k] for k in ks])
        if anchors is not None and res.best is not None:
            _compare_best(res, measurer, tuple(anchors), compare_rounds, writer, final_top)
    except KeyboardInterrupt:
        res.interrupted = True
        res.stop_reason = "interrupted"
    finally:
        res.busy_s = measurer.busy_s
        if getattr(measurer, "runner", None) is not None:
            res.runner_restarts = measurer.runner.restarts
        if hasattr(measurer, "node_stats"):
            res.nodes = measurer.node_stats()
        measurer.close()
        if writer:
            writer.close()
        res.wall_s = time.perf_counter() - t0
    return res

