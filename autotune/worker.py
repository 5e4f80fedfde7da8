"""The measurement worker: a separate process that builds, extracts features and runs.

Started by :class:`~.measure.LocalMeasurer` as ``python -m polytile.autotune.worker FD``
(a fresh interpreter: isl and LLVM state are never forked) on one end of a socket pair; the
first message is the setup dict. A worker lowers and compiles candidates itself and keeps
the compiled modules until it is told to run them, so no machine code crosses processes; a candidate
that crashes or hangs the worker costs that worker only (the measurer kills and replaces
it). Protocol (tuples over a ``multiprocessing`` pipe):

* ``("build", cid, knobs, want_features)`` -> ``("built", cid, code, msg, build_s,
  features, trace, payload)``; ``payload`` is None on the CPU (the worker keeps the
  module and runs it), and for a GPU target ``{"image": cubin bytes, "meta": launch
  plan}``, which the tuner sends to the GPU runner (:mod:`.gpu_runner`)
* ``("features", cid, knobs)`` -> ``("features", cid, code, msg, features)``; the worker
  keeps the last ``setup["lowered_kept"]`` functions it lowered this way (none without
  it; :data:`.measure.LOWERED_KEPT`), and a later
  ``build`` of the same knobs in it compiles that function instead of lowering again
  (the model tuner lowers its shortlist for features, then builds the picks from it)
* ``("run", cid, options)`` -> ``("ran", cid, code, msg, costs, timing)`` (``timing``:
  :meth:`.timing.Timing.to_json`; measured by :func:`.timing.time_calls`)
* ``("drop", cid)`` (no reply), ``("exit",)``

``code`` is None or an error code of :data:`~.records.ERROR_CODES`.
"""

from __future__ import annotations

import gc
import json
import signal
import time
import traceback

import numpy as np

import polytile
from polytile.backend import Target
from polytile.errors import ScheduleError, TuneError
from polytile.schedule.pipeline import lower
from polytile.targets.llvm.runtime import set_num_threads

from . import gpu_limits, sizes
from .data import make_inputs, measure_numpy, output_positions, outputs_match
from .features import extract_features
from .template import get_template
from .timing import Timing, clock_of, time_calls, timing_kwargs

_LINE = 300  # characters of an error message kept


def _short(exc: BaseException) -> str:
    msg = f"{type(exc).__name__}: {exc}".strip().replace("\n", " | ")
    return msg[:_LINE]


