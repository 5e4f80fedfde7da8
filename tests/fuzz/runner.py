"""Run one case (in a worker process) and classify it.

Classes (``CLASSES``):

``ok``
    built, ran, and every output agrees with the reference within its tolerance;
``refused``
    ``ScheduleError``/``LoweringError`` whose message names the primitive (``split: ...``)
    and a stage, as the house style asks;
``wrong``
    an output differs from the reference (or keeps the poison value);
``vague``
    a refusal whose message does not name its primitive and a stage (the house format
    ``<primitive>: ... 'stage' ...``);
``crash``
    any other exception from inside the compiler or the built function (``InternalError``,
    ``BuildError``, ``TypeError``, a failing run-time check, ...), or the worker process
    killed by a signal;
``hang``
    no answer within the timeout (build or run);
``invalid``
    the case itself is ill-formed (its program does not build, a step names a loop that does
    not exist, the reference finds an out-of-bounds read): a fuzzer problem, or a
    candidate of the shrinker to discard.

Tolerances: integers and bools exactly; floats within the error bound of
:mod:`.reference` plus one ulp of the output dtype (float16 on ``cuda`` also ``8 u`` times
the magnitude of the computation, for float32 intermediates). NaN matches NaN.
"""

from __future__ import annotations

import re
import time
import traceback

import numpy as np

from polytile import LoweringError, ScheduleError
from polytile.te import dtype as dt

from . import reference
from .spec import args_of, ident, program_code, schedule_code, tensor_names

CLASSES = ("ok", "refused", "vague", "wrong", "crash", "hang", "invalid")
FAILURES = ("vague", "wrong", "crash", "hang")
_NAMED = re.compile(r"^[\w.]+: ")


