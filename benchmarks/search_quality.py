"""Search quality of the tuners: best-so-far curves of the model tuner and random search,
averaged over seeds, and whether the model tuner reaches in N trials what random search
finds in 4N (issue 13); the gain of a warm start from records of a nearby shape.

Two modes:

* ``--mode replay`` (default): for each template a pool of ``--pool`` configs drawn
  uniformly from its space is measured once (:func:`polytile.autotune.replay.measure_pool`,
  cached as JSON in ``--cache``, reused by later runs), then every tuner and seed *replays*
  its search against that pool: the tuners choose among the pool's configs only and get
  their recorded costs (:class:`~polytile.autotune.replay.ReplayOracle`). Cheap (a
  second per search), and every tuner sees the same costs, so the comparison does not
  depend on the machine's load during the search; but it measures the ranking of
  unmeasured configs, not the model tuner's exploration of the whole space. Output lines
  say REPLAY.
* ``--mode live``: real tuning runs (:func:`polytile.autotune.tune`, the default config
  not measured first), each tuner and seed one after the other; best-so-far is taken
  relative to the best config any run found. Slow, and on a shared machine the load
  differs between runs.

Figures: best-so-far as a fraction of the best known cost (1.0: the pool's best in replay
mode), mean over seeds, at trials N/2, N, 2N, 4N for each N of ``--trials``; the headline
per N: the model tuner's mean at N against random search's mean at 4N, and in how many
seeds the model tuner's best at N is at least as fast as random's best at 4N (same seed).
``--transfer`` (replay only): a second pool at a nearby shape warm-starts the model tuner;
prints the trials each needs to reach 95 % of the pool's best, with and without.

CPU (2 cores shared: indicative only). Measure the pools with one thread, many short
repeats and take the fastest repeat: pools timed with 2 threads at load 7-11 (the
default options) had load artefacts for their best configs (a softmax config at 0.32 ms
timed again at 1.0-1.2 ms like its neighbours), and the curves chased them::

    python benchmarks/search_quality.py --templates matmul conv2d softmax --pool 192 \
        --seeds 12 --trials 8 16 24 --threads 1 --short-repeats --stat min --cache sq_cpu

``benchmarks/pools/`` holds CPU pools of 192 configs measured that way (costs and
features rounded to 4 digits), replayed with ``--cache benchmarks/pools --pool 192``:
conv2d (2-core AVX-512 VM, rocketlake, load 10-13, 2026-12-01); matmul 256^3 (load 10),
softmax 512x1024 (load 3) and its transfer source softmax 1024x512 (load 7), timed again
on a 2-core znver5 VM on 2026-12-02 because their configs lowered to other loop nests
than when timed (row templates' next-row prefetch and tree combine; lowering changes:
70 of 192 softmax, 69 of 186 matmul configs) and the matmul space had grown from 9.3M
to 22.6M configs. ``tests/autotune/test_pools.py`` fails when a pool is stale that way.

Figures (2026-12-02, replay of those pools, ``--stat min --no-measure --trials 8 16 24
32 48 64 --plot DIR``, ``--transfer`` for softmax; fraction of the pool's best, mean over
seeds; ``r@4N``: random@4N; at N >= 48 random@4N sees the whole pool, so it is 1.000 by
construction). Seeds 0-31 (``--seeds 32``), on which earlier sessions chose their
changes, and seeds 2000-2047 (``--seeds 48 --seed-offset 2000``), held out: no change of
this version was chosen on them::

                    seeds 0-31                     seeds 2000-2047 (held out)
               N  model@N random@N  r@4N  model-r@4N   model@N random@N  r@4N  model-r@4N
    matmul     8   0.814   0.814   0.942  -.128+-.025   0.773   0.773   0.938  -.165+-.023
              16   0.928   0.884   0.983  -.055+-.016   0.906   0.892   0.977  -.071+-.013
              24   0.938   0.929   0.989  -.050+-.014   0.945   0.922   0.994  -.050+-.010
              32   0.980   0.942   0.998  -.018+-.007   0.974   0.938   0.998  -.024+-.007
              48   0.994   0.968   1.000                0.992   0.966   1.000
              64   0.995   0.983   1.000                0.997   0.977   1.000
    conv2d     8   0.559   0.559   0.837  -.278+-.031   0.643   0.643   0.841  -.198+-.031
              16   0.833   0.687   0.918  -.085+-.029   0.812   0.743   0.914  -.102+-.027
              24   0.918   0.798   0.946  -.029+-.019   0.906   0.779   0.956  -.050+-.021
              32   0.952   0.837   0.982  -.030+-.012   0.931   0.841   0.979  -.047+-.019
              48   0.986   0.895   1.000                0.996   0.881   1.000
              64   1.000   0.918   1.000                0.999   0.914   1.000
    softmax    8   0.830   0.787   0.943  -.113+-.017   0.854   0.772   0.921  -.067+-.018
              16   0.972   0.896   0.986  -.014+-.012   0.983   0.840   0.976  +.006+-.008
              24   0.997   0.926   0.995  +.002+-.002   0.997   0.879   0.993  +.003+-.002
              32   1.000   0.943   0.997                0.999   0.921   0.997
    softmax, warm start from 1024x512 (seeds 0-31): 8 0.993, 16 0.998, 24 0.999 (>=
              random@4N at every N, in 23/32, 30/32, 31/32 seeds; 95 % of the pool's
              best in a median 3 trials, cold 11)

The model tuner is at least random search at every trial count k on all three (seeds
0-31; on the held-out seeds 0.9 points behind on matmul at k = 14, 3 of 192 k). It
reaches random@4N on softmax from N = 16 (cold) and at every N warm-started; on matmul
and conv2d it is 5 points short at N = 24 and 2-5 points at N = 32, and level (within
0.3-1.4 points of the whole pool's best) from N = 48. ``--plot`` draws the model's and
random search's mean curves and random search at 4x the trials (dashed).
``tests/autotune/test_search_quality_cpu.py`` holds these figures to a stated margin
(and checks that random search in the model's place misses it).

Tried this session on seeds 1000-1023 (24 seeds, matmul and conv2d gaps to random@4N
at N = 24 of -4.0 and -5.3 points), none better than the seed-to-seed noise (2-3
points) on both: the whole pool ranked by the loop-IR model (-6.1, -9.5) or by the rank
average of both models (-3.8, -5.5); no diversity (-4.0, -4.9) or picks 3 knobs apart
(-4.3, -3.0); shortlists of 2 or 5 per slot (-4.0 / -4.1; -4.0 / -7.6); column
subsampling of the trees (-4.1, -6.4); depth 3 or 6 (-4.0 / -4.4; -4.6 / -4.3); eta
0.1 (-3.6, -7.6); regression on log throughput (-3.7, -6.2); a space-filling first
batch (maximin knob distance; -5.2, -4.5, and 9 points lower at N = 8 on matmul); knob
features with the product of the split factors per level (the register and cache tile
volumes: -4.9, -7.2; with shortlists of 2: -2.5, -4.7, on the held-out seeds -5.4,
-4.2 against -4.7, -5.3); the final pick by the knob model alone (-4.3, -4.8);
Thompson sampling over bootstrap-trained boosters (-4.8 to -6.0, -6.5 to -9.7). Why:
random@96 sees half of a 192-config pool, and the pools' top is a few configs (matmul:
three within 0.7 % of the best, the next at 93.4 %; conv2d: one within 5 %, three within
10 %), so matching it at 24 trials means finding one of them in 16 model-picked trials,
with models whose Spearman rho on the unseen configs is 0.2-0.3 (matmul) and 0.25-0.75
(conv2d) after 8-16 measurements.

Tried on 2026-12-02 (evening) on seeds 1000-1063 (64 seeds; model@24 against the
default's on the same seeds, paired, mean +- standard error, matmul / conv2d / softmax;
the default: 0.960 / 0.921 / 0.998, random@96 0.991 / 0.969 / 0.992), none better
than the noise on conv2d without a loss on matmul: one-hot knob values in the knob
features (-0.1 / -0.8+-1.2 / 0.0 points; with splits one-hot too -0.1 / -0.1+-1.0 /
0.0); local proposals, 2 of each batch of 8 taken among the unmeasured configs nearest
(fewest knobs apart) to the 3 best measured, ranked by the loop-IR model (+0.5 /
+0.3 / 0.0; 4 of 8: +0.7 / -1.6; 8 near the best one: -1.6 / -3.9); choosing each batch
between the loop-IR and the knob model by 4-fold cross-validated Kendall tau on the
measured configs (-0.4 / -0.2+-1.0 / 0.0; the knob model always: -0.7 / -0.1 / +0.1,
although on conv2d it ranks unseen configs better, rho 0.51 / 0.69 against 0.25 / 0.55
after 8 / 16 random ones); regression objectives on the throughput fraction
(reg:squarederror -1.0 / -5.5 / -0.8, reg:logistic -1.8 / -9.6 / -2.0; the ranking
objective is insensitive to a log of its labels); epsilon 0 or 0.1 (0 / 0 / 0, -0.2 /
-0.8 / 0). A prior on the hand-written default helps conv2d and hurts matmul: the pool's
configs nearest the default as half the first batch, with the number of knobs differing
from the default as a knob feature: +3.3+-1.4 / -3.8+-1.1 points (conv2d's pool best is
4 knobs from the default, the pool's mean quality falls from 0.60 at 2 knobs to 0.05 at
8; matmul's best three are 8-9 knobs away). Not kept.

Transfer on conv2d (``--transfer --transfer-pool-seed 1``): the 64-output-channel pool
``conv2d_nchw_1x32x28x28x64x3x3x1x1_llvm_n192_s1`` (192 configs drawn with seed 1: one
config in common with the 32-channel pool, so the warm model generalises rather than
looking up costs; znver4 VM, load 3, 2026-12-02) warm-starts the model tuner on the
32-channel pool, held-out seeds 2000-2047: model@8 / 16 / 24 0.885 / 0.944 / 0.981
against random@32 / 64 / 96 0.841 / 0.914 / 0.956 (cold 0.643 / 0.812 / 0.906; at least
random@4N in 28, 32, 42 of 48 seeds); 95 % of the pool's best in a median 16 trials
(cold 30, random 97). A source pool drawn with the target's seed holds the *same* 192
configs (spaces of the same size): with it the warm model found the pool's best in its
first batch in 48 of 48 seeds (model@8 1.000), which says little about transfer; the
softmax pair above (both seed 0) is such a pair. Its source drawn with seed 1
(``softmax_1024x512_llvm_n192_s1``, 35 configs in common with the target's 192 of a
896-config space; znver4 VM, load 2, 2026-12-02), held-out seeds 2000-2047: warm
model@8 / 16 / 24 0.971 / 0.995 / 0.998 against random@32 / 64 / 96 0.921 / 0.976 /
0.993 (cold 0.854 / 0.983 / 0.997); 95 % of the best in a median 1 trial (cold 9.5).

N = 8 cannot be reached cold: the first batch (8 configs) is random but for neighbours of
the default config, rare in a pool of a large space, so model@8 = random@8. Tried in
earlier sessions, all within the noise or mixed in sign: rank:ndcg or pairs limited to
the top 8 (worse); one model on loop-IR and knob features together; no diversity in a
batch; a first batch of 4; batches of 4 (+0-2.5 points: more retraining, the same
trials); an ensemble of three boosters. Found and fixed then: the warm start's own
measurements were outweighed by the source's rows (192 against 8-24; see
``ModelTuner._group_weights``): on the first pair of softmax pools (timed at load 16
and 21) the warm model found the pool's best in a median 28.5 trials, now 11.

Tuner overhead (:func:`polytile.autotune.tune` of matmul 256^3, 32 trials, model tuner,
2 build workers, the tuner's methods timed by wrapping them; 2-core VM, 2026-12-02,
this version (B) against the one before (A: 3 lowerings per batch slot, builds lowering
again) interleaved A/B/A/B/A/B/A/B; loads 15-19, 10-17, 3-7, 7-8). Per trial, A -> B:
the model's training and search 0.02-0.06 s in the tuner process, 5-15 % of the
measurement (0.2-0.9 s per trial: warm-up, data, repeats; the kernel itself takes
0.15 ms); lowering the shortlist for features 0.66-1.27 s -> 0.16-0.64 s; the loop's
wall time 224 / 212 / 140 / 192 s -> 189 / 32 / 79 / 93 s (the last two pairs at equal
load: 0.57x, 0.48x). Builds (lowering and LLVM, 0.65 s per config at load 12) remain
10-30x the measurement of so small a kernel on 2 cores: the 10 % bar of issue 13 holds
for the model's own work, not for building.

GPU templates (issue 11): ``--templates`` words take a dtype (``matmul:float16``,
``layernorm:float16``; float32 without one), pool files name the dtype and the target's
``-arch``. A pool is drawn from the configs the tuners search (the template's preferred
configs: the GEMMs leave out duplicate kernels and known slow regions, 282 of 39,744 fp32
configs at 2048^3; ``--full-space`` for all). On the GPU machine, measure pools within a
budget each (``--pool-budget``: no batch starts after it; one line per candidate on
stdout; the pool is saved as candidates finish and on SIGTERM, and a later run continues
it; the next batch builds while one runs), then replay them anywhere (``--no-measure``
takes pools cut short as they are; no GPU needed)::

    timeout -k 5 60 python benchmarks/search_quality.py --target "cuda -arch=sm_90a" \
        --templates matmul --pool 500 --parallel 12 --pool-budget 40 --build-timeout 10 \
        --seeds 2 --trials 2 --cache sq_gpu
    python benchmarks/search_quality.py --target "cuda -arch=sm_90a" --templates matmul \
        --pool 500 --seeds 32 --trials 4 8 16 --no-measure --cache sq_gpu --plot sq_png

H200 pools in ``benchmarks/pools`` (sm_90a, 2026-12-02; measured in two device runs of
about 75 s each: fp32 GEMM 2048^3 113 of its 282 searched configs, softmax fp16 4096^2
85 of 127, fp16 tensor-core GEMM 2048^3 93 of 421), replayed with ``--seeds 32 --trials
2 4 8 16 --no-measure --cache benchmarks/pools`` (fraction of the pool's best, mean over
seeds; k <= 8 is the model tuner's first batch, half neighbours of the default config,
half random)::

                 k:   1      2      4      8      16     32     model@16 vs random@64
    fp32 GEMM model 0.594  0.767  0.909  0.941  0.979  0.996   0.979 vs 0.995
             random 0.567  0.787  0.880  0.933  0.961  0.974
    softmax  model  0.874  0.956  0.975  0.991  0.998  1.000   0.998 vs 1.000
      fp16   random 0.878  0.951  0.984  0.994  0.997  0.999
    fp16 GEMM model 1.000  1.000  1.000  1.000  1.000  1.000   1.000 vs 0.890
             random 0.449  0.511  0.568  0.597  0.675  0.772

(fp16 GEMM: the pool's one wgmma config, 0.034 ms against 0.052 ms for the best
mma.sync one, is a one-knob neighbour of the default, which the first batch tries.)

The model tuner is ahead of random search once it picks (k > 8) on the fp32 GEMM (1-2
points) and even on softmax; 4x as sample-efficient only on the fp16 GEMM (random@4N
covers much of an 85-113 config pool). Two GPU feature faults were found and fixed on
these pools: the knob model saw a GEMM's ``tile`` as its index among 2208 tiles
(Spearman rho of its ranking 0.14-0.21, now 0.44-0.80 from 8-32 configs), and the
loop-IR features of a tensor-core GEMM described a shared-memory copy loop (the MMA
calls hold no Store; rho 0.36-0.69, now 0.39-0.72). The fp32 GEMM's first batch trails
random at k = 2-3: many of the pool's one-knob neighbours of the (unpooled) default are
slow or fail to build.

Why an earlier run measured none of 24 fp32 GEMM configs in its time (2026-12-02): a
pool was saved only after each batch of 16 builds, and a batch took as long as its
slowest build: the loop-IR features of a 2048^3 SGEMM candidate took 18-31 s for one
config in four (every let evaluated again for each of 1000+ unrolled indices; now
0.2-0.5 s), and some configs fail their lowering only after 60-210 s ("could not
be verified in bounded time": killed at the build timeout).

Two pools of 160 fp32 matmul configs timed on the device, 2048^3 and 2048x2048x1024, then
the replays (about 4 minutes; run it again if ``timeout`` stops it: cached pools are
continued, not measured again)::

    timeout 290 python benchmarks/search_quality.py --target cuda --templates matmul \\
        --pool 160 --seeds 12 --trials 8 16 32 --transfer --cache sq_cache --plot sq_png

The same CPU figures on a quiet many-core machine (the GPU host)::

    timeout 290 python benchmarks/search_quality.py --templates matmul softmax conv2d \\
        --pool 192 --seeds 12 --trials 8 16 32 --threads 1 --transfer --cache sq_cache
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import sys
import time

#: (template, target kind) -> (workload args, nearby shape for --transfer)
SHAPES = {
    ("matmul", "llvm"): ((256, 256, 256), (320, 256, 192)),
    ("conv2d_nchw", "llvm"): ((1, 32, 28, 28, 32, 3, 3, 1, 1), (1, 32, 28, 28, 64, 3, 3, 1, 1)),
    ("softmax", "llvm"): ((512, 1024), (1024, 512)),
    ("matmul", "cuda"): ((2048, 2048, 2048), (2048, 2048, 1024)),
    ("softmax", "cuda"): ((4096, 4096), (4096, 2048)),
    ("layernorm", "cuda"): ((4096, 4096), (4096, 2048)),
}
ALIASES = {"conv2d": "conv2d_nchw"}


def split_spec(spec: str) -> tuple:
    """``(template, dtype)`` of a ``--templates`` word: ``name`` (float32) or
    ``name:dtype`` (``matmul:float16``); aliases resolved (``conv2d``)."""
    name, _, dtype = spec.partition(":")
    return ALIASES.get(name, name), dtype or "float32"


def pool_file(name: str, args, dtype: str, target: str, n: int, seed: int,
              full_space: bool = False) -> str:
    """The cache file name of a pool: template, shape, dtype (float32 pools keep the
    names they had before pools had a dtype), target kind, the arch when the target
    names one (``sm_90a``), ``all`` for a pool drawn from every config of the space
    (``--full-space``), size and seed."""
    words = target.split()
    arch = next((w.split("=", 1)[1] for w in words[1:] if w.startswith("-arch=")), None)
    parts = [name, "x".join(map(str, args))] + ([dtype] if dtype != "float32" else []) \
        + [words[0]] + ([arch] if arch else []) + (["all"] if full_space else []) \
        + [f"n{n}", f"s{seed}"]
    return "_".join(parts) + ".json"


def _entry_line(k, n, e, r, t0):
    """One stdout line per measured pool candidate (a run cut short still shows how far
    it got and what each candidate cost)."""
    what = (f"{1e3 * min(e['costs']):.4g} ms" if e["costs"] else
            f"{e['error']}: {(r.error_msg or '')[:120]}")
    print(f"    [{k}/{n} {time.perf_counter() - t0:.1f} s] {e['config']} -> {what} "
          f"(build {r.build_s:.2f} s)", flush=True)


def _pool(a, name, args, dtype, measure_pool, Pool, MeasureOptions, seed=None):
    os.makedirs(a.cache, exist_ok=True)
    seed = a.pool_seed if seed is None else seed
    slug = pool_file(name, args, dtype, a.target, a.pool, seed, a.full_space)
    path = os.path.join(a.cache, slug)
    if os.path.exists(path):
        if a.remeasure:
            os.remove(path)
        else:
            pool = Pool.load(path)
            want = min(a.pool, pool.candidates or pool.space_size or a.pool)
            if len(pool.entries) >= want or a.no_measure:
                return pool, "cached" + ("" if len(pool.entries) >= want else
                                         f" ({len(pool.entries)} of {want} measured)")
    if a.no_measure:
        sys.exit(f"--no-measure: no pool {path}")
    t0 = time.perf_counter()

    def progress(done, n):
        print(f"    measuring pool {name}{tuple(args)}: {done}/{n} "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    short = dict(repeat=7, max_repeats=40, min_repeat_ms=1.0, budget_s=0.15) \
        if a.short_repeats else {}
    if a.build_timeout:
        short["build_timeout"] = a.build_timeout
    opt = MeasureOptions(parallel=a.parallel or 0, threads=a.threads or 0, **short)
    print(f"  measuring pool {path} ({a.pool} configs, budget "
          f"{a.pool_budget or 'none'} s, {opt.parallel} build workers)", flush=True)
    pool = measure_pool(name, args, dtype, a.target, a.pool, seed, opt, path,
                        progress, budget_s=a.pool_budget, full_space=a.full_space,
                        on_entry=lambda k, n, e, r: _entry_line(k, n, e, r, t0))
    ok = sum(bool(e["costs"]) for e in pool.entries)
    print(f"  pool {path}: {len(pool.entries)} of {a.pool} measured ({ok} ran) in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return pool, f"measured in {time.perf_counter() - t0:.0f} s"


def _src_seed(a) -> int:
    """Pool seed of the --transfer source: with the target's seed, both pools of a space
    of the same size hold the same configs (the warm model then knows the source's cost
    of every config it ranks)."""
    return a.pool_seed if a.transfer_pool_seed is None else a.transfer_pool_seed


def _seeds(a) -> range:
    """The seeds of the searches: ``--seeds`` of them from ``--seed-offset``."""
    return range(a.seed_offset, a.seed_offset + a.seeds)


def _mean_at(curves, k, best):
    vals = [best / c[min(k, len(c)) - 1] if c and math.isfinite(c[min(k, len(c)) - 1])
            else 0.0 for c in curves]
    return statistics.mean(vals) if vals else 0.0


def _report(title, curves, best, ns, out_rows):
    """Print the table and headline of one workload; ``curves`` {tuner: [curve per seed]}."""
    print(title)
    nmax = max((len(c) for cs in curves.values() for c in cs), default=0)
    ks = sorted({k for n in ns for k in (max(1, n // 2), n, 2 * n, 4 * n)}
                | {2 ** e for e in range(nmax.bit_length()) if 2 ** e <= nmax})
    print(f"  {'trials':>6}  " + "  ".join(f"{t:>7}" for t in curves)
          + "   (best so far / best known, mean over seeds)")
    for k in ks:
        print(f"  {k:>6}  " + "  ".join(f"{_mean_at(c, k, best):7.3f}" for c in curves.values()))
    m, r = curves.get("model"), curves.get("random")
    if m and r and max(map(len, m)) and max(map(len, r)):
        print(f"  {'N':>6}  {'model@N':>8}  {'random@N':>8}  {'random@4N':>9}   model - "
              f"random@4N, per seed: mean +- standard error")
        for n in ns:
            d = [_mean_at([cm], n, best) - _mean_at([cr], 4 * n, best)
                 for cm, cr in zip(m, r)]
            se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
            print(f"  {n:>6}  {_mean_at(m, n, best):8.3f}  {_mean_at(r, n, best):8.3f}  "
                  f"{_mean_at(r, 4 * n, best):9.3f}   {statistics.mean(d):+.3f} +- {se:.3f}")
        nmax = min(max(len(c) for c in m), max(len(c) for c in r))
        gaps = [(_mean_at(r, k, best) - _mean_at(m, k, best), k) for k in range(1, nmax + 1)]
        worst, at = max(gaps)
        print(f"  equal trials (issue 11): model >= random at every k in 1..{nmax}: "
              + ("yes" if worst <= 1e-9 else f"no (worst gap {100 * worst:.1f} points at "
                 f"k={at}; behind at {sum(g > 1e-9 for g, _ in gaps)} of {nmax} k)"))
        for n in ns:
            wins = sum(cm[min(n, len(cm)) - 1] <= cr[min(4 * n, len(cr)) - 1]
                       for cm, cr in zip(m, r))
            mm, rr = _mean_at(m, n, best), _mean_at(r, 4 * n, best)
            verdict = "yes" if mm >= rr else f"no (gap {100 * (rr - mm):.1f} points)"
            print(f"  headline N={n}: model@{n} {mm:.3f} vs random@{4 * n} {rr:.3f}; model "
                  f">= random@4N in {wins}/{len(m)} seeds -> {verdict}")
            out_rows.append((title.split(" on ")[0], n, mm, rr, wins, len(m),
                             _mean_at(r, n, best), worst <= 1e-9))


def _plot_name(name: str, dtype: str) -> str:
    return name if dtype == "float32" else f"{name}_{dtype}"


def _plot(folder, name, curves, best, title):
    try:
        import matplotlib
    except ImportError:
        print("  (no matplotlib: no PNG)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for tuner, cs in curves.items():
        n = max(len(c) for c in cs)
        ax.plot(range(1, n + 1), [_mean_at(cs, k, best) for k in range(1, n + 1)],
                label=f"{tuner} (mean of {len(cs)} seeds)")
    r = curves.get("random")
    if r:  # the bar: random search's best after 4k trials, drawn at k
        n = max(len(c) for c in r) // 4
        ax.plot(range(1, n + 1), [_mean_at(r, 4 * k, best) for k in range(1, n + 1)],
                "--", color="grey", label="random at 4x the trials")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("trials")
    ax.set_ylabel("best so far / best known")
    import textwrap

    ax.set_title(textwrap.fill(title, 100), fontsize=7)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = os.path.join(folder, f"search_quality_{name}.png")
    fig.savefig(path)
    plt.close(fig)
    print(f"  plot {path}")


def _replay(a, name, args, dtype, rows):
    from polytile.autotune import MeasureOptions
    from polytile.autotune.device import device_class
    from polytile.autotune.replay import (Pool, ReplayOracle, measure_pool, replay_search,
                                          trials_to_reach)

    pool, how = _pool(a, name, args, dtype, measure_pool, Pool, MeasureOptions)
    oracle = ReplayOracle(pool, stat=a.stat)
    best = oracle.best_cost()
    nmax = 4 * max(a.trials)
    ok = sum(math.isfinite(c) for c in oracle.cost.values())
    dev = device_class(pool.device)
    drawn = (f"{pool.space_size:,}" if pool.candidates is None else
             f"the {pool.candidates:,} the tuners search of {pool.space_size:,}")
    title = (f"{name}{tuple(args)} {dtype} on '{pool.target}'{f' ({dev})' if dev else ''}"
             f"  REPLAY over a pool of "
             f"{len(oracle.cost)} configs ({ok} ran) of {drawn}, {how}, {a.stat} of "
             f"repeats"
             f"{f', {oracle.refeaturized} refeaturized' if oracle.refeaturized else ''}, load "
             f"{pool.load_avg} when measured; best {best * 1e3:.4g} ms")
    curves, spent = {}, {}
    for t in ("model", "random"):
        t0 = time.perf_counter()
        curves[t] = [replay_search(oracle, t, nmax, seed=s, batch=a.batch)
                     for s in _seeds(a)]
        spent[t] = time.perf_counter() - t0
    rounds = a.seeds * math.ceil(nmax / a.batch)
    title += (f"; model tuner {1e3 * spent['model'] / rounds:.0f} ms per batch of {a.batch} "
              f"(training, scoring, selection; no lowering in a replay)")
    _report(title, curves, best, a.trials, rows)
    src_args = SHAPES.get((name, a.target.split()[0]), (None, None))[1] if a.transfer else None
    if src_args is not None and a.no_measure and not os.path.exists(os.path.join(
            a.cache, pool_file(name, src_args, dtype, a.target, a.pool, _src_seed(a),
                               a.full_space))):
        print(f"  (no pool of {name}{tuple(src_args)} to warm-start from: no transfer)")
        src_args = None
    if a.plot and src_args is None:
        _plot(a.plot, _plot_name(name, dtype), curves, best, title)
    if src_args is not None:
        src, how = _pool(a, name, src_args, dtype, measure_pool, Pool, MeasureOptions,
                         _src_seed(a))
        so = ReplayOracle(src, stat=a.stat)
        warm = [replay_search(oracle, "model", nmax, seed=s, batch=a.batch, transfer=[so])
                for s in _seeds(a)]
        goal = best / 0.95
        for label, cs in (("cold", curves["model"]), ("warm", warm), ("random",
                                                                      curves["random"])):
            reach = [trials_to_reach(c, goal) for c in cs]
            got = [r for r in reach if r is not None]
            med = statistics.median([r if r is not None else nmax + 1 for r in reach])
            print(f"  transfer from {name}{tuple(src_args)} ({len(so.cost)} configs, {how}): "
                  f"{label:>6} model reaches 95% of the pool best in median {med:g} trials "
                  f"({len(got)}/{len(cs)} seeds within {nmax}); mean at 8 trials "
                  f"{_mean_at(cs, 8, best):.3f}" if label != "random" else
                  f"  transfer: random search reaches 95% in median {med:g} trials "
                  f"({len(got)}/{len(cs)} seeds within {nmax}); mean at 8 "
                  f"{_mean_at(cs, 8, best):.3f}")
        for n in a.trials:
            wins = sum(w[min(n, len(w)) - 1] <= r[min(4 * n, len(r)) - 1]
                       for w, r in zip(warm, curves["random"]))
            print(f"  warm-start headline N={n}: model@{n} {_mean_at(warm, n, best):.3f} vs "
                  f"random@{4 * n} {_mean_at(curves['random'], 4 * n, best):.3f}; model >= "
                  f"random@4N in {wins}/{len(warm)} seeds")
        if a.plot:
            _plot(a.plot, _plot_name(name, dtype),
                  dict(curves, **{"model, warm start": warm}), best,
                  title + f"; warm start from {name}{tuple(src_args)}")


def _live(a, name, args, dtype, rows):
    from polytile.autotune import MeasureOptions, tune

    nmax = 4 * max(a.trials)
    opt = MeasureOptions(parallel=a.parallel or 0, threads=a.threads or 0)
    curves: dict = {"model": [], "random": []}
    t0 = time.perf_counter()
    for s in _seeds(a):
        for t in curves:
            res = tune(name, args, dtype, target=a.target, tuner=t, n_trial=nmax,
                       measure_option=opt, seed=s, include_default=False, transfer=False)
            best, c = math.inf, []
            for r in res.records:
                best = min(best, r.cost)
                c.append(best)
            curves[t].append(c)
    best = min(min(c) for cs in curves.values() for c in cs if c)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    title = (f"{name}{tuple(args)} {dtype} on '{a.target}'  LIVE, {a.seeds} seeds x {nmax} "
             f"trials per tuner in {time.perf_counter() - t0:.0f} s, load {load:.2f}; best "
             f"{best * 1e3:.4g} ms")
    _report(title, curves, best, a.trials, rows)
    if a.plot:
        _plot(a.plot, _plot_name(name, dtype) + "_live", curves, best, title)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("replay", "live"), default="replay")
    ap.add_argument("--templates", nargs="+", default=["matmul", "conv2d", "softmax"],
                    help="templates, each optionally with a dtype: matmul:float16 "
                    "(default float32)")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--args", default=None, help="workload args (one template only)")
    ap.add_argument("--trials", type=int, nargs="+", default=[8, 16],
                    help="N of the headline (random search gets 4N; default 8 16)")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="first seed (held-out seeds: others than a change was chosen on)")
    ap.add_argument("--pool", type=int, default=160, help="configs per pool (replay)")
    ap.add_argument("--pool-seed", type=int, default=0)
    ap.add_argument("--transfer-pool-seed", type=int, default=None,
                    help="seed of the --transfer source pool (default --pool-seed; another "
                    "seed draws other configs than the target pool's)")
    ap.add_argument("--batch", type=int, default=8, help="trials per tuner batch")
    ap.add_argument("--cache", default="search_quality_cache")
    ap.add_argument("--remeasure", action="store_true", help="ignore cached pools")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="cost of a pool entry: median (as tuning records) or min of its "
                    "repeats (a pool measured on a loaded machine)")
    ap.add_argument("--short-repeats", action="store_true",
                    help="measure pools with 7-40 repeats of at least 1 ms (with --stat "
                    "min: the least disturbed repeat on a loaded machine)")
    ap.add_argument("--pool-budget", type=float, default=None, metavar="S",
                    help="seconds of measuring per pool: no candidate starts after them "
                    "(the pool is saved as measured and continued by a later run)")
    ap.add_argument("--build-timeout", type=float, default=None, metavar="S",
                    help="seconds one candidate's build may take (default 20)")
    ap.add_argument("--no-measure", action="store_true",
                    help="replay cached pools as they are (also pools cut short); "
                    "measure nothing")
    ap.add_argument("--full-space", action="store_true",
                    help="draw pools from every config of the space, not only the ones "
                    "the tuners search (the template's preferred configs)")
    ap.add_argument("--transfer", action="store_true")
    ap.add_argument("--parallel", type=int, default=None, help="build workers")
    ap.add_argument("--threads", type=int, default=None, help="threads of CPU candidates")
    ap.add_argument("--plot", default=None, metavar="DIR")
    a = ap.parse_args(argv)
    # `timeout` sends SIGTERM: end through SystemExit, so a pool being measured is saved
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        print(f"load average {open('/proc/loadavg').read().split()[0]} at start; "
              f"{os.cpu_count()} CPUs")
    except OSError:
        pass
    rows: list = []
    for spec in a.templates:
        name, dtype = split_spec(spec)
        kind = a.target.split()[0]
        if a.args:
            args = tuple(int(x) for x in a.args.split(","))
        elif (name, kind) in SHAPES:
            args = SHAPES[(name, kind)][0]
        else:
            sys.exit(f"no default shape for {name} on {kind}: give --args")
        (_replay if a.mode == "replay" else _live)(a, name, args, dtype, rows)
        sys.stdout.flush()
    if rows:
        print(f"summary ({a.mode}; fraction of the best known cost, mean over seeds):")
        print(f"  {'workload':44s} {'N':>3} {'model@N':>8} {'random@N':>8} {'random@4N':>9}"
              f"  model >= random at every k")
        for label, n, mm, rr, _, _, rn, equal in rows:
            print(f"  {label[:44]:44s} {n:>3} {mm:8.3f} {rn:8.3f} {rr:9.3f}  "
                  f"{'yes' if equal else 'no'}")
        yes = sum(row[2] >= row[3] for row in rows)
        eq = sum(row[2] >= row[6] for row in rows)
        print(f"summary ({a.mode}): model@N >= random@N in {eq}/{len(rows)} and model@N >= "
              f"random@4N in {yes}/{len(rows)} (workload, N) cases (means over seeds)")


if __name__ == "__main__":
    main()
