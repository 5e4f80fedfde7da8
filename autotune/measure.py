"""Measurement: build candidates in parallel worker processes, then run them one at a time.

:class:`LocalMeasurer` keeps ``parallel`` worker processes (:mod:`.worker`, each a fresh
interpreter: isl and LLVM state are never forked). A batch is measured in two phases so
that compilation never disturbs timing:

1. *build*: candidates are spread over all workers, each lowering and JIT-compiling its
   share (and extracting loop-IR features on the way);
2. *run*: one candidate at a time runs in the worker that built it, with all cores
   (OpenMP threads = ``threads``). Measuring is exclusive: the other workers (and any
   anchor process) are stopped with ``SIGSTOP`` for the time of the run and continued with
   ``SIGCONT`` after it, so a measured kernel never shares a core with a build, a stray
   feature extraction or the spinning threads of another process of ours (should the
   tuner die meanwhile, its orphaned process group gets ``SIGHUP`` + ``SIGCONT`` from the
   kernel and the workers end).

Timing is :func:`.timing.time_calls` (median of repeats, IQR spread, one re-measurement
past 10 % spread). :meth:`LocalMeasurer.compare` times chosen configs alternately with
their numpy/torch anchors (:mod:`.anchors`); ``polytile tune``'s summary and ``polytile
run`` both print its figures.

GPU targets (``cuda``): the workers build only, and each build reply carries the cubin and
its launch plan; phase 2 sends them, as plain data, to the long-lived GPU runner process
(:mod:`.gpu_runner`), which owns the CUDA context, checks the outputs against the numpy
reference and times with CUDA events; a faulting, dying or hanging kernel fails its trial
and the runner is restarted.

Isolation: a worker that crashes (a bad JIT, a segfault) or passes its per-candidate
timeout is killed and replaced; the candidate is recorded with a typed error code
(``build_error``, ``runtime_error``, ``timeout``, ``wrong_result``, ``invalid_config``) and
the batch goes on. Candidates built in a replaced worker are rebuilt before they run.
Workers run with an address-space limit so a runaway allocation fails that candidate.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from polytile.backend import Target
from polytile.errors import TuneError, format_error

from .anchors import AnchorProcess, Comparison
from .template import Workload, template_source
from .timing import Timing

#: Functions a worker keeps of those it lowered for features, for a later build of the
#: same config (a model-tuner batch lowers ``lower_factor`` x its size configs; the
#: oldest are dropped)
LOWERED_KEPT = 64


@dataclass
class MeasureOptions:
    """How candidates are built and timed.

    Attributes
    ----------
    parallel : int
        Build worker processes (default: CPU cores).
    threads : int
        OpenMP threads a candidate runs with (default: CPU cores).
    number, repeat, min_repeat_ms, max_repeats, budget_s, max_spread :
        Timing as :func:`.timing.time_calls`: after a warm-up, a first call sets the
        calls per repeat (at least ``number``, a repeat lasting at least
        ``min_repeat_ms``) and the repeats (``repeat`` to ``max_repeats``, filling
        ``budget_s`` seconds); past a spread (IQR / median) of ``max_spread`` the
        candidate is measured once more.
    clock : str
        ``"wall"`` (elapsed time, the default) or ``"cpu"`` (the worker's and the anchor's
        CPU time, all threads: trustworthy at one thread on a loaded machine; with more, the
        summed work): :data:`.timing.CLOCKS`. GPU targets use the device's clock.
    flush_cache : bool
        Overwrite a buffer larger than the last-level cache before each repeat (timed
        with Python calls, ~10 us overhead each).
    check : bool
        Compare each candidate's outputs with the default config's (``wrong_result``).
    build_timeout, run_timeout : float
        Seconds allowed to build one candidate, and to run (warm-up + timing) one.
    slow_factor : float
        A candidate whose warm-up run is ``slow_factor`` times slower than the best so far
        (or longer than ``run_timeout / (repeat + 2)``) is recorded with that one run.
    mem_limit_mb : int
        Address-space limit of each worker (MiB); 0 for none.
    runner_command : list of str, optional
        GPU targets: the command starting the GPU runner (default ``python -m
        polytile.autotune.gpu_runner``; tests pass a fake one).
    """

    parallel: int = 0
    threads: int = 0
    number: int = 1
    repeat: int = 3
    min_repeat_ms: float = 20.0
    max_repeats: int = 30
    budget_s: float = 0.1
    max_spread: float = 0.10
    clock: str = "wall"
    flush_cache: bool = False
    check: bool = False
    build_timeout: float = 20.0
    run_timeout: float = 15.0
    slow_factor: float = 10.0
    mem_limit_mb: int = 8192
    seed: int = 0
    runner_command: list | None = None

    def __post_init__(self):
        from .timing import CLOCKS

        if self.clock not in CLOCKS:
            raise TuneError(format_error("measure", f"clock={self.clock!r}",
                                         f"expected one of {sorted(CLOCKS)}"))
        cores = os.cpu_count() or 1
        self.parallel = self.parallel or cores
        self.threads = self.threads or cores
        if (self.parallel < 1 or self.threads < 1 or self.number < 1 or self.repeat < 1
                or self.max_repeats < self.repeat):
            raise TuneError(format_error("measure", f"parallel={self.parallel}, threads="
                                         f"{self.threads}, number={self.number}, repeat="
                                         f"{self.repeat}, max_repeats={self.max_repeats}",
                                         "expected positive integers, max_repeats >= "
                                         "repeat"))

    def timing(self, **over) -> dict:
        """The :func:`.timing.time_calls` options of a run, updated with ``over``."""
        d = {"number": self.number, "min_repeat_ms": self.min_repeat_ms,
             "min_repeats": self.repeat, "max_repeats": self.max_repeats,
             "budget_s": self.budget_s, "max_spread": self.max_spread, "clock": self.clock}
        d.update(over)
        return d


@dataclass
class MeasureResult:
    """Outcome of one candidate: ``costs`` in seconds (empty on failure), ``timing`` the
    measurement they come from (its spread, whether it was re-measured)."""

    costs: list = field(default_factory=list)
    error: str | None = None
    error_msg: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    features: list | None = None
    trace: list | None = None
    timing: Timing | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def spread(self) -> float:
        """IQR / median of the costs (0 without a measurement)."""
        return self.timing.spread if self.timing is not None else 0.0

    @property
    def remeasured(self) -> bool:
        return bool(self.timing and self.timing.remeasured)

    @property
    def cost(self) -> float:
        import statistics

        return statistics.median(self.costs) if self.ok else float("inf")


def _proc_state(pid: int) -> str | None:
    """The state letter of ``/proc/<pid>/stat`` (``T``: stopped), None where unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _wait_stopped(pids: list, timeout: float = 0.2) -> None:
    """Wait (at most ``timeout`` seconds) until the processes ``pids`` are stopped:
    ``SIGSTOP`` is delivered asynchronously, and a process running on another core goes on
    for a moment. Without ``/proc`` this returns at once."""
    deadline = time.perf_counter() + timeout
    for pid in pids:
        while True:
            st = _proc_state(pid)
            if st in (None, "T", "t", "Z", "X") or time.perf_counter() >= deadline:
                break
            time.sleep(0.0002)


