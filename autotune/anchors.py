"""Anchors: the numpy (and, when installed, torch) version of a workload, timed beside the
tuned kernel so that a printed "x numpy" compares two figures of the same moment.

An anchor runs in a process of its own (:class:`AnchorProcess`): BLAS and torch keep their
threads spinning for a while after a call, which would slow the kernels timed in the same
process. The process stays up for a whole comparison and is timed on demand, so
:meth:`.measure.LocalMeasurer.compare` can alternate it with the candidates (A/B/A/B): a
load spike then hits both sides of a ratio instead of only one. While a candidate is timed
the anchor processes are stopped (``SIGSTOP``) and vice versa.

Each turn is timed by :func:`.timing.time_calls`, the routine that times the candidates,
on the anchor's Python call as a user makes it (numpy: :func:`.data.reference_call`,
``np.matmul(a, b, out=c)`` for matmul, into a preallocated output as the kernels write
theirs; torch: its function, returning a new tensor), just as a candidate's time is that of
``f(*arrays)``: see :mod:`.timing` for what a timed call includes.
Protocol (tuples over a ``multiprocessing`` connection): setup dict -> ``("ready", kind)``
or ``("error", message)``; ``("time", options)`` -> ``("timed", timing json)`` or
``("error", message)``; ``("exit",)``.
"""

from __future__ import annotations

import importlib.util
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile

from dataclasses import dataclass, field

from polytile.errors import TuneError, format_error

from .timing import Timing, quantile

#: Anchor kinds, in the order summaries print them (``torch-cuda``: torch on the GPU,
#: cuBLAS without TF32 for matmul, timed with CUDA events; for ``cuda`` targets).
ANCHORS = ("numpy", "torch", "torch-cuda")


@dataclass
class Comparison:
    """Timings of configs and anchors measured alternately
    (:meth:`.measure.LocalMeasurer.compare`).

    Attributes
    ----------
    names : list of str
        The configs compared (``"best"``, ``"default"``...).
    anchors : list of str
        The anchor kinds timed (``"numpy"``, ``"torch"``).
    rounds : list of dict
        Per round, name or anchor kind -> :class:`~.timing.Timing` of that turn.
    errors : dict
        Name -> ``(error code, message)`` of a config that failed (not timed further).
    order : list of list
        Per round, the names and anchor kinds in the order they were timed.
    extended : bool
        The planned rounds left a spread past the threshold and as many again were made.
    """

    names: list
    anchors: list
    rounds: list = field(default_factory=list)
    errors: dict = field(default_factory=dict)
    order: list = field(default_factory=list)  # per round, the names in the order timed
    extended: bool = False

    def timing(self, name: str) -> Timing | None:
        """All repeats of ``name`` over the rounds as one Timing (None if never timed)."""
        ts = [r[name] for r in self.rounds if name in r]
        return Timing.pooled(ts) if ts else None

    def _ratios(self, anchor: str, name: str) -> list:
        return [r[anchor].median / r[name].median for r in self.rounds
                if anchor in r and name in r and r[name].median > 0]

    def ratio(self, anchor: str, name: str = "best") -> float | None:
        """Anchor time over config time, each the median of all its repeats in the
        comparison (robust to a few turns hit by a load spike, where a median of a few
        per-round ratios is not): above 1, the config is faster. None when either was not
        timed."""
        a, c = self.timing(anchor), self.timing(name)
        if a is None or c is None or not c.median > 0:
            return None
        return a.median / c.median

    def ratio_spread(self, anchor: str, name: str = "best") -> float:
        """IQR / median of the per-round ratios: how much the ratio moved during the
        comparison."""
        rs = self._ratios(anchor, name)
        if len(rs) < 2:
            return 0.0
        med = statistics.median(rs)
        return (quantile(rs, 0.75) - quantile(rs, 0.25)) / med if med else 0.0

    @property
    def noise(self) -> float:
        """The largest spread (IQR / median) of any pooled timing here."""
        sp = [t.spread for t in (self.timing(n) for n in self.names + self.anchors) if t]
        return max(sp, default=0.0)

    def renamed(self, keep: dict) -> Comparison:
        """This comparison with only the configs of ``keep`` (new name -> name here), under
        their new names; the anchors as they are."""
        back = {old: new for new, old in keep.items()}
        names = set(self.anchors) | set(back)

        def pick(d: dict) -> dict:
            return {back.get(k, k): v for k, v in d.items() if k in names}

        return Comparison(list(keep), list(self.anchors), [pick(r) for r in self.rounds],
                          pick(self.errors),
                          [[back.get(n, n) for n in o if n in names] for o in self.order],
                          self.extended)

    def to_json(self) -> dict:
        out: dict = {"rounds": len(self.rounds), "extended": self.extended,
                     "timings": {}, "ratios": {},
                     "errors": {k: list(v) for k, v in self.errors.items()},
                     "noise": round(self.noise, 6)}
        for n in self.names + self.anchors:
            t = self.timing(n)
            if t is not None:
                d = t.to_json()
                d.pop("costs")
                d["repeats"] = len(t.costs)
                out["timings"][n] = d
        for a in self.anchors:
            for n in self.names:
                r = self.ratio(a, n)
                if r is not None and math.isfinite(r):
                    out["ratios"][f"{a}/{n}"] = {"ratio": r,
                                                 "spread": round(self.ratio_spread(a, n), 6)}
        return out