def make_inputs(placeholders: list, data: dict) -> dict:
    """Random inputs for ``placeholders`` (``(name, shape, dtype)`` in parameter order):
    floats uniform in [-1, 1) with ``|x| >= 1e-3`` (``uniform``), multiples of 1/8 in
    [-2, 2] (``grid``, exact in float16 sums), or uniform with a few NaN in one float input
    (``nan``); int8 over its whole range, int32 in [-1000, 1000], never 0."""
    out = {}
    mode = data.get("mode", "uniform")
    g = np.random.default_rng([int(data.get("seed", 0)), 7])
    floats = []
    for name, shape, d in placeholders:
        shape = tuple(int(x) for x in shape)
        if dt.is_float(d):
            if mode == "grid":
                x = g.integers(-16, 17, shape).astype(np.float64) / 8
                x[x == 0] = 0.125
            else:
                x = g.uniform(-1, 1, shape)
                x = np.where(np.abs(x) < 1e-3, 0.5, x)
            floats.append(name)
        elif d == "int8":
            x = g.integers(-128, 128, shape)
        elif d == "int4":
            x = g.integers(-8, 8, shape)
        elif d == "bool":
            x = g.integers(0, 2, shape)
        else:
            x = g.integers(-1000, 1001, shape)
        if not dt.is_float(d) and d != "bool":
            x = np.where(x == 0, 1, x)
        if d == "bfloat16":
            out[name] = np.ascontiguousarray(dt.bfloat16_bits(x))
            continue
        if d == "int4":  # two elements per byte (te/dtype.py)
            out[name] = dt.pack_int4(x, d)
            continue
        out[name] = np.ascontiguousarray(np.asarray(x).astype(d))
    if mode == "nan" and floats:
        a = out[floats[int(g.integers(len(floats)))]].reshape(-1)
        k = max(1, a.size // 10)
        a[g.permutation(a.size)[:k]] = 0x7FC0 if a.dtype == np.uint16 else np.nan
    return out


def poison(shape, dtype: str, which: int) -> np.ndarray:
    """Output filled with a value a correct run overwrites: NaN or -77.5 (floats; bfloat16
    as its bit patterns), the dtype's max or min (ints)."""
    if dtype == "bfloat16":
        return np.full(shape, 0x7FC0 if which == 0 else dt.bfloat16_bits(-77.5), np.uint16)
    if dt.is_int4(dtype):  # packed: max or min in both nibbles
        return np.full(dt.packed_shape(shape), 0x77 if which == 0 else 0x88, np.uint8)
    if dtype.startswith("float"):
        return np.full(shape, np.nan if which == 0 else -77.5, dtype)
    if dtype == "bool":
        return np.full(shape, which == 0, bool)
    info = np.iinfo(dtype)
    return np.full(shape, info.max if which == 0 else info.min, dtype)


def compare(out: np.ndarray, res: reference.Result, dtype: str, relaxed: bool) -> tuple:
    """``(number of wrong elements, number checked, description of the worst ones)``."""
    sure = ~res.unsure
    if dtype == "bfloat16":
        out = dt.bfloat16_values(out)
    if dt.is_int4(dtype) and res.value.shape:
        out = dt.unpack_int4(out, res.value.shape[-1], dtype)
    if dt.is_float(dtype):
        o, r = out.astype(np.float64), res.value.astype(np.float64)
        tol = reference.tolerance(res, dtype, relaxed and dtype == "float16")
        with np.errstate(all="ignore"):
            same_nan = np.isnan(o) & np.isnan(r)
            ok = same_nan | (o == r) | (np.abs(o - r) <= tol)
    else:
        ok = out == res.value
        tol = np.zeros(out.shape)
    bad = ~ok & sure
    n = int(bad.sum())
    lines = []
    if n:
        idx = np.argwhere(bad)[:4]
        for i in idx:
            i = tuple(int(x) for x in i)
            lines.append(f"[{', '.join(map(str, i))}] = {out[i]!r}, expected {res.value[i]!r}"
                         + (f" (tolerance {float(tol[i]):.3g})" if dt.is_float(dtype)
                            else ""))
    return n, int(sure.sum()), lines


#: primitives of one stage: their refusals must name the stage
STAGE_PRIMITIVES = ("split", "tile", "fuse", "reorder", "vectorize", "unroll", "parallel",
                    "bind", "compute_at", "compute_inline", "compute_root", "cache_read",
                    "cache_write", "rfactor", "storage_align", "pragma", "double_buffer",
                    "pipeline")


def _refusal(ex: Exception, stages: list) -> str:
    """``refused`` for a well-formed refusal (``<primitive>: ...``, naming a stage when the
    primitive acts on one), else ``vague``."""
    msg = str(ex)
    m = _NAMED.match(msg)
    if not m:
        return "vague"
    if m.group(0)[:-2] in STAGE_PRIMITIVES and not any(f"'{s}'" in msg for s in stages):
        return "vague"
    return "refused"


def _outcome(cls: str, phase: str, ex: BaseException | None = None, **kw) -> dict:
    out = {"cls": cls, "phase": phase}
    if ex is not None:
        out["error"] = type(ex).__name__
        out["message"] = str(ex)[:2000]
        if cls == "crash":
            out["traceback"] = "".join(traceback.format_exception(ex)[-6:])[-3000:]
    out.update(kw)
    return out


class Runtime:
    """How built functions run in this process: ``llvm`` on numpy arrays; ``cuda`` on the
    GPU when there is one, else on the host emulation of ``tests/targets/cuda_emulator``
    after compiling every source with nvcc too (so invalid CUDA C is caught)."""

    def __init__(self, target: str, workdir: str | None = None):
        self.target = target
        self.emulated = False
        self.workdir = workdir
        self.pending: list = []   # nvcc compiles running beside the emulator's g++
        if target == "cuda":
            self._setup_cuda()

    def finish(self, ignore: bool = False) -> None:
        """Wait for the nvcc compiles of the last build; raise the first ``BuildError``
        (unless ``ignore``)."""
        while self.pending:
            fut = self.pending.pop(0)
            try:
                fut.result()
            except Exception:
                if not ignore:
                    self.finish(ignore=True)
                    raise

    def _setup_cuda(self) -> None:
        from polytile.targets.cuda import runtime

        if runtime.device_count() > 0:
            return
        if getattr(runtime.compile_cuda, "fuzz_emulated", False):
            self.emulated = True
            return
        import importlib.util
        import pathlib
        import tempfile

        path = pathlib.Path(__file__).resolve().parents[1] / "targets" / "cuda_emulator.py"
        spec = importlib.util.spec_from_file_location("cuda_emulator", path)
        emu = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(emu)
        self.workdir = self.workdir or tempfile.mkdtemp(prefix="polytile-fuzz-")
        from concurrent.futures import ThreadPoolExecutor

        from polytile.targets.cuda import compile as cc

        real = runtime.compile_cuda
        workdir, pending, pool = self.workdir, self.pending, ThreadPoolExecutor(1)

        def compile_both(source, arch=None, options=(), **kw):
            # nvcc checks the source (in a thread, while g++ builds it for the emulator)
            if cc.available_compiler() is not None:
                kw = {**kw, "cache_dir": workdir}
                pending.append(pool.submit(real, source, "sm_90", options, **kw))
            return emu.emulated_compile(source)

        compile_both.fuzz_emulated = True
        runtime._state.clear()
        runtime._state["driver"] = emu.EmulatedDriver(self.workdir)
        runtime.compile_cuda = compile_both
        runtime.default_arch = lambda: "sm_90"
        self.emulated = True

    def build(self, s, args):
        import polytile

        return polytile.build(s, args, target=self.target)

    def call(self, f, arrays: list) -> list:
        if self.target != "cuda":
            f(*arrays)
            return arrays
        import polytile

        dev = [polytile.nd.array(a, device="cuda") for a in arrays]
        f(*dev)
        return [d.numpy() for d in dev]


def concrete(shape, dims: dict | None) -> tuple:
    """``shape`` with its symbolic sizes (``te.size_var``) bound to their values in
    ``dims`` (dim name -> int)."""
    if not dims:
        return tuple(shape)
    return tuple(int(eval(str(x), {}, dict(dims))) for x in shape)  # noqa: S307 - ours


def _key(a) -> str:
    return reference.tuple_key(a.name, a.value_index)


def check_function(f, args, prog_inputs: dict, results: dict, runtime: Runtime,
                   dims: dict | None = None) -> dict:
    """Run built ``f`` twice (two poisons) and compare its outputs with ``results``
    (``dims``: the values of the symbolic sizes of ``args``' shapes)."""
    in_names = set(prog_inputs)
    problems, checked, total = [], 0, 0
    for which in (0, 1):
        arrays, outs = [], []
        for a in args:
            if a.name in in_names:
                arrays.append(prog_inputs[a.name].copy())
            else:
                outs.append(len(arrays))
                arrays.append(poison(concrete(a.shape, dims), a.dtype, which))
        got = runtime.call(f, arrays)
        for k in outs:
            a = args[k]
            n, c, lines = compare(got[k], results[_key(a)], a.dtype, runtime.target == "cuda")
            if which == 0:
                checked, total = checked + c, total + results[_key(a)].value.size
            if n:
                problems.append(f"{n} of {results[_key(a)].value.size} elements of {_key(a)} "
                                f"are wrong"
                                f"{' (second poison)' if which else ''}: " + "; ".join(lines))
        for k, a in enumerate(args):
            if a.name in in_names and not np.array_equal(got[k], prog_inputs[a.name],
                                                         equal_nan=True):
                problems.append(f"input {a.name} was modified by the run")
        if problems:
            break
    return {"problems": problems, "checked": checked, "total": total}


def run_case(case: dict, runtime: Runtime) -> dict:
    """Build, run and check ``case``; return its outcome dict (``cls``, ``phase``,
    ``error``, ``message``, ``detail``, ``checked``/``total`` elements, ``seconds``)."""
    from polytile import te

    t0 = time.perf_counter()
    runtime.finish(ignore=True)
    prog = case["program"]
    ns: dict = {"te": te}
    dims = prog["dims"] if prog.get("symbolic") else None
    try:
        exec(program_code(prog), ns)  # noqa: S102
        names = [n for t in prog["tensors"] for n in tensor_names(t)]
        tensors = {n: ns[ident(n)] for n in names}
        args = [tensors[n] for n in args_of(prog)]
        ref_ns = ns
        if dims:  # the reference evaluates the same program with every size static
            ref_ns = {"te": te}
            exec(program_code(prog, static=True), ref_ns)  # noqa: S102
        ref_args = [ref_ns[ident(n)] for n in args_of(prog)]
        inputs = make_inputs(_placeholders(ref_args), case.get("data", {}))
        results = reference.evaluate([ref_ns[ident(o)] for o in prog["outputs"]], inputs)
    except Exception as ex:  # noqa: BLE001 - the case is ill-formed
        return _outcome("invalid", "program", ex)
    stages = [t["name"] for t in prog["tensors"]]
    try:
        exec(schedule_code(prog, case["steps"]), ns)  # noqa: S102
    except (ScheduleError, LoweringError) as ex:
        return _outcome(_refusal(ex, _all_stages(ns, stages)), "schedule", ex)
    except LookupError as ex:
        if "has no loop named" in str(ex):
            return _outcome("invalid", "schedule", ex)
        return _outcome("crash", "schedule", ex)
    except Exception as ex:  # noqa: BLE001
        return _outcome("crash", "schedule", ex)
    stages = _all_stages(ns, stages)
    t1 = time.perf_counter()
    try:
        f = runtime.build(ns["s"], args)
    except (ScheduleError, LoweringError) as ex:
        return _outcome(_refusal(ex, stages), "build", ex)
    except Exception as ex:  # noqa: BLE001
        return _outcome("crash", "build", ex)
    t2 = time.perf_counter()
    try:
        chk = check_function(f, args, inputs, results, runtime, dims)
    except ValueError as ex:
        # a kernel whose shared memory grows with symbolic sizes is refused at the call
        # for sizes that need more than a block may have (tests/symbolic/test_symbolic_cuda)
        if "bytes of shared memory for the sizes" in str(ex):
            return _outcome("refused", "run", ex)
        return _outcome("crash", "run", ex)
    except Exception as ex:  # noqa: BLE001
        return _outcome("crash", "run", ex)
    try:
        runtime.finish()
    except Exception as ex:  # noqa: BLE001 - nvcc rejected the generated CUDA C
        return _outcome("crash", "build", ex)
    # (symbolic sizes: the interpreter allocates buffers of static shapes only)
    # (run on wrong numbers too: a race says why; fuzz cuda 92869 was reported wrong
    # with no word of its missing barrier)
    if runtime.target == "cuda" and not dims:
        try:
            chk["problems"] = chk["problems"] + thread_races(ns["s"], args, inputs, dims)
        except Exception as ex:  # noqa: BLE001
            if not chk["problems"]:   # (wrong numbers stay the finding)
                return _outcome("crash", "run", ex)
    timing = {"seconds": round(time.perf_counter() - t0, 3), "build_s": round(t2 - t1, 3)}
    if chk["problems"]:
        return _outcome("wrong", "check", detail="\n".join(chk["problems"]),
                        checked=chk["checked"], total=chk["total"], **timing)
    return _outcome("ok", "check", checked=chk["checked"], total=chk["total"], **timing)


#: the most GPU threads (all kernels, all blocks) of a case whose loop IR the reference
#: interpreter runs to look for races, and the seconds it may take (it runs about 50 000
#: statements a second; past that, the case goes unchecked for races)
RACE_CHECK_THREADS = 4096
RACE_CHECK_SECONDS = 5.0


class _OutOfTime(Exception):
    pass


def thread_races(s, args, prog_inputs: dict, dims: dict | None = None) -> list:
    """The races of the GPU schedule ``s`` (``[]`` when none, or when it has more than
    :data:`RACE_CHECK_THREADS` threads): its loop IR run by the reference interpreter,
    which runs a block's threads barrier to barrier and raises on a race or a barrier
    that not every thread reaches. The emulator and a GPU run threads in an order that
    can hide both."""
    import polytile
    from polytile.schedule import interpreter
    from polytile.schedule.loop_ir import KernelLaunch, StmtVisitor

    func = polytile.lower(s, args)
    launches: list = []

    class _Launches(StmtVisitor):
        def visit_KernelLaunch(self, k: KernelLaunch):
            if not all(isinstance(x, int) for x in (*k.grid, *k.block)):
                launches.append(RACE_CHECK_THREADS + 1)  # a symbolic grid: not checked
                return
            launches.append(int(np.prod(k.grid)) * int(np.prod(k.block)))

    _Launches().visit(func.body)
    if sum(launches) > RACE_CHECK_THREADS:
        return []
    arrays = [prog_inputs[a.name].copy() if a.name in prog_inputs
              else poison(concrete(a.shape, dims), a.dtype, 0) for a in args]
    import signal
    import threading

    timed = threading.current_thread() is threading.main_thread()
    if timed:
        def _stop(signum, frame):
            raise _OutOfTime

        old = signal.signal(signal.SIGALRM, _stop)
        signal.setitimer(signal.ITIMER_REAL, RACE_CHECK_SECONDS)
    try:
        interpreter.run(func, *arrays)
    except _OutOfTime:
        return []
    except interpreter.RaceError as ex:
        return [f"race: {ex}"]
    except RuntimeError as ex:
        if "barrier" in str(ex):
            return [f"barrier: {ex}"]
        raise
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    return []


def _placeholders(args) -> list:
    from polytile.te.tensor import PlaceholderOp

    return [(a.name, a.shape, a.dtype) for a in args if isinstance(a.op, PlaceholderOp)]


def check_script(f, args, target, data: dict, static_args=None, dims=None) -> str:
    """Run built ``f`` of a reproducer script on the case's data and compare with the
    reference: ``"ok ..."`` or the wrong elements. ``target``: a name or a Runtime.
    With symbolic sizes, ``static_args`` are the same tensors with every size static
    (the reference evaluates them) and ``dims`` the sizes' values."""
    from polytile.te.tensor import PlaceholderOp

    ref_args = static_args or args
    inputs = make_inputs(_placeholders(ref_args), data)
    outs = [a for a in ref_args if not isinstance(a.op, PlaceholderOp)]
    results = reference.evaluate(outs, inputs)
    rt = target if isinstance(target, Runtime) else Runtime(target)
    chk = check_function(f, args, inputs, results, rt, dims)
    rt.finish()
    if chk["problems"]:
        return "wrong: " + "\n".join(chk["problems"])
    return f"ok: {chk['checked']} of {chk['total']} output elements agree with the reference"


def _all_stages(ns: dict, names: list) -> list:
    s = ns.get("s")
    if s is None:
        return names
    return names + [st.op.name for st in s.stages]


def signature(out: dict) -> tuple:
    """What must stay the same while shrinking: the class, and for crashes the phase and
    the exception type (or the signal)."""
    if out["cls"] in ("crash", "vague"):
        return (out["cls"], out.get("phase"), out.get("error"))
    return (out["cls"],)