class _Worker:
    def __init__(self, setup: dict):
        self.setup = setup
        self.template = get_template(setup["template"], setup.get("source"))
        self.args = tuple(setup["args"])
        self.dtype = setup["dtype"]
        self.target = setup["target"]
        self.gpu = Target.parse(self.target).backend.is_gpu
        # GPU templates prune with the limits the tuner read from the device (plain data)
        self.limits = setup.get("gpu_limits")
        with gpu_limits.use(self.limits):
            self.space = self.template.space(self.args, self.dtype, self.target)
        self.mods: dict = {}
        self.data = None
        self.reference = None
        self.ref_error = ""
        self._flush_buf = None
        self.lowered: dict = {}  # knobs key -> (func, tensors, trace), oldest first
        self.lowered_kept = int(setup.get("lowered_kept", 0))
        set_num_threads(int(setup["threads"]))
        self.polytile = polytile

    # -------------------------------------------------------------------- helpers
    def _lower(self, knobs):
        """(code, msg, func, tensors, trace) of the config with ``knobs``."""
        try:
            cfg = self.space.from_json(knobs)
            with gpu_limits.use(self.limits):
                s, tensors = self.template.instantiate(cfg, self.args, self.dtype,
                                                       self.target)
            trace = [st.to_json() for st in s.trace]
        except MemoryError as exc:
            return "build_error", "out of memory: " + _short(exc), None, None, None
        except Exception as exc:  # any other failure to apply a config makes it invalid
            return "invalid_config", _short(exc), None, None, None
        try:
            func = lower(s, tensors, target=self.target, stop_after="storage_flattening")
        except (ScheduleError, TuneError) as exc:
            return "invalid_config", _short(exc), None, None, trace
        except MemoryError as exc:
            return "build_error", "out of memory: " + _short(exc), None, None, trace
        except Exception as exc:
            return "build_error", "lower: " + _short(exc), None, None, trace
        return None, "", func, tensors, trace

    def _ensure_data(self, tensors) -> None:
        if self.data is None:
            self.data = make_inputs(tensors, self.setup.get("seed", 0), self.args)
            self.outs = output_positions(tensors)

    def _ensure_reference(self) -> None:
        if self.reference is not None or self.ref_error:
            return
        knobs = self.space.default().knob_values()
        code, msg, func, tensors, _ = self._lower(knobs)
        if code:
            self.ref_error = f"the default config does not build ({msg})"
            return
        mod = self.polytile.build(func, target=self.target)
        self._ensure_data(tensors)
        arrays = [a.copy() for a in self.data]
        mod(*arrays)
        self.reference = [arrays[k] for k in self.outs]

    def _flush(self) -> None:
        if self._flush_buf is None:
            self._flush_buf = np.zeros(self.setup.get("flush_bytes", 64 << 20) // 8)
        self._flush_buf += 1.0

    # -------------------------------------------------------------------- commands
    def build(self, cid, knobs, want_features):
        t0 = time.perf_counter()
        kept = self.lowered.pop(_key(knobs), None)
        code, msg, func, tensors, trace = (None, "", *kept) if kept else self._lower(knobs)
        feats = None
        if code is None and want_features:
            feats = extract_features(func, sizes.sizes_of(self.args))
        payload = None
        if code is None:
            try:
                mod = self.polytile.build(func, target=self.target)
                if self.gpu:
                    # timed in the GPU runner: the cubin and its launch plan, plain data
                    from polytile.targets.cuda.library import metadata

                    payload = {"image": bytes(mod.image), "meta": metadata(mod)}
                else:
                    self._ensure_data(tensors)
                    self.mods[cid] = mod
            except Exception as exc:
                code, msg = "build_error", _short(exc)
        return ("built", cid, code, msg, time.perf_counter() - t0, feats, trace, payload)

    def features(self, cid, knobs):
        code, msg, func, tensors, trace = self._lower(knobs)
        feats = None
        if code is None:
            feats = extract_features(func, sizes.sizes_of(self.args))
            self.lowered[_key(knobs)] = (func, tensors, trace)
            while len(self.lowered) > self.lowered_kept:
                del self.lowered[next(iter(self.lowered))]
        return ("features", cid, code, msg, feats)

    def run(self, cid, opt: dict):
        mod = self.mods.get(cid)
        if mod is None:
            return ("ran", cid, "runtime_error", "candidate was not built in this worker", [])
        arrays = list(self.data)
        for k in self.outs:
            arrays[k] = np.full_like(self.data[k], np.nan if self.data[k].dtype.kind == "f"
                                     else 0)
        try:
            t0 = time.perf_counter()
            mod(*arrays)
            warm = time.perf_counter() - t0
            if opt.get("check"):
                self._ensure_reference()
                if self.reference is not None:
                    for k, ref in zip(self.outs, self.reference):
                        ok, why = outputs_match(arrays[k], ref, ref.dtype)
                        if not ok:
                            return ("ran", cid, "wrong_result",
                                    f"output {k} differs from the default config's: {why}", [])
            cutoff = opt.get("cutoff_s")
            if cutoff is not None and warm > cutoff:
                # a first call pays page faults and thread start-up, and a load spike may
                # hit it: a second one decides
                t0 = time.perf_counter()
                mod(*arrays)
                warm = min(warm, time.perf_counter() - t0)
            if cutoff is not None and warm > cutoff:
                return ("ran", cid, None, f"slow: stopped after the warm-up run "
                        f"({warm:.3g} s > {cutoff:.3g} s)", [warm],
                        Timing((warm,), 1, warm).to_json())
            timing = self._time(mod, arrays, opt)
        except Exception as exc:
            return ("ran", cid, "runtime_error", _short(exc), [])
        finally:
            gc.collect(0)
        return ("ran", cid, None, "", list(timing.costs), timing.to_json())

    def _time(self, mod, arrays, opt: dict) -> Timing:
        """:func:`~.timing.time_calls` on the module's own timing hook (arguments checked
        once, a warm-up call); with ``flush``, a buffer larger than the last-level cache is
        overwritten before each repeat and the repeats are the least ones."""
        kw = timing_kwargs(opt)
        clock = clock_of(opt)
        timer = (mod._timer(tuple(arrays)) if clock is time.perf_counter
                 else mod._timer(tuple(arrays), clock=clock))
        with timer as run:
            if not opt.get("flush"):
                return time_calls(run, **kw)
            # a flush (tens of ms) is not in the timed calls: keep to the least repeats
            kw["max_repeats"] = kw.get("min_repeats", 5)

            def flushed(n: int) -> float:
                self._flush()
                return run(n)
            return time_calls(flushed, **kw)


def worker_main(conn) -> None:
    """Serve commands on ``conn`` until ``exit`` or end of file."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the tuner's to handle
    from .orphan import exit_with_parent

    exit_with_parent()  # a tuner killed by a signal takes this process with it
    try:
        setup = conn.recv()
    except (EOFError, OSError):
        return
    mem = setup.get("mem_limit_bytes")
    if mem:
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (int(mem), int(mem)))
        except (ImportError, ValueError, OSError):
            pass
    try:
        w = _Worker(setup)
    except BaseException as exc:
        conn.send(("error", _short(exc), traceback.format_exc()[-2000:]))
        return
    conn.send(("ready",))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        kind = msg[0]
        if kind == "exit":
            return
        if kind == "drop":
            w.mods.pop(msg[1], None)
            continue
        try:
            if kind == "build":
                reply = w.build(msg[1], msg[2], msg[3])
            elif kind == "features":
                reply = w.features(msg[1], msg[2])
            elif kind == "run":
                reply = w.run(msg[1], msg[2])
            else:
                reply = ("error", f"unknown command {kind!r}", "")
        except MemoryError as exc:
            reply = ("crash", msg[1], "out of memory: " + _short(exc))
        except BaseException as exc:  # never let one candidate end the worker
            reply = ("crash", msg[1], _short(exc))
        conn.send(reply)


def _key(knobs) -> str:
    return json.dumps(knobs, sort_keys=True)


def numpy_main(spec: str) -> None:
    """``python -m polytile.autotune.worker numpy '<json>'``: time a template's numpy
    reference in a process of its own (BLAS threads spinning after a call would slow the
    kernels timed beside them) and print ``{"median": s, "min": s}``."""
    d = json.loads(spec)
    times: list = []
    measure_numpy(d["template"], tuple(d["args"]), d.get("dtype", "float32"),
                  min_time=d.get("min_time", 0.3), threads=d.get("threads"), times=times)
    print(json.dumps({"median": float(np.median(times)), "min": float(min(times))}))


if __name__ == "__main__":
    import sys

    if sys.argv[1] == "numpy":
        numpy_main(sys.argv[2])
    else:
        from multiprocessing.connection import Connection

        worker_main(Connection(int(sys.argv[1])))