def _torch_fn(name: str, args: tuple):
    """``f(torch, *tensors)`` computing template ``name`` with torch, or None."""
    if name in ("matmul", "batch_matmul"):
        return lambda torch, a, b: torch.matmul(a, b)
    if name == "softmax":
        return lambda torch, a: torch.softmax(a, dim=1)
    if name == "row_sum":
        return lambda torch, a: torch.sum(a, dim=1)
    if name == "layernorm":
        return lambda torch, a, g, b: torch.nn.functional.layer_norm(
            a, (a.shape[1],), g, b, eps=1e-5)
    if name == "rmsnorm":
        return lambda torch, a, g: torch.nn.functional.rms_norm(a, (a.shape[1],), g, eps=1e-6)
    if name in ("conv2d_nchw", "conv2d_nchwc"):
        stride, pad = args[-2], args[-1]
        return lambda torch, a, w: torch.nn.functional.conv2d(a, w, stride=stride,
                                                              padding=pad)
    if name == "conv2d_nhwc":
        # NHWC input and HWIO weights as NCHW / OIHW views (cuDNN's channels-last kernels);
        # the template's output is the GEMM view, torch's NCHW: the work is the same
        stride, pad = args[-2], args[-1]
        return lambda torch, a, w: torch.nn.functional.conv2d(
            a.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), stride=stride, padding=pad)
    if name in ("depthwise_conv2d_nchw", "depthwise_conv2d_nchwc"):
        stride, pad = args[-2], args[-1]
        return lambda torch, a, w: torch.nn.functional.conv2d(
            a, w.unsqueeze(1), stride=stride, padding=pad, groups=a.shape[1])
    return None


def _to_torch(torch, a, dtype: str):
    """Tensor of host array ``a``: a bfloat16 workload's arrays (ml_dtypes bfloat16 or the
    uint16 bit patterns of :func:`polytile.te.dtype.bfloat16_array`) as ``torch.bfloat16``
    (``torch.from_numpy`` refuses both)."""
    if str(dtype) == "bfloat16" and a.dtype.itemsize == 2 and a.dtype.kind != "f":
        import numpy as np

        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def available(template, args: tuple, target: str = "llvm") -> list[str]:
    """Anchor kinds that can time ``template`` at ``args`` here: ``numpy`` when it has a
    numpy reference, ``torch`` when torch is installed and the template is one of the
    built-in ones torch computes; for a GPU ``target``, ``torch-cuda`` (torch on the GPU)
    only."""
    if str(target).split()[0] == "cuda":
        return (["torch-cuda"] if importlib.util.find_spec("torch") is not None
                and _torch_fn(template.name, args) else [])
    out = []
    if template.reference is not None:
        out.append("numpy")
    if importlib.util.find_spec("torch") is not None and _torch_fn(template.name, args):
        out.append("torch")
    return out


