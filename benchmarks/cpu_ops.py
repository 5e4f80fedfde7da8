"""Benchmark: polytile's CPU kernels beside numpy, torch and the machine's own bounds.

For softmax, layernorm and rmsnorm (4096 x 4096 float32), conv2d on ResNet-50 layer shapes
(NCHW and the blocked NCHW16c layout), depthwise conv2d and matmul, at 1 and 2 threads,
prints one line per figure: the kernel's time (median of interleaved rounds, with the
fastest round beside it), its rate (GB/s for the row kernels: bytes read + written; GFLOP/s
for the others) and its ratios. polytile runs the template's default config (the hand
schedule; ``polytile fast``: softmax's with ``te.fast_exp``; ``polytile -pf``: the row
kernels' default without its next-row prefetch); torch (when installed) runs
through ``out=`` variants where it has them, so that no kernel pays for allocating its
output; numpy runs single-threaded.

The bounds are measured in the same run:

* ``copy``: ``np.copyto`` of the row kernel's 64 MiB float32 input, one thread, timed in
  the kernel's own interleaved rounds: the memory-bound time of a row kernel is its bytes
  over that bandwidth (``polytile/bound`` 1.0 would be copy speed). The header also gives
  the copy bandwidth with two threads copying halves;
* ``fma``: a loop of independent vector FMAs held in registers (16 zmm accumulators with
  AVX-512, enough for two FMA pipes of 4-cycle latency; LLVM IR compiled for this CPU),
  the best of many short samples on one core, and with 2 threads the best of runs of all
  threads at once: the machine's peak GFLOP/s (``of fma peak``: the fraction a kernel
  reaches).

Ratios are given for the medians and, in parentheses, for the best rounds.

Rounds interleave the implementations (A B C A B C ...), so that a load spike hits them
alike; the load average is printed beside the figures, and ``wait``: the share of the
samples' time the process's threads spent runnable but waiting for a CPU (Linux
schedstat, all threads summed). On a machine shared with other jobs the figures are
indicative only, and 2-thread figures with a wait near 100 % measure the scheduler, not
the kernel: Linux shares the CPUs between sessions (autogroups) first, so while another
session keeps one thread busy a 2-thread process gets one CPU in all and every kernel's 2-
thread time equals its 1-thread time. ``--undisturbed SECONDS`` keeps only the samples
(about 2 ms each) with a wait under 3 % and samples, interleaved, until each line has
``--rounds`` of them or SECONDS have passed (``kept k/n`` on each line). Whole run: under 3
minutes (without ``--undisturbed``). Run: ``python benchmarks/cpu_ops.py [--only
softmax,conv2d] [--threads 1,2] [--rounds 7] [--clock cpu] [--undisturbed 60]``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import os
import pathlib
import statistics
import threading
import time

# torch's and polytile's OpenMP threads must not spin between calls (both read it at load)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

import polytile  # noqa: E402
from polytile.autotune import get_template  # noqa: E402

try:
    import torch  # noqa: E402
except ImportError:  # the figures are then against numpy only
    torch = None

ROW_SHAPE = (4096, 4096)
CONV_SHAPES = {  # ResNet-50 layers: (N, CI, H, W, CO, KH, KW, stride, pad)
    "56x56x64 3x3": (1, 64, 56, 56, 64, 3, 3, 1, 1),
    "28x28x128 3x3": (1, 128, 28, 28, 128, 3, 3, 1, 1),
    "14x14x256 3x3": (1, 256, 14, 14, 256, 3, 3, 1, 1),
    "7x7x512 3x3": (1, 512, 7, 7, 512, 3, 3, 1, 1),
    "56x56 256->64 1x1": (1, 256, 56, 56, 64, 1, 1, 1, 0),
}
DW_SHAPES = {  # MobileNet-style depthwise layers: (N, C, H, W, KH, KW, stride, pad)
    "112x112x32 3x3": (1, 32, 112, 112, 3, 3, 1, 1),
    "28x28x256 3x3": (1, 256, 28, 28, 3, 3, 1, 1),
    "14x14x512 3x3": (1, 512, 14, 14, 3, 3, 1, 1),
}


# ----------------------------------------------------------------------------- timing
def _calls_per_sample(fn, target_s: float = 0.01) -> int:
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return max(1, min(1000, int(target_s / max(dt, 1e-7))))


#: the clock of :func:`interleaved`: wall time, or with ``--clock cpu`` the calling
#: thread's CPU time (1 thread only: every implementation then runs on that thread, and
#: the time it spends descheduled on a busy machine is left out)
CLOCK = {"fn": time.perf_counter}

#: ``--undisturbed``: :func:`interleaved` keeps only samples during which the process's
#: threads waited for a CPU less than :data:`UNDISTURBED_WAIT` of the sample's wall time,
#: sampling for up to ``max_s`` seconds per figure (see :func:`interleaved`)
UNDISTURBED = {"on": False, "max_s": 60.0}
UNDISTURBED_WAIT = 0.03


def runqueue_wait() -> float | None:
    """Seconds the threads of this process have spent runnable but waiting for a CPU, in
    all (Linux ``/proc/self/task/*/schedstat``, second field; threads that ended since are
    not counted); None where the file is unavailable.

    Why: on a machine shared with other sessions the kernel splits the CPUs between
    sessions (autogroups) before threads, so a 2-thread kernel gets one CPU's time in all
    as soon as another session keeps one thread busy: both threads then wait in the run
    queue as long as they run, and the 2-thread time equals the 1-thread time whatever
    the kernel (polytile's conv2d and matmul, torch's alike). This wait tells a figure
    disturbed so from a kernel that does not scale."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total * 1e-9


def interleaved(fns: dict, rounds: int, waits: dict | None = None) -> dict:
    """``{name: (median, min)}`` seconds per call of each function of ``fns``, timed in
    ``rounds`` interleaved rounds (each sample at least about 10 ms of calls).

    ``waits``, when given, receives ``{name: (wait, kept, taken)}``: the process's run-queue
    wait (:func:`runqueue_wait`, all threads) over the kept samples as a fraction of their
    time, and how many samples were kept of those taken. With ``UNDISTURBED["on"]`` the
    samples are shorter (about 2 ms) and only those with a wait under
    :data:`UNDISTURBED_WAIT` of their time count: sampling goes on, interleaved, until
    every function has ``rounds`` of them or ``UNDISTURBED["max_s"]`` seconds have passed
    (a function with none then reports its least disturbed sample)."""
    quiet = UNDISTURBED["on"] and runqueue_wait() is not None
    reps = {k: _calls_per_sample(f, 0.002 if quiet else 0.01) for k, f in fns.items()}
    samples: dict = {k: [] for k in fns}  # (seconds per call, wait share)
    taken = dict.fromkeys(fns, 0)
    least = {}  # the least disturbed sample of each function, where none is kept
    clock = CLOCK["fn"]
    t_end = time.perf_counter() + UNDISTURBED["max_s"]
    rnd = 0
    while True:
        for k, f in fns.items():
            if quiet and len(samples[k]) >= rounds:
                continue
            n = reps[k]
            w0, wall0, t0 = runqueue_wait(), time.perf_counter(), clock()
            for _ in range(n):
                f()
            dt = clock() - t0
            wall = time.perf_counter() - wall0  # the wait's share is of the wall time
            w1 = runqueue_wait()
            share = (w1 - w0) / wall if w0 is not None and w1 is not None and wall > 0 \
                else 0.0
            taken[k] += 1
            if not quiet or share < UNDISTURBED_WAIT:
                samples[k].append((dt / n, share))
            elif k not in least or share < least[k][1]:
                least[k] = (dt / n, share)
        rnd += 1
        if not quiet and rnd >= rounds:
            break
        if quiet and (all(len(v) >= rounds for v in samples.values())
                      or time.perf_counter() > t_end):
            break
    out = {}
    for k, v in samples.items():
        v = v or [least[k]]
        ts = [t for t, _ in v]
        out[k] = (statistics.median(ts), min(ts))
        if waits is not None:
            waits[k] = (statistics.mean(w for _, w in v), len(samples[k]), taken[k])
    return out


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def set_threads(n: int) -> None:
    polytile.set_num_threads(n)
    if torch is not None:
        torch.set_num_threads(n)


def in_threads(fn_of_part, n: int):
    """A function running ``fn_of_part(k)`` for ``k < n`` in ``n`` Python threads (the
    callees release the GIL: ctypes calls, numpy copies)."""
    if n == 1:
        return lambda: fn_of_part(0)

    def run():
        ts = [threading.Thread(target=fn_of_part, args=(k,)) for k in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    return run


# ----------------------------------------------------------------------------- bounds
#: independent FMA chains of the peak microkernel: an FMA's latency (4 cycles on Zen 4/5
#: and Skylake-SP) times the FMA pipes (two) must be covered by chains in flight; 16 leave
#: room over the 8 needed and half of AVX-512's 32 registers free
FMA_ACCUMULATORS = 16


def fma_kernel(acc: int = FMA_ACCUMULATORS):
    """``(f(iterations, part=0), flop per iteration, description)``: a loop of ``acc``
    independent ``<L x float>`` FMA chains in registers (L = 16, zmm, with AVX-512, else 8,
    ymm), compiled through llvmlite for this CPU; ``part`` picks a buffer of its own per
    thread."""
    import llvmlite.binding as llvm

    from polytile.targets.llvm import runtime

    runtime._ensure_llvm()  # llvmlite initialised for this CPU
    feats = llvm.get_host_cpu_features().flatten()
    lanes = 16 if "+avx512f" in feats else 8
    vt = f"<{lanes} x float>"
    lines = [f"declare {vt} @llvm.fma.v{lanes}f32({vt}, {vt}, {vt})",
             "define void @fma_peak(float* noalias %p, i64 %n) {",
             "entry:",
             f"  %vp = bitcast float* %p to {vt}*",
             f"  %x = load {vt}, {vt}* %vp, align 4",
             f"  %yp = getelementptr {vt}, {vt}* %vp, i64 1",
             f"  %y = load {vt}, {vt}* %yp, align 4",
             "  br label %loop", "loop:",
             "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    for a in range(acc):
        lines.append(f"  %a{a} = phi {vt} [%y, %entry], [%b{a}, %loop]")
    for a in range(acc):
        lines.append(f"  %b{a} = call {vt} @llvm.fma.v{lanes}f32({vt} %a{a}, {vt} %x, "
                     f"{vt} %y)")
    lines += ["  %i1 = add i64 %i, 1", "  %c = icmp ult i64 %i1, %n",
              "  br i1 %c, label %loop, label %exit", "exit:"]
    prev = "%b0"
    for a in range(1, acc):
        lines.append(f"  %s{a} = fadd {vt} {prev}, %b{a}")
        prev = f"%s{a}"
    lines += [f"  store {vt} {prev}, {vt}* %vp, align 4", "  ret void", "}"]
    mod = llvm.parse_assembly("\n".join(lines))
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=feats, opt=3)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("fma_peak"))
    bufs = [np.full(2 * lanes, 0.5, dtype="float32") for _ in range(8)]
    for b in bufs:
        b[lanes:] = 1e-3

    def run(iters: int, part: int = 0):
        fn(bufs[part].ctypes.data, iters)
    run._keep = (engine, mod)  # the machine code lives as long as the engine
    desc = f"{acc} x {'zmm' if lanes == 16 else 'ymm'} ({lanes} x float32) FMA chains"
    return run, 2 * lanes * acc, desc


def _best(fn, samples: int) -> float:
    """The fastest of ``samples`` calls of ``fn`` (seconds): a bound is what the machine
    can do, so the least disturbed sample is the one that shows it."""
    fn()
    best = float("inf")
    for _ in range(samples):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bounds(threads: list[int], rounds: int) -> dict:
    """Copy bandwidth (bytes/s, read + written: the median round and the best one) and FMA
    peak (FLOP/s) per thread count, and the FMA kernel's description under ``"fma_kernel"``.
    The 1-thread peak is the best of many short samples (about 0.1 ms) on one core; with
    more threads, every thread runs the kernel at once for about 2 ms (long against the
    start of the Python threads) and the peak is their flop over the best wall time: two
    threads on two cores show twice the 1-thread peak, two hyperthreads of one core or a
    core taken by another job show less."""
    n = 16 << 20
    src = np.random.default_rng(0).uniform(-1, 1, n).astype("float32")
    dst = np.empty_like(src)
    fma, flop_per_iter, desc = fma_kernel()
    fma(2_000_000)  # a few ms at full load first: the core's clock settles
    iters = 20_000  # about 0.1 ms: short samples, so that some run undisturbed
    peak = iters * flop_per_iter / _best(lambda: fma(iters), 300)
    out = {"fma_kernel": desc}
    for th in threads:
        if th == 1:
            fma_th = peak
        else:
            long_iters = 1_000_000
            fma_th = th * long_iters * flop_per_iter / _best(
                in_threads(lambda k: fma(long_iters, k), th), 20)
        half = n // th
        copy = in_threads(lambda k: np.copyto(dst[k * half:(k + 1) * half],
                                              src[k * half:(k + 1) * half]), th)
        r = interleaved({"copy": copy}, rounds)
        out[th] = {"copy": 2 * src.nbytes / r["copy"][0],
                   "copy_best": 2 * src.nbytes / r["copy"][1], "fma": fma_th}
    return out


# ----------------------------------------------------------------------------- kernels
def build_template(name: str, args: tuple, **knobs):
    """The template's default config (with ``knobs`` changed) built for llvm, with its
    inputs and output."""
    from polytile.autotune.worker import make_inputs

    t = get_template(name)
    sp = t.space(args)
    cfg = sp.get(sp.default_index())
    if knobs:
        want = dict(cfg.knob_values(), **knobs)
        cfg = next(sp.get(k) for k in range(len(sp)) if sp.get(k).knob_values() == want)
    s, tensors = t.instantiate(cfg, args)
    f = polytile.build(s, tensors, target="llvm")
    arrays = make_inputs(tensors, seed=1)
    f(*arrays)
    ref = np.asarray(t.reference(*[a.astype("float64") for a in arrays[:-1]], args=args))
    err = np.abs(arrays[-1] - ref).max() / max(np.abs(ref).max(), 1e-30)
    if not err < 1e-4:
        raise SystemExit(f"{name}{args}: wrong result (relative error {err:.2e})")
    return (lambda: f(*arrays)), arrays


def _rows_numpy(name: str, arrays):
    a, o = arrays[0], arrays[-1]
    tmp = np.empty_like(a)
    if name == "softmax":
        def run():
            np.subtract(a, a.max(axis=1, keepdims=True), out=tmp)
            np.exp(tmp, out=tmp)
            np.multiply(tmp, 1.0 / tmp.sum(axis=1, keepdims=True), out=o)
    elif name == "layernorm":
        g, b = arrays[1], arrays[2]

        def run():
            np.subtract(a, a.mean(axis=1, keepdims=True), out=tmp)
            rstd = 1.0 / np.sqrt(np.mean(tmp * tmp, axis=1, keepdims=True) + 1e-5)
            np.multiply(tmp, rstd, out=o)
            np.multiply(o, g, out=o)
            np.add(o, b, out=o)
    else:
        g = arrays[1]

        def run():
            np.multiply(a, a, out=tmp)
            rstd = 1.0 / np.sqrt(tmp.mean(axis=1, keepdims=True) + 1e-6)
            np.multiply(a, rstd, out=o)
            np.multiply(o, g, out=o)
    return run


def _rows_torch(name: str, arrays):
    if torch is None:
        return None
    ts = [torch.from_numpy(x) for x in arrays]
    a, o = ts[0], ts[-1]
    if name == "softmax":
        return lambda: torch.ops.aten._softmax.out(a, 1, False, out=o)
    if name == "layernorm":
        mean, rstd = torch.empty(a.shape[0], 1), torch.empty(a.shape[0], 1)
        return lambda: torch.ops.aten.native_layer_norm.out(
            a, [a.shape[1]], ts[1], ts[2], 1e-5, out0=o, out1=mean, out2=rstd)
    return lambda: torch.nn.functional.rms_norm(a, (a.shape[1],), ts[1], eps=1e-6)


def _conv_torch(arrays, args, depthwise: bool):
    if torch is None:
        return None
    a, w = torch.from_numpy(arrays[0]), torch.from_numpy(arrays[1])
    stride, pad = args[-2], args[-1]
    if depthwise:
        w = w.unsqueeze(1).contiguous()
        return lambda: torch.nn.functional.conv2d(a, w, stride=stride, padding=pad,
                                                  groups=a.shape[1])
    return lambda: torch.nn.functional.conv2d(a, w, stride=stride, padding=pad)


def _line(kernel: str, th: int, impl: str, t: tuple, rate: str, extra: str, load: str,
          wait: tuple | None = None) -> None:
    """One figure; ``wait`` as :func:`interleaved` reports it: the run-queue wait share of
    the samples (and with ``--undisturbed`` the samples kept of those taken)."""
    w = ""
    if wait is not None:
        w = f" wait {wait[0] * 100:3.0f}%"
        if UNDISTURBED["on"]:
            w += f" kept {wait[1]}/{wait[2]}"
    print(f"{kernel:25s} {th}t {impl:12s} {t[0] * 1e3:8.3f} ms (min {t[1] * 1e3:8.3f}) "
          f"{rate:>14s}  {extra}  [load {load}{w}]", flush=True)


@contextlib.contextmanager
def _without_row_prefetch():
    """Templates instantiated inside leave out the row kernels' next-row prefetch
    (:func:`polytile.autotune.templates_nn._prefetch_next_row`), for the ``polytile -pf``
    line: what the prefetch gains, in the same rounds."""
    from polytile.autotune import templates_nn

    keep = templates_nn._prefetch_next_row
    templates_nn._prefetch_next_row = lambda *a: None
    try:
        yield
    finally:
        templates_nn._prefetch_next_row = keep


def bench_rows(name: str, threads, rounds, bnd) -> None:
    """A row kernel beside numpy, torch and ``np.copyto`` of its input, all in the same
    interleaved rounds: the memory-bound time is the kernel's bytes (read + written) over
    the copy's bandwidth of the same rounds."""
    m, n = ROW_SHAPE
    run, arrays = build_template(name, ROW_SHAPE)
    nbytes = sum(x.nbytes for x in arrays)
    src, dst = arrays[0], np.empty_like(arrays[0])
    copy_bytes = 2 * src.nbytes
    fns = {"polytile": run}
    if name == "softmax":  # the same schedule with te.fast_exp (3 ulp)
        fns["polytile fast"] = build_template(name, ROW_SHAPE, fast_exp=True)[0]
    with _without_row_prefetch():  # what the next-row prefetch gains
        fns["polytile -pf"] = build_template(name, ROW_SHAPE)[0]
    # numpy and torch write outputs of their own: stores of theirs into polytile's output
    # leave its lines dirty in the cache, and polytile's streaming stores to them then ran
    # up to 1.8x slower (layernorm 16 vs 9 ms), an artifact of the benchmark
    others = [*arrays[:-1], np.empty_like(arrays[-1])]
    fns["numpy"] = _rows_numpy(name, others)
    if torch is not None:
        fns["torch"] = _rows_torch(name, others)
    fns["copy"] = lambda: np.copyto(dst, src)
    kernel = f"{name} {m}x{n}"
    for th in threads:
        set_threads(th)
        waits: dict = {}
        r = interleaved(fns, rounds, waits)
        load = loadavg()
        bound = tuple(nbytes / copy_bytes * t for t in r.pop("copy"))
        pt = r["polytile"]
        for impl, t in r.items():
            extra = f"polytile/bound {t[0] / bound[0]:5.2f} (best {t[1] / bound[1]:4.2f})" \
                if impl.startswith("polytile") else \
                f"{impl}/polytile {t[0] / pt[0]:5.2f} (best {t[1] / pt[1]:4.2f})"
            _line(kernel, th, impl, t, f"{nbytes / t[0] / 1e9:6.1f} GB/s", extra, load,
                  waits[impl])
        _line(kernel, th, "bound (copy)", bound, f"{nbytes / bound[0] / 1e9:6.1f} GB/s",
              "np.copyto, 1 thread, same rounds", load, waits["copy"])


def bench_conv(threads, rounds, bnd, depthwise: bool) -> None:
    shapes = DW_SHAPES if depthwise else CONV_SHAPES
    names = ["depthwise_conv2d_nchwc", "depthwise_conv2d_nchw"] if depthwise \
        else ["conv2d_nchwc", "conv2d_nchw"]
    for label, args in shapes.items():
        t0 = get_template(names[0])
        flop = t0.flops(args)
        fns, arrays = {}, None
        for nm in names:
            run, arrs = build_template(nm, args)
            fns[nm.replace("depthwise_conv2d_", "dw_").replace("conv2d_", "")] = run
            arrays = arrays or arrs
        tf = _conv_torch(arrays, args, depthwise)
        if tf is not None:
            fns["torch"] = tf
        else:  # the template's numpy reference (einsum per tap) as the anchor
            ref, ins = t0.reference, (arrays[0], arrays[1])
            fns["numpy"] = lambda ref=ref, ins=ins, args=args: ref(*ins, args=args)
        kernel = f"{'depthwise' if depthwise else 'conv2d'} {label}"
        for th in threads:
            set_threads(th)
            waits: dict = {}
            r = interleaved(fns, rounds, waits)
            load = loadavg()
            first = next(iter(r))
            pt = r[first]
            for impl, t in r.items():
                extra = (f"of fma peak {flop / bnd[th]['fma'] / pt[0]:5.2f} "
                         f"(best {flop / bnd[th]['fma'] / pt[1]:4.2f})" if impl == first
                         else f"{impl}/{first} {t[0] / pt[0]:5.2f} (best {t[1] / pt[1]:4.2f})")
                _line(kernel, th, impl, t, f"{flop / t[0] / 1e9:6.1f} GFLOP/s", extra, load,
                      waits[impl])


def bench_matmul(threads, rounds, bnd, n: int = 1024) -> None:
    """The tutorial's best hand schedule (what ``benchmarks/cpu_matmul.py`` times) beside
    numpy (timed in a process of its own, as there) and torch."""
    path = pathlib.Path(__file__).resolve().parent.parent / "tutorials" / "02_cpu_matmul.py"
    spec = importlib.util.spec_from_file_location("cpu_matmul_tutorial", path)
    tut = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tut)
    from polytile.autotune.tune import measure_numpy_isolated

    s, targs = tut.best(n)
    f = polytile.build(s, targs, target="llvm")
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (n, n)).astype("float32") for _ in range(2))
    c = np.empty((n, n), dtype="float32")
    fns = {"polytile": lambda: f(a, b, c)}
    if torch is not None:
        ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
        fns["torch"] = lambda: torch.matmul(ta, tb, out=tc)
    flop = 2.0 * n**3
    for th in threads:
        set_threads(th)
        waits: dict = {}
        r = interleaved(fns, rounds, waits)
        t_np = measure_numpy_isolated("matmul", [n, n, n], threads=th)["median"]
        r["numpy"] = (t_np, t_np)
        load = loadavg()
        pt = r["polytile"]
        for impl, t in r.items():
            extra = f"of fma peak {flop / bnd[th]['fma'] / pt[0]:5.2f} " \
                f"(best {flop / bnd[th]['fma'] / pt[1]:4.2f})" if impl == "polytile" \
                else f"{impl}/polytile {t[0] / pt[0]:5.2f} (best {t[1] / pt[1]:4.2f})"
            _line(f"matmul {n}^3", th, impl, t, f"{flop / t[0] / 1e9:6.1f} GFLOP/s", extra,
                  load, waits.get(impl))


KERNELS = ("softmax", "layernorm", "rmsnorm", "conv2d", "depthwise", "matmul")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(KERNELS),
                    help=f"comma-separated kernels among {', '.join(KERNELS)}")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds per figure")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time (with --threads 1 only; "
                    "for a busy machine)")
    ap.add_argument("--undisturbed", type=float, default=0, metavar="SECONDS",
                    help="keep only samples during which no thread of this process waited "
                    f"for a CPU (under {UNDISTURBED_WAIT:.0%} of the time), sampling up to "
                    "SECONDS per figure (a shared machine's figures at 2 threads)")
    args = ap.parse_args()
    if args.undisturbed > 0:
        if runqueue_wait() is None:
            ap.error("--undisturbed needs Linux's /proc/self/task/*/schedstat")
        UNDISTURBED.update(on=True, max_s=args.undisturbed)
    if args.clock == "cpu":
        if args.threads != "1":
            ap.error("--clock cpu needs --threads 1 (other threads' time is not counted)")
        CLOCK["fn"] = time.thread_time
    only = [k for k in args.only.split(",") if k]
    bad = sorted(set(only) - set(KERNELS))
    if bad:
        ap.error(f"unknown kernel(s) {bad}; expected some of {list(KERNELS)}")
    threads = sorted({int(x) for x in args.threads.split(",")} | {1})
    t_start = time.perf_counter()
    print(f"torch {torch.__version__ if torch is not None else 'not installed'}, numpy "
          f"{np.__version__}, {os.cpu_count()} CPUs, {args.clock} clock, load {loadavg()}")
    bnd = bounds(threads, args.rounds)
    for th in threads:
        print(f"bound {th}t: copy (np.copyto{' in ' + str(th) + ' threads' if th > 1 else ''}) "
              f"{bnd[th]['copy'] / 1e9:6.1f} GB/s median, {bnd[th]['copy_best'] / 1e9:.1f} "
              f"best; fma peak {bnd[th]['fma'] / 1e9:7.1f} GFLOP/s  [load {loadavg()}]",
              flush=True)
    print(f"fma peak kernel: {bnd['fma_kernel']}")
    threads = [int(x) for x in args.threads.split(",")]
    for k in only:
        if k in ("softmax", "layernorm", "rmsnorm"):
            bench_rows(k, threads, args.rounds, bnd)
        elif k == "conv2d":
            bench_conv(threads, args.rounds, bnd, depthwise=False)
        elif k == "depthwise":
            bench_conv(threads, args.rounds, bnd, depthwise=True)
        else:
            bench_matmul(threads, args.rounds, bnd)
    print(f"total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