class _Proc:
    """A worker process (``python -m polytile.autotune.worker FD``) and its connection.

    The worker is a fresh interpreter (never a fork, and no re-import of the caller's
    ``__main__``), connected by a private socket pair; its stderr goes to a temporary file
    whose tail explains a crash.
    """

    def __init__(self, setup: dict, command: list | None = None):
        parent, child = socket.socketpair()
        self.stderr = tempfile.TemporaryFile()
        command = command or [sys.executable, "-m", "polytile.autotune.worker"]
        self.proc = subprocess.Popen(
            [*command, str(child.fileno())],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=self.stderr, start_new_session=False)
        child.close()
        self.conn = Connection(parent.detach())
        self.conn.send(setup)
        self.built: set = set()
        #: cids this worker lowered for features (it keeps the lowered functions, so a
        #: build of one is sent to it when it is free: :meth:`LocalMeasurer._pool`)
        self.lowered: dict = {}
        self.ready = False

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.conn.close()
        self.stderr.close()

    def death(self) -> str:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "worker process stopped answering"
        if code is not None and code < 0:
            try:
                why = f"worker process died of signal {signal.Signals(-code).name}"
            except ValueError:
                why = f"worker process died of signal {-code}"
        else:
            why = f"worker process exited (code {code})"
        tail = self._stderr_tail()
        return f"{why}: {tail}" if tail else why

    def _stderr_tail(self) -> str:
        try:
            self.stderr.seek(0, os.SEEK_END)
            n = self.stderr.tell()
            self.stderr.seek(max(0, n - 400))
            text = self.stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return " | ".join(lines[-2:])[:300]