class _Anchor:
    """Inside the anchor process: the workload's inputs and the call to time."""

    def __init__(self, setup: dict):
        from .data import make_inputs, output_positions, reference_call, resolve

        t, wl = resolve(setup["template"], setup["args"], setup["dtype"])
        self.kind = setup["kind"]
        threads = setup.get("threads")
        _, tensors = t.instantiate(t.space(wl.args, wl.dtype).default(), wl.args, wl.dtype)
        arrays = make_inputs(tensors, setup.get("seed", 0), wl.args)
        outs = set(output_positions(tensors))
        inputs = [a for k, a in enumerate(arrays) if k not in outs]
        if self.kind == "numpy":
            if t.reference is None:
                raise TuneError(format_error("anchor", f"template '{t.name}' has no numpy "
                                             "reference"))
            if threads:
                try:
                    from threadpoolctl import threadpool_limits

                    self._limits = threadpool_limits(limits=int(threads))
                except ImportError:
                    pass
            self.call = reference_call(t, arrays, outs, wl.args)
        elif self.kind == "torch":
            import torch

            fn = _torch_fn(t.name, wl.args)
            if fn is None:
                raise TuneError(format_error("anchor", f"no torch version of '{t.name}'"))
            if threads:
                torch.set_num_threads(int(threads))
            tins = [_to_torch(torch, a, wl.dtype) for a in inputs]

            def call():
                with torch.no_grad():
                    return fn(torch, *tins)

            self.call = call
        elif self.kind == "torch-cuda":
            import torch

            fn = _torch_fn(t.name, wl.args)
            if fn is None or not torch.cuda.is_available():
                raise TuneError(format_error("anchor", f"no torch CUDA version of '{t.name}'"
                                             " here", "expected torch with a CUDA device"))
            torch.backends.cuda.matmul.allow_tf32 = False  # fp32 against fp32
            torch.backends.cudnn.allow_tf32 = False
            tins = [_to_torch(torch, a, wl.dtype).cuda() for a in inputs]
            self.call = lambda: fn(torch, *tins)
            self._torch = torch
        else:
            raise TuneError(format_error("anchor", f"unknown anchor {self.kind!r}",
                                         f"expected one of {ANCHORS}"))

    def time(self, opt: dict) -> dict:
        from .timing import clock_of, time_calls, time_function, timing_kwargs

        if self.kind != "torch-cuda":
            return time_function(self.call, clock_of(opt), **timing_kwargs(opt)).to_json()
        torch = self._torch
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)

        def run(n: int) -> float:  # CUDA events around n calls, as the GPU runner
            start.record()
            with torch.no_grad():
                for _ in range(n):
                    self.call()
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop) / 1e3

        for _ in range(3):
            run(1)
        return time_calls(run, **timing_kwargs(opt)).to_json()


def anchor_main(conn) -> None:
    """Serve ``time`` requests on ``conn`` (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from .orphan import exit_with_parent

    exit_with_parent()  # a tuner killed by a signal takes this process with it
    try:
        a = _Anchor(conn.recv())
    except BaseException as exc:  # reported to the measurer, which raises TuneError
        conn.send(("error", f"{type(exc).__name__}: {exc}"[:300]))
        return
    conn.send(("ready", a.kind))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "exit":
            return
        try:
            conn.send(("timed", a.time(msg[1])))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"[:300]))


class AnchorProcess:
    """An anchor of ``kind`` for workload ``wl`` in a fresh process (``python -m
    polytile.autotune.anchors FD``); :meth:`time` returns a :class:`~.timing.Timing`.

    Raises
    ------
    TuneError
        When the process cannot start or cannot compute the workload.
    """

    def __init__(self, kind: str, wl, threads: int | None = None, seed: int = 0,
                 start_timeout: float = 120.0):
        from multiprocessing.connection import Connection

        self.kind = kind
        parent, child = socket.socketpair()
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "polytile.autotune.anchors", str(child.fileno())],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self.stderr)
        child.close()
        self.conn = Connection(parent.detach())
        self.conn.send({"template": wl.template, "args": list(wl.args), "dtype": wl.dtype,
                        "kind": kind, "threads": threads, "seed": seed})
        reply = self._recv(start_timeout)
        if reply[0] != "ready":
            self.close()
            raise TuneError(format_error("anchor", f"the {kind} anchor of {wl} failed to "
                                         f"start: {reply[1]}"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _recv(self, timeout: float):
        try:
            if not self.conn.poll(timeout):
                return ("error", f"no answer within {timeout:g} s")
            return self.conn.recv()
        except (EOFError, OSError):
            self.stderr.seek(0)
            tail = self.stderr.read().decode("utf-8", "replace").strip().splitlines()
            return ("error", "the process died" + (f": {tail[-1]}" if tail else ""))

    def time(self, opt: dict, timeout: float = 300.0):
        """Time one turn of the anchor with run options ``opt`` (see
        :func:`.timing.timing_kwargs`).

        Raises
        ------
        TuneError
            When the anchor fails or does not answer within ``timeout`` seconds.
        """
        from .timing import Timing

        try:
            self.conn.send(("time", opt))
        except OSError as exc:
            raise TuneError(format_error("anchor", f"{self.kind}: {exc}")) from None
        reply = self._recv(timeout)
        if reply[0] != "timed":
            raise TuneError(format_error("anchor", f"timing the {self.kind} anchor failed: "
                                         f"{reply[1]}"))
        return Timing.from_json(reply[1])

    def close(self) -> None:
        try:
            self.conn.send(("exit",))
        except (OSError, ValueError):
            pass
        try:
            os.kill(self.proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.conn.close()
        self.stderr.close()


if __name__ == "__main__":
    from multiprocessing.connection import Connection

    anchor_main(Connection(int(sys.argv[1])))
