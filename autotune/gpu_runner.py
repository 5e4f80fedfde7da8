"""The GPU runner: one long-lived process that owns the CUDA context and times candidates.

Candidates of a ``cuda`` target are lowered and compiled (NVRTC or nvcc) in the build
workers (:mod:`.worker`); what crosses to this process is plain data: the cubin's bytes and
its launch plan (:func:`polytile.targets.cuda.library.metadata`: parameters, kernels, grid,
block, shared memory, workspace). No Python object, pickle or callable is sent.

The runner (``python -m polytile.autotune.gpu_runner FD``, a fresh interpreter) answers on a
``multiprocessing`` connection:

* setup dict (first message) -> ``("ready", device_info)`` or ``("error", text)``
  (:func:`device_info`: name, compute capability, driver and CUDA versions, limits, L2);
* ``("run", cid, image, meta, options)`` -> ``("ran", cid, code, msg, costs, timing,
  fatal)``: the kernel is loaded; its outputs are poisoned (NaN) and, on the first trial of
  each distinct cubin and always with ``options["check"]``, compared with the template's
  numpy reference (float64 inputs); then timed by :func:`.timing.time_calls` with CUDA
  events around ``n`` launches after a warm-up (the runner's first timing after
  :data:`SPIN_UP_S` seconds of launches), the launches rotating over several sets of
  input and output buffers whose total exceeds the L2 cache (so no trial is timed on data
  a previous launch left in L2); ``timing`` is :meth:`.timing.Timing.to_json`;
* ``("exit",)``.

A kernel that faults (illegal address, misaligned access) poisons the CUDA context: the
runner replies with ``fatal=True`` and the error text, then exits; :class:`GPURunner` (the
tuner's side) starts a new one. A runner that dies or stops answering within the
per-candidate timeout is killed and restarted the same way, and the trial is recorded as
failed with what happened. A launch refused for lack of resources is a plain failure.
"""

from __future__ import annotations

import hashlib
import math
import os
import signal
import subprocess
import sys
import time
import traceback

from polytile.errors import TuneError, format_error

#: Most buffer sets the runner rotates over (a tiny workload cannot exceed L2 with fewer).
MAX_SETS = 256
#: Rotated sets: their total is at least this many times the L2 cache size.
L2_FACTOR = 2
#: Seconds of launches before the first timing of a runner: the first trial of a tuning
#: run is the default config, and an idle GPU takes a while to reach its clocks (on an
#: H200 the default tensor-core GEMM measured 657.0 and 682.8 TFLOP/s as first trials
#: of two runs, 704.7 timed alone).
SPIN_UP_S = 0.3


def _short(exc: BaseException, n: int = 400) -> str:
    return f"{type(exc).__name__}: {exc}".strip().replace("\n", " | ")[:n]


def buffer_sets(set_bytes: int, l2_bytes: int) -> int:
    """How many copies of the arguments to rotate over: enough that their total exceeds
    ``L2_FACTOR`` times the L2 cache, at least 2, at most :data:`MAX_SETS`."""
    need = math.ceil(L2_FACTOR * max(l2_bytes, 1) / max(set_bytes, 1))
    return max(2, min(MAX_SETS, need))