class LocalMeasurer:
    """Build/run candidates of one workload in local worker processes; see the module
    docstring. Use as a context manager or call :meth:`close`."""

    def __init__(self, workload: Workload, target: str, options: MeasureOptions | None = None,
                 runner=None):
        self.workload = workload
        self.target = target
        self.opt = options or MeasureOptions()
        self._setup = {"template": workload.template,
                       "source": template_source(workload.template),
                       "args": list(workload.args),
                       "dtype": workload.dtype, "target": target, "threads": self.opt.threads,
                       "seed": self.opt.seed, "lowered_kept": LOWERED_KEPT,
                       "mem_limit_bytes": self.opt.mem_limit_mb << 20 if self.opt.mem_limit_mb
                       else 0}
        self.gpu = Target.parse(target).backend.is_gpu
        #: GPU targets: the runner process that times candidates (:mod:`.gpu_runner`)
        self.runner = runner
        self._payloads: dict = {}  # cid -> {"image", "meta"} of built GPU candidates
        if self.gpu:
            from . import gpu_limits
            from .gpu_runner import GPURunner

            if self.runner is None:
                self.runner = GPURunner(self.runner_setup(), self.opt.runner_command)
            info = self.runner.start()
            self._setup["gpu_limits"] = gpu_limits.from_device(info).to_json()
        self._procs: list[_Proc] = []
        self._next = 0
        self._anchors: list = []
        self.busy_s = 0.0  # seconds spent waiting on workers (build + run)
        self.paused = 0  # runs during which other helper processes were stopped

    def runner_setup(self) -> dict:
        """The setup a GPU runner gets (plain data)."""
        return {k: self._setup[k] for k in ("template", "source", "args", "dtype", "seed")}

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the workers and wait until they have loaded the template."""
        while len(self._procs) < self.opt.parallel:
            self._procs.append(_Proc(self._setup))
        for p in self._procs:
            self._wait_ready(p)

    def _wait_ready(self, p: _Proc) -> None:
        if p.ready:
            return
        if not p.conn.poll(120):
            p.kill()
            raise TuneError(format_error("measure", "a worker process did not start in 120 s"))
        try:
            msg = p.conn.recv()
        except (EOFError, OSError):
            raise TuneError(format_error("measure", "a worker process failed to start: "
                                         + p.death())) from None
        if msg[0] != "ready":
            raise TuneError(format_error("measure", f"a worker process failed to load "
                                         f"{self.workload}: {msg[1]}"))
        p.ready = True

    def _replace(self, p: _Proc) -> _Proc:
        p.kill()
        q = _Proc(self._setup)
        self._procs[self._procs.index(p)] = q
        return q

    def close(self) -> None:
        for p in self._procs:
            try:
                p.conn.send(("exit",))
            except (OSError, ValueError):
                pass
        deadline = time.time() + 2
        for p in self._procs:
            try:
                p.proc.wait(timeout=max(0.01, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
            p.kill()
        self._procs = []
        self._close_anchors()
        if self.runner is not None:
            self.runner.close()

    def _close_anchors(self) -> None:
        for a in self._anchors:
            a.close()
        self._anchors = []

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ parallel phase
    def _pool(self, jobs: list, timeout: float) -> tuple[dict, dict]:
        """Run ``jobs`` [(cid, message)] over all workers. Returns (cid -> reply, cid ->
        worker that answered); a dead or timed-out worker yields ``("crash", cid, why)``
        or ``("timeout", cid, why)`` and is replaced."""
        self.start()
        todo = list(jobs)
        out: dict = {}
        who: dict = {}
        running: dict = {}  # proc -> (cid, deadline)
        while todo or running:
            for p in list(self._procs):
                if p not in running and todo:
                    # a build goes to a worker that lowered the config for its features
                    # (and kept it) when that one is free
                    mine = next((k for k, (c, m) in enumerate(todo)
                                 if m[0] == "build" and c in p.lowered), 0)
                    cid, msg = todo.pop(mine)
                    if msg[0] == "build":
                        p.lowered.pop(cid, None)
                    try:
                        self._wait_ready(p)
                        p.conn.send(msg)
                    except (OSError, EOFError, TuneError) as exc:
                        out[cid] = ("crash", cid, f"worker unavailable: {exc}")
                        self._replace(p)
                        continue
                    running[p] = (cid, time.time() + timeout)
            if not running:
                continue
            wait_s = max(0.0, min(d for _, d in running.values()) - time.time())
            ready = wait([p.conn for p in running], timeout=wait_s)
            for p in list(running):
                cid, deadline = running[p]
                if p.conn in ready:
                    del running[p]
                    try:
                        out[cid] = p.conn.recv()
                        who[cid] = p
                    except (EOFError, OSError):
                        out[cid] = ("crash", cid, p.death())
                        self._replace(p)
                elif time.time() >= deadline:
                    del running[p]
                    out[cid] = ("timeout", cid, f"no answer within {timeout:g} s")
                    self._replace(p)
        return out, who

    def _build_result(self, r, who_p, cid) -> MeasureResult:
        if r[0] == "built":
            _, _, code, msg, build_s, feats, trace = r[:7]
            payload = r[7] if len(r) > 7 else None
            if code is None and payload is not None:
                self._payloads[cid] = payload
            elif code is None and who_p in self._procs:
                who_p.built.add(cid)
            return MeasureResult(error=code, error_msg=msg, build_s=build_s, features=feats,
                                 trace=trace)
        if r[0] == "timeout":
            return MeasureResult(error="timeout", error_msg="build: " + r[2],
                                 build_s=self.opt.build_timeout)
        return MeasureResult(error="build_error", error_msg="build: " + str(r[2]))

    def build(self, items: list, want_features: bool = True) -> dict:
        """Build candidates ``items`` [(cid, knob values)] in parallel; returns cid ->
        MeasureResult (``costs`` empty). Each worker keeps the modules it built."""
        jobs = [(cid, ("build", cid, knobs, want_features)) for cid, knobs in items]
        t0 = time.perf_counter()
        replies, who = self._pool(jobs, self.opt.build_timeout)
        self.busy_s += time.perf_counter() - t0
        return {cid: self._build_result(replies[cid], who.get(cid), cid) for cid, _ in items}

    def features(self, items: list) -> dict:
        """Loop-IR features of configs ``items`` [(cid, knob values)]: cid -> (features or
        None, error code, message)."""
        jobs = [(cid, ("features", cid, knobs)) for cid, knobs in items]
        replies, who = self._pool(jobs, self.opt.build_timeout)
        out = {}
        for cid, _ in items:
            r = replies[cid]
            if r[0] == "features":
                out[cid] = (r[4], r[2], r[3])
                if r[2] is None and who.get(cid) in self._procs:
                    kept = who[cid].lowered
                    kept[cid] = None
                    if len(kept) > LOWERED_KEPT:  # as the worker, the oldest forgotten
                        del kept[next(iter(kept))]
            elif r[0] == "timeout":
                out[cid] = (None, "timeout", r[2])
            else:
                out[cid] = (None, "build_error", str(r[2]))
        return out

    # ------------------------------------------------------------------ measure
    def measure(self, items: list, best_cost: float | None = None,
                on_result=None, deadline: float | None = None) -> list:
        """Build then run candidates ``items`` [(cid, knob values)]; returns one
        MeasureResult per item, in order, and calls ``on_result(k, result)`` as soon as
        the ``k``-th is final. ``best_cost`` (seconds) sets the cut-off for slow ones.
        Past ``deadline`` (a ``time.perf_counter()`` value) no further candidate starts:
        the results stop short of the items."""
        built = self.build(items, want_features=True)
        results = []
        best = best_cost
        try:
            for k, (cid, knobs) in enumerate(items):
                if deadline is not None and time.perf_counter() >= deadline:
                    break
                res = built[cid]
                if res.error is None:
                    self._run(cid, knobs, res, best)
                    if res.ok and (best is None or res.cost < best):
                        best = res.cost
                results.append(res)
                if on_result is not None:
                    on_result(k, res)
        finally:
            self._drop_all()
        return results

    def compare(self, items: list, anchors=("numpy",), rounds: int = 4,
                warmup_s: float = 0.0) -> Comparison:
        """Time configs ``items`` [(name, knob values)] alternately with their anchors.

        The configs are built once (in parallel), then ``rounds`` times each config and
        each anchor (:mod:`.anchors`, a process of its own per kind) is timed in turn — the
        order reversed every other round (A B / B A) so that a slow drift of the machine
        weighs on both sides alike — every turn exclusive and by
        :func:`.timing.time_calls` with this measurer's options. When a pooled timing's
        spread is still past ``max_spread`` after those rounds, as many rounds again are
        made, once (``Comparison.extended``). ``polytile tune``'s
        summary and ``polytile run`` both print these figures, so they agree within the
        spread they print. ``warmup_s`` > 0: rounds of the same turns, not counted, run
        first for at least that many seconds (a GPU left idle while the configs were
        built boosts its clocks for the first turns: the first config timed after a
        build measured up to 7 % fast on an H200).

        Returns
        -------
        Comparison
            Per round and name the Timing; configs and anchors that fail are in
            ``errors`` (an anchor's code is ``"anchor_error"``) and are not timed further:
            a failing anchor never costs the caller its tuning result.
        """
        cmp = Comparison([n for n, _ in items], list(anchors))
        built = self.build(items, want_features=False)
        live = []
        for name, knobs in items:
            r = built[name]
            if r.error is not None:
                cmp.errors[name] = (r.error, r.error_msg)
            else:
                live.append((name, knobs))
        over = self.opt.timing(check=False, cutoff_s=None, flush=self.opt.flush_cache)
        try:
            t0 = time.perf_counter()
            for kind in anchors:
                try:
                    self._anchors.append(AnchorProcess(kind, self.workload,
                                                       self.opt.threads, self.opt.seed))
                except TuneError as exc:
                    cmp.errors[kind] = ("anchor_error", str(exc).splitlines()[0])
            self.busy_s += time.perf_counter() - t0
            turns = [("config", n, k) for n, k in live] + [("anchor", a, None)
                                                              for a in self._anchors]

            def one_round(rnd: int) -> tuple[dict, list]:
                got: dict = {}
                order: list = []
                for what, who, knobs in (turns if rnd % 2 == 0 else turns[::-1]):
                    if what == "anchor":
                        if who.kind in cmp.errors:
                            continue
                        t0 = time.perf_counter()
                        order.append(who.kind)
                        try:
                            with self._exclusive(who.pid):
                                got[who.kind] = who.time(over,
                                                         timeout=self.opt.run_timeout * 4)
                        except TuneError as exc:
                            cmp.errors[who.kind] = ("anchor_error", str(exc).splitlines()[0])
                        self.busy_s += time.perf_counter() - t0
                        continue
                    if who in cmp.errors:
                        continue
                    order.append(who)
                    res = MeasureResult()
                    self._run(who, knobs, res, None, over=over, keep=True)
                    if res.ok and res.timing is not None:
                        got[who] = res.timing
                    else:
                        cmp.errors[who] = (res.error or "runtime_error", res.error_msg)
                return got, order

            t0 = time.perf_counter()
            while warmup_s > 0:
                one_round(1)
                if time.perf_counter() - t0 >= warmup_s:
                    break
            planned = max(1, rounds)
            rnd = 0
            while rnd < planned:
                got, order = one_round(rnd)
                cmp.rounds.append(got)
                cmp.order.append(order)
                rnd += 1
                if rnd == planned == max(1, rounds) and cmp.noise > self.opt.max_spread:
                    # too noisy to trust: as many rounds again, once (more samples move a
                    # median of a two-mode distribution less)
                    planned *= 2
                    cmp.extended = True
        finally:
            self._close_anchors()
            self._drop_all()
        return cmp

    def _drop_all(self) -> None:
        self._payloads.clear()
        for p in self._procs:
            for cid in list(p.built):
                try:
                    p.conn.send(("drop", cid))
                except (OSError, ValueError):
                    pass
            p.built.clear()

    def run_built(self, cid, knobs, res: MeasureResult, best: float | None) -> None:
        """Run candidate ``cid`` (built by :meth:`build`, whose result is ``res``)
        exclusively and fill ``res``: the run phase of :meth:`measure` for one candidate
        (a measuring actor of :mod:`.ray_measure` calls it). ``best`` (seconds) sets the
        cut-off for slow ones."""
        if res.error is None:
            self._run(cid, knobs, res, best)

    def _run(self, cid, knobs, res: MeasureResult, best: float | None, over: dict | None = None,
             keep: bool = False) -> None:
        """Run built candidate ``cid`` exclusively and fill ``res``; ``over`` overrides run
        options, ``keep`` keeps the module in its worker for another run."""
        if self.gpu:
            self._run_gpu(cid, knobs, res, best, over, keep)
            return
        opt = self.opt
        p = next((q for q in self._procs if cid in q.built), None)
        if p is None:  # its worker was replaced: rebuild it alone, then run
            again = self.build([(cid, knobs)], want_features=False)[cid]
            if again.error is not None:
                res.error, res.error_msg = again.error, "rebuild: " + again.error_msg
                return
            p = next((q for q in self._procs if cid in q.built), None)
            if p is None:
                res.error, res.error_msg = "runtime_error", "lost its worker before running"
                return
        run_opt = self._run_options(best, over, flush=opt.flush_cache)
        t0 = time.perf_counter()
        try:
            with self._exclusive(p.proc.pid):
                p.conn.send(("run", cid, run_opt))
                ok = p.conn.poll(opt.run_timeout)
                reply = p.conn.recv() if ok else None
        except (EOFError, OSError):
            reply = ("crash", cid, p.death())
        res.run_s = time.perf_counter() - t0
        self.busy_s += res.run_s
        if reply is None:
            res.error, res.error_msg = "timeout", f"run: no answer within {opt.run_timeout:g} s"
            self._replace(p)
        elif reply[0] == "ran":
            res.error, res.error_msg, res.costs = reply[2], reply[3], list(reply[4])
            res.timing = Timing.from_json(reply[5]) if len(reply) > 5 else None
            if res.error is not None or not keep:
                p.built.discard(cid)
                try:
                    p.conn.send(("drop", cid))
                except (OSError, ValueError):
                    pass
        else:
            res.error, res.error_msg = "runtime_error", "run: " + str(reply[2])
            p.built.discard(cid)
            if not p.is_alive():
                self._replace(p)

    def _run_options(self, best: float | None, over: dict | None, **kw) -> dict:
        """Timing options of one run (``opt.timing(**kw)``, then ``over``): it is cut off
        after its share of ``run_timeout``, or after ``slow_factor`` times the ``best``
        seconds so far (at least 0.05 s)."""
        opt = self.opt
        cutoff = opt.run_timeout / (opt.repeat + 2)
        if best is not None:
            cutoff = min(cutoff, max(opt.slow_factor * best, 0.05))
        run_opt = opt.timing(**kw, check=opt.check, cutoff_s=cutoff)
        run_opt.update(over or {})
        return run_opt

    def _run_gpu(self, cid, knobs, res: MeasureResult, best: float | None, over: dict | None,
                 keep: bool) -> None:
        """Time built GPU candidate ``cid`` in the GPU runner (its cubin and launch plan
        sent as plain data); a fault, death or hang of the runner fails this candidate and
        restarts the runner (:class:`.gpu_runner.GPURunner`)."""
        opt = self.opt
        payload = self._payloads.get(cid)
        if payload is None:  # dropped or never built here: build it alone
            again = self.build([(cid, knobs)], want_features=False)[cid]
            if again.error is not None:
                res.error, res.error_msg = again.error, "rebuild: " + again.error_msg
                return
            payload = self._payloads.get(cid)
            if payload is None:
                res.error, res.error_msg = "runtime_error", "no cubin came back from the build"
                return
        run_opt = self._run_options(best, over)
        t0 = time.perf_counter()
        code, msg, costs, timing = self.runner.run(cid, payload["image"], payload["meta"],
                                                   run_opt, opt.run_timeout)
        res.run_s = time.perf_counter() - t0
        self.busy_s += res.run_s
        res.error, res.error_msg, res.costs = code, msg, list(costs)
        res.timing = Timing.from_json(timing) if timing else None
        if code is not None or not keep:
            self._payloads.pop(cid, None)

    # ------------------------------------------------------------------ exclusivity
    def _pausable(self) -> list[int]:
        """Process ids of our own helpers: workers and anchor processes."""
        pids = [p.proc.pid for p in self._procs if p.proc.poll() is None]
        return pids + [a.pid for a in self._anchors if a.proc.poll() is None]

    @contextlib.contextmanager
    def _exclusive(self, keep: int | None):
        """Stop every helper process but ``keep`` (a pid) for the time of the block; they
        are continued even when the block raises."""
        stopped = []
        try:
            for pid in self._pausable():
                if pid != keep:
                    try:
                        os.kill(pid, signal.SIGSTOP)
                        stopped.append(pid)
                    except ProcessLookupError:
                        pass
            self.paused += bool(stopped)
            _wait_stopped(stopped)
            yield stopped
        finally:
            for pid in stopped:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
