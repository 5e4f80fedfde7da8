"""Benchmark: float16/bfloat16 GEMM configs of the ``cuda`` ``matmul`` template timed
interleaved with cuBLAS and Triton in one process, the way the tuned figure is reported.

Every side is timed the same way, turn by turn: CUDA events around ``calls`` launches
after 2 warm-ups, ``rounds`` rounds whose order is reversed every other round (A B C / C B
A), so that clock and thermal drift weigh on every side alike, after a second of untimed
turns; a side's figure is the median of its rounds. Two modes per run: *same buffers*
(every launch reads the same ``A``, ``B``, as ``time_evaluator`` and the torch anchor
do) and *rotated* (launches rotate over copies of the operands whose total exceeds twice
the L2 cache, as the GPU runner of the tuner times candidates). cuBLAS is
``torch.matmul`` (a float16/bfloat16 ``C``); Triton is ``benchmarks/triton_gemm.py`` at
the best of its ``CONFIGS`` (chosen first); the polytile kernels write a float32 ``C``
(the template's compute: twice the bytes), checked against ``A.float() @ B.float()``
before timing.

Run on the GPU machine::

    python benchmarks/gemm_final.py --dtypes float16 bfloat16 --config default \
        --config '{"tile": [128, 256, 64, 64, 256], "stages": 4}'

``--config`` takes knob values of the template (missing knobs: the default config's);
``default`` names the default config. :func:`final_line` is what
``benchmarks/tune_gpu.py --triton`` prints after a tuning run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

TARGET = "cuda -arch=sm_90a"


def build_config(args: tuple, dtype: str, knobs: dict | None, target: str = TARGET):
    """The ``matmul`` template's kernel for knob values ``knobs`` (None or missing knobs:
    the default config's) at ``args = (M, N, K)``, built for ``target`` with the limits
    of device 0; returns ``(function, effective knob values)``."""
    import polytile
    from polytile.autotune import gpu_limits
    from polytile.autotune.gpu_runner import device_info
    from polytile.autotune.template import get_template

    t = get_template("matmul")
    with gpu_limits.use(gpu_limits.from_device(device_info())):
        sp = t.space(args, dtype, target)
        full = {**sp.default().knob_values(), **(knobs or {})}
        cfg = sp.from_json(full)
        s, tensors = t.instantiate(cfg, args, dtype, target)
    return polytile.build(s, tensors, target=target), full


def _operand_sets(args: tuple, dtype: str, n_sets: int):
    import torch

    M, N, K = args
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    g = torch.Generator().manual_seed(0)
    a = (torch.rand(M, K, generator=g) * 2 - 1).to(tdt).cuda()
    b = (torch.rand(K, N, generator=g) * 2 - 1).to(tdt).cuda()
    sets = [(a, b)] + [(a.clone(), b.clone()) for _ in range(n_sets - 1)]
    return sets, a.float() @ b.float()


def _polytile_calls(f, sets, M: int, N: int):
    """Per set, a closure launching ``f`` on it (launch records prepared once)."""
    import torch

    calls, keep = [], []
    for a, b in sets:
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
        values, k = f._convert((a, b, c))
        prepared = f._prepare(values)
        keep += [k, prepared, c]
        calls.append(lambda p=prepared: f._launch(p))
    return calls, keep


def _cycle(calls):
    state = {"i": 0}

    def call():
        calls[state["i"]]()
        state["i"] = (state["i"] + 1) % len(calls)

    return call


def interleaved(sides: dict, rounds: int = 8, calls: int = 30,
                warmup_s: float = 1.0) -> dict:
    """Seconds per call of each side of ``sides`` (name -> zero-argument launch), timed
    alternately (module docstring) after ``warmup_s`` seconds of untimed turns (a GPU
    that idled while kernels were built runs its first turns on boosted clocks): name ->
    per-round seconds."""
    import time

    import torch

    out: dict = {n: [] for n in sides}
    names = list(sides)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup_s:
        for fn in sides.values():
            for _ in range(calls):
                fn()
        torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            fn = sides[n]
            fn()
            fn()
            start.record()
            for _ in range(calls):
                fn()
            stop.record()
            stop.synchronize()
            out[n].append(start.elapsed_time(stop) / 1e3 / calls)
    return out


def sustained(sides: dict, rounds: int = 3, calls: int = 50, settle_s: float = 0.3) -> dict:
    """Seconds per call of each side of ``sides`` (name -> zero-argument launch), each
    timed on its own clocks: per round and side, ``settle_s`` seconds of the side's own
    untimed calls (the GPU's clock and power state settles on that kernel's load), then
    CUDA events around ``calls`` back-to-back calls; sides in alternating order per round.
    Why beside :func:`interleaved`: there a side's batch of a few milliseconds starts on the
    clocks the previous side left, so a kernel that draws less power than cuBLAS is timed
    on cuBLAS's clocks; here each side on those of a long run of itself. Returns name ->
    (per-round seconds, per-round SM clock in MHz after the batch, None where torch cannot
    read it)."""
    import time

    import torch

    def clock():
        try:
            return torch.cuda.clock_rate()
        except Exception:  # noqa: BLE001 - no NVML: no clock reading
            return None

    out: dict = {n: ([], []) for n in sides}
    names = list(sides)
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            fn = sides[n]
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < settle_s:
                for _ in range(10):
                    fn()
                torch.cuda.synchronize()
            for _ in range(4):
                fn()
            start.record()
            for _ in range(calls):
                fn()
            stop.record()
            stop.synchronize()
            out[n][0].append(start.elapsed_time(stop) / 1e3 / calls)
            out[n][1].append(clock())
    return out


def final_line(args: tuple, dtype: str, configs: dict, rounds: int = 8,
               label: str = "") -> dict:
    """Time the polytile ``configs`` (name -> knob values or None for the default) beside
    cuBLAS and Triton, interleaved (module docstring); prints one line per mode and side
    and returns mode -> name -> TFLOP/s (medians)."""
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    M, N, K = args
    flops = 2.0 * M * N * K
    per_set = (M * K + K * N) * 2 + M * N * 4
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    n_sets = max(2, -(-2 * l2 // per_set))
    sets, ref = _operand_sets(args, dtype, n_sets)
    kernels, keep = {}, []
    for name, knobs in configs.items():
        try:
            f, full = build_config(args, dtype, knobs)
        except Exception as exc:  # noqa: BLE001 - report, time the others
            print(f"  {name}: does not build: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
        f(sets[0][0], sets[0][1], c)
        err = ((c - ref).norm() / ref.norm()).item()
        if not err < 1e-3:
            print(f"  {name}: WRONG result (relative error {err:.2e}); not timed")
            continue
        calls, k = _polytile_calls(f, sets, M, N)
        keep.append(k)
        kernels[name] = (calls, full)
    triton = None
    try:
        import triton_gemm

        def tflops_of(fn):
            times = interleaved({"t": fn}, 3, 20, warmup_s=0.2)["t"]
            return flops / statistics.median(times) / 1e12

        _, cfg = triton_gemm.best_tflops(*sets[0], tflops_of)
        triton = lambda a, b: triton_gemm.matmul(a, b, cfg)   # noqa: E731
    except Exception as exc:  # noqa: BLE001 - report, the other figures stand
        print(f"  Triton: not measured ({type(exc).__name__}: {str(exc)[:100]})")
    figures = {}
    for mode in ("same buffers", "rotated"):
        use = sets[:1] if mode == "same buffers" else sets
        sides = {n: _cycle(c[:len(use)]) for n, (c, _) in kernels.items()}
        sides["cuBLAS"] = _cycle([lambda a=a, b=b: torch.matmul(a, b) for a, b in use])
        if triton is not None:
            sides["Triton"] = _cycle([lambda a=a, b=b: triton(a, b) for a, b in use])
        times = interleaved(sides, rounds)
        tf = {n: flops / statistics.median(ts) / 1e12 for n, ts in times.items()}
        figures[mode] = tf
        spread = {n: (max(ts) - min(ts)) / statistics.median(ts) for n, ts in times.items()}
        anchors = [a for a in ("cuBLAS", "Triton") if a in tf]
        for n in tf:
            ratios = "".join(f"  {tf[n] / tf[a]:6.3f} x {a}" for a in anchors if a != n)
            print(f"  {label}{dtype} {M}x{N}x{K} [{mode}, {n_sets if mode == 'rotated' else 1}"
                  f" set(s), {rounds} rounds interleaved] {n:14s} {tf[n]:7.1f} TFLOP/s "
                  f"(range {spread[n] * 100:4.1f} %){ratios}", flush=True)
    del keep
    return figures


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--args", default="4096,4096,4096")
    ap.add_argument("--dtypes", nargs="+", default=["float16"],
                    choices=("float16", "bfloat16"))
    ap.add_argument("--config", action="append", default=[],
                    help="knob values as JSON (repeatable), or 'default'")
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args(argv)
    args = tuple(int(x) for x in a.args.split(","))
    configs = {}
    for k, c in enumerate(a.config or ["default"]):
        configs["default" if c == "default" else f"cfg{k}"] = None if c == "default" \
            else json.loads(c)
        if c != "default":
            print(f"  cfg{k} = {c}")
    for dtype in a.dtypes:
        final_line(args, dtype, configs, a.rounds)


if __name__ == "__main__":
    main()