# ---------------------------------------------------------------------------- device side
def device_info() -> dict:
    """What records say about the GPU (device 0): ``name``, ``arch`` (``sm_90``),
    ``compute_capability`` (``"9.0"``), ``driver`` (the kernel driver's version from
    ``/proc/driver/nvidia/version``, else ''), ``cuda`` (the CUDA version the driver
    supports, ``"12.8"``), limits (threads, shared memory, registers per block), L2 bytes
    and the multiprocessor count.

    Raises
    ------
    DeviceNotFoundError
        Without cuda-python, a driver or a device.
    """
    from polytile.targets.cuda.driver import check, context, device_compute_capability

    st = context()
    drv, dev = st["driver"], st["device"]
    cc = device_compute_capability()
    raw = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
    name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
    try:
        ver = int(check(drv.cuDriverGetVersion(), "cuDriverGetVersion"))
    except Exception:  # noqa: BLE001 - a driver (or emulation) without it
        ver = 0
    a = drv.CUdevice_attribute

    def attr(n: str) -> int:
        try:
            return int(check(drv.cuDeviceGetAttribute(getattr(a, n), dev), n))
        except Exception:  # noqa: BLE001 - an attribute this driver lacks
            return 0

    driver = ""
    try:
        with open("/proc/driver/nvidia/version") as fh:
            words = fh.readline().split()
        driver = next((w for w in words if w[:1].isdigit() and "." in w), "")
    except OSError:
        pass
    return {"name": name, "arch": f"sm_{cc[0]}{cc[1]}", "compute_capability":
            f"{cc[0]}.{cc[1]}", "driver": driver,
            "cuda": f"{ver // 1000}.{ver % 1000 // 10}" if ver else "",
            "max_threads_per_block": attr("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            "max_shared_memory_per_block":
                attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
            "max_shared_memory_per_block_optin":
                attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            "max_registers_per_block": attr("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK"),
            "l2_cache_bytes": attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
            "multi_processor_count": attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")}


class _Runner:
    """The state of the runner process: inputs, the reference, buffer sets by signature."""

    #: whether this process has launched for :data:`SPIN_UP_S` before a timing
    spun_up = False

    def __init__(self, setup: dict):
        self.setup = setup
        self.info = device_info()
        self.checked: set = set()      # sha256 of cubins checked once
        self.host = None               # parameter name -> numpy array (inputs)
        self.reference = None          # output name -> float64 array
        self.sets: dict = {}           # params signature -> list of argument lists

    # -------------------------------------------------------------- data
    def _host_inputs(self, params: list) -> dict:
        """Random inputs for the array parameters that are read: as the CPU workers make
        them (:func:`.data.make_inputs`: uniform in [-1, 1), small integers), seeded."""
        import numpy as np

        if self.host is None:
            rng = np.random.default_rng(self.setup.get("seed", 0))
            host = {}
            for p in params:
                if p["kind"] != "array" or p["written"]:
                    continue
                dt = np.dtype(p["dtype"]) if p["dtype"] != "bfloat16" else np.dtype("float32")
                shape = tuple(p["shape"])
                if p["dtype"] == "bfloat16":
                    # float32 holding bfloat16 values: the reference sees what the kernel
                    # reads (uploaded as bfloat16 by _sets)
                    from polytile.te.dtype import bfloat16_bits, bfloat16_to_float32

                    host[p["name"]] = bfloat16_to_float32(bfloat16_bits(
                        rng.uniform(-1, 1, shape).astype("float32")))
                elif dt.kind == "f":
                    host[p["name"]] = rng.uniform(-1, 1, shape).astype(dt)
                elif dt.kind in "iu":
                    host[p["name"]] = rng.integers(0, 8, shape).astype(dt)
                else:
                    host[p["name"]] = rng.integers(0, 2, shape).astype(dt)
            self.host = host
        return self.host

    def _reference(self, params: list) -> dict:
        """The template's numpy reference on float64 inputs, by output name."""
        import numpy as np

        if self.reference is None:
            from .template import get_template

            t = get_template(self.setup["template"], self.setup.get("source"))
            if t.reference is None:
                self.reference = {}
                return self.reference
            host = self._host_inputs(params)
            ins = [host[p["name"]].astype("float64") if host[p["name"]].dtype.kind == "f"
                   else host[p["name"]] for p in params
                   if p["kind"] == "array" and not p["written"]]
            want = t.reference(*ins, args=tuple(self.setup["args"]))
            want = want if isinstance(want, tuple) else (want,)
            outs = [p["name"] for p in params if p["kind"] == "array" and p["written"]]
            self.reference = {n: np.asarray(w) for n, w in zip(outs, want)}
        return self.reference

    def _sets(self, params: list) -> list:
        """Argument lists (device arrays) rotated over while timing: enough copies of the
        inputs and outputs to exceed the L2 cache; set 0 is the checked one."""
        import numpy as np

        import polytile

        sig = repr([(p["name"], p["dtype"], p.get("shape")) for p in params])
        if sig in self.sets:
            return self.sets[sig]
        if any(p["kind"] != "array" for p in params):
            raise TuneError(format_error("gpu_runner", "the function takes scalar parameters",
                                         "expected a function of arrays only (no symbolic "
                                         "sizes) on the GPU"))
        self.sets.clear()
        host = self._host_inputs(params)
        nbytes = sum(int(np.prod(p["shape"])) * np.dtype(p["dtype"] if p["dtype"] !=
                                                          "bfloat16" else "float16").itemsize
                     for p in params)
        n = buffer_sets(nbytes, int(self.info.get("l2_cache_bytes") or 50 << 20))
        out = []
        for _ in range(n):
            args = []
            for p in params:
                if p["written"]:
                    a = np.full(tuple(p["shape"]), np.nan if np.dtype(p["dtype"]).kind == "f"
                                else 0, dtype=p["dtype"])
                else:
                    a = host[p["name"]]
                args.append(polytile.nd.array(a, device="cuda", dtype="bfloat16"
                                              if p["dtype"] == "bfloat16" else None))
            out.append(args)
        self.sets[sig] = out
        return out

    # -------------------------------------------------------------- one candidate
    def run(self, cid, image: bytes, meta: dict, opt: dict) -> tuple:
        import numpy as np

        from polytile.errors import DeviceError
        from polytile.targets.cuda.library import CubinModule

        from .data import outputs_match
        from .timing import time_calls, timing_kwargs

        try:
            mod = CubinModule.from_data(image, meta)
            params = meta["params"]
            sets = self._sets(params)
            first = sets[0]
            key = hashlib.sha256(image + repr(meta["kernels"]).encode()).hexdigest()
            for p, a in zip(params, first):
                if p["written"]:
                    a.copyfrom(np.full(tuple(p["shape"]), np.nan if np.dtype(p["dtype"]).kind
                                       == "f" else 0, dtype=p["dtype"]))
            t0 = time.perf_counter()
            mod(*first)
            warm = time.perf_counter() - t0
            if opt.get("check") or key not in self.checked:
                ref = self._reference(params)
                for p, a in zip(params, first):
                    if p["written"] and p["name"] in ref:
                        want = ref[p["name"]]
                        ok, why = outputs_match(a.numpy(), want.astype(p["dtype"]),
                                                p["dtype"])
                        if not ok:
                            return ("ran", cid, "wrong_result", f"output {p['name']!r} "
                                    f"differs from the numpy reference: {why}", [], None, False)
                self.checked.add(key)
            cutoff = opt.get("cutoff_s")
            if cutoff is not None and warm > cutoff:
                # the first call loads the module: a second one decides
                t0 = time.perf_counter()
                mod(*first)
                warm = min(warm, time.perf_counter() - t0)
            if cutoff is not None and warm > cutoff:
                from .timing import Timing

                return ("ran", cid, None, f"slow: stopped after the warm-up run ({warm:.3g} "
                        f"s > {cutoff:.3g} s)", [warm], Timing((warm,), 1, warm).to_json(),
                        False)
            timing = self._time(mod, sets, opt, timing_kwargs(opt), time_calls)
        except DeviceError as exc:
            text = str(exc)
            fatal = "restart the process" in text
            return ("ran", cid, "runtime_error", _short(exc, 600), [], None, fatal)
        except Exception as exc:  # noqa: BLE001 - one candidate never ends the runner
            return ("ran", cid, "runtime_error", _short(exc), [], None, False)
        return ("ran", cid, None, "", list(timing.costs), timing.to_json(), False)

    @staticmethod
    def _time(mod, sets: list, opt: dict, kw: dict, time_calls):
        """CUDA events around ``n`` launches rotating over the buffer sets, after
        ``warmup`` launches; :func:`.timing.time_calls` plans the repeats."""
        prepared = []
        keep = []
        for args in sets:
            values, k = mod._convert(tuple(args))
            prepared.append(mod._prepare(values))
            keep.append(k)
        nsets = len(prepared)
        for k in range(max(1, int(opt.get("warmup", 3)))):
            mod._launch(prepared[k % nsets])
        mod._sync()
        if not _Runner.spun_up:
            _Runner.spun_up = True
            t0, k = time.perf_counter(), 0
            while time.perf_counter() - t0 < SPIN_UP_S:
                mod._launch(prepared[k % nsets])
                k += 1
                if k % 16 == 0:
                    mod._sync()
            mod._sync()
        state = {"next": 0}

        def launch_n(n: int) -> None:
            i = state["next"]
            for _ in range(n):
                mod._launch(prepared[i])
                i = (i + 1) % nsets
            state["next"] = i

        with mod.api.timer(mod.kernels, mod.name) as elapsed:
            timing = time_calls(lambda n: elapsed(launch_n, n), **kw)
        del keep
        return timing


def runner_main(conn) -> None:
    """Serve the protocol of the module docstring on ``conn``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the tuner's to handle
    from .orphan import exit_with_parent

    exit_with_parent()  # a tuner killed by a signal takes this process with it
    try:
        setup = conn.recv()
    except (EOFError, OSError):
        return
    try:
        r = _Runner(setup)
    except BaseException as exc:  # noqa: BLE001 - no device, no driver: say so and end
        conn.send(("error", _short(exc, 600), traceback.format_exc()[-2000:]))
        return
    conn.send(("ready", r.info))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "exit":
            return
        if msg[0] != "run" or not is_plain(msg):
            conn.send(("error", f"unknown command or not plain data: {str(msg[0])[:40]!r}", ""))
            continue
        reply = r.run(msg[1], msg[2], msg[3], msg[4])
        conn.send(reply)
        if reply[-1]:  # the context is poisoned: end, the tuner starts a fresh runner
            os._exit(3)


def is_plain(x) -> bool:
    """Whether ``x`` is plain data: None, bool, int, float, str, bytes, and lists, tuples
    and str-keyed dicts of them (what crosses to the runner; never an object or callable)."""
    if x is None or isinstance(x, (bool, int, float, str, bytes)):
        return True
    if isinstance(x, (list, tuple)):
        return all(is_plain(v) for v in x)
    if isinstance(x, dict):
        return all(isinstance(k, str) and is_plain(v) for k, v in x.items())
    return False


# ---------------------------------------------------------------------------- tuner side
class GPURunner:
    """The tuner's handle on the runner process: starts it, sends candidates, restarts it
    after a fault, a death or a timeout.

    Parameters
    ----------
    setup : dict
        ``template``, ``args``, ``dtype``, ``seed`` (plain data).
    command : list of str, optional
        The command line of the runner without its last argument (the connection's file
        descriptor); default: ``$POLYTILE_GPU_RUNNER`` (split like a shell line) when set,
        else ``python -m polytile.autotune.gpu_runner``. Tests pass a fake.
    start_timeout : float
        Seconds a runner may take to start and report its device.
    """

    def __init__(self, setup: dict, command: list | None = None, start_timeout: float = 120.0):
        self.setup = dict(setup)
        env = os.environ.get("POLYTILE_GPU_RUNNER")
        if command is None and env:
            import shlex

            command = shlex.split(env)
        self.command = list(command or [sys.executable, "-m", "polytile.autotune.gpu_runner"])
        self.start_timeout = start_timeout
        self.info: dict | None = None
        self.restarts = 0
        self._proc = None

    @property
    def pid(self) -> int | None:
        return self._proc.proc.pid if self._proc is not None else None

    def start(self) -> dict:
        """Start the runner (if not running) and return its :func:`device_info`.

        Raises
        ------
        TuneError
            When the runner cannot start or finds no GPU (the message says why).
        """
        if self._proc is not None and self._proc.is_alive():
            return self.info
        from .measure import _Proc

        p = _Proc(self.setup, command=self.command)
        if not p.conn.poll(self.start_timeout):
            p.kill()
            raise TuneError(format_error("gpu_runner", f"the GPU runner did not start in "
                                         f"{self.start_timeout:g} s"))
        try:
            msg = p.conn.recv()
        except (EOFError, OSError):
            why = p.death()
            p.kill()
            raise TuneError(format_error("gpu_runner", "the GPU runner failed to start: "
                                         + why)) from None
        if msg[0] != "ready":
            p.kill()
            why = str(msg[1]).split("; expected")[0].split(" | ")[0]  # the cause, not its hints
            raise TuneError(format_error(
                "gpu_runner", f"cannot time candidates on the GPU: {why}",
                "expected an NVIDIA GPU with its driver and cuda-python on this machine",
                hint="tune on the GPU machine; building alone needs no GPU"))
        self._proc = p
        if self.info is not None and msg[1].get("name") != self.info.get("name"):
            raise TuneError(format_error("gpu_runner", f"the restarted runner found "
                                         f"{msg[1].get('name')!r}, not {self.info['name']!r}"))
        self.info = msg[1]
        return self.info

    def _restart(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc = None
        self.restarts += 1

    def run(self, cid, image: bytes, meta: dict, options: dict, timeout: float) -> tuple:
        """Time one candidate; returns ``(code, msg, costs, timing_json)``. A fault, a
        death or no answer within ``timeout`` seconds restarts the runner (before the next
        candidate) and fails this one with what happened."""
        try:
            self.start()
        except TuneError as exc:
            return "runtime_error", f"GPU runner unavailable: {exc}"[:600], [], None
        p = self._proc
        msg = ("run", cid, bytes(image), meta, options)
        if not is_plain(msg):
            raise TuneError(format_error("gpu_runner", "a candidate's launch plan or options "
                                         "hold objects", "expected plain data (numbers, "
                                         "strings, bytes, lists, dicts)"))
        try:
            p.conn.send(msg)
            ok = p.conn.poll(timeout)
            reply = p.conn.recv() if ok else None
        except (EOFError, OSError):
            why = p.death()
            self._restart()
            return "runtime_error", f"the GPU runner died ({why}); restarted", [], None
        if reply is None:
            self._restart()
            return ("timeout", f"run: no answer within {timeout:g} s (hang?); the GPU runner "
                    "was killed and restarted", [], None)
        if reply[0] != "ran":
            return "runtime_error", f"runner: {reply[1]}", [], None
        _, _, code, msg, costs, timing, fatal = reply
        if fatal:
            self._restart()
            msg = f"{msg} (the CUDA context was lost; the GPU runner was restarted)"
        return code, msg, list(costs), timing

    def close(self) -> None:
        if self._proc is None:
            return
        try:
            self._proc.conn.send(("exit",))
            self._proc.proc.wait(timeout=5)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        self._proc.kill()
        self._proc = None


if __name__ == "__main__":
    from multiprocessing.connection import Connection

    runner_main(Connection(int(sys.argv[1])))
