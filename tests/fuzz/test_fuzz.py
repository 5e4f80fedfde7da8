"""The differential fuzzer as tests: fixed seed ranges must give no wrong result, crash,
hang or vague refusal (each failure is printed as a reproducer script).

``KNOWN_FAULTS`` lists the seeds that fail today because of a fault not fixed yet; each is
an ``xfail(strict=True)`` test, so a fix turns it into a failing XPASS and the entry must
then be removed. The ``slow`` test runs thousands of seeds (``pytest -m slow``).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys

import pytest

from .cases import generate
from .runner import FAILURES
from .script import first_line, reproducer
from .worker import Worker, run_cases

# the first seeds, then a few extended ones (cases.EXTENDED_FROM: more kinds, dtypes,
# symbolic sizes, extra outputs; cases.EXTENDED2_FROM: vthread, create_group, rfactor with
# compute_at/parallel, double_buffer), the same number of cases as before in all (the
# cross-thread reductions of cases.EXTENDED3_FROM: FIXED_FAULTS and the slow test)
LLVM_SEEDS = [*range(0, 270), *range(60_000, 60_020), *range(70_000, 70_010)]
CUDA_SEEDS = [*range(0, 20), *range(60_000, 60_002), 70_000, 70_003]
SLOW_SEEDS = {"llvm": [*range(300, 3300), *range(60_030, 61_030), *range(70_010, 70_510),
                       *range(80_000, 80_100)],
              "cuda": [*range(24, 324), *range(60_004, 60_104), *range(70_004, 70_054),
                       *range(80_000, 80_100)]}
TIMEOUT = {"llvm": 15.0, "cuda": 45.0}

# (target, seed) -> the fault it shows today (regression tests of each fault with its right
# value: tests/fuzz/test_regressions.py; case files: /work/shared/cases). Remove an entry
# when its test XPASSes.
KNOWN_FAULTS: dict[tuple[str, int], str] = {}


def _cuda_available() -> str | None:
    """None when CUDA cases can run here: on a GPU, or on the host emulator (which needs
    g++; nvcc, where present, compiles every source too)."""
    from polytile.targets.cuda import runtime

    if runtime.device_count() > 0 or shutil.which("g++") is not None:
        return None
    return "no GPU and no g++ for the CUDA emulator"


def _run(target: str, seeds, skip=()) -> None:
    cases = (generate(s, target) for s in seeds if (target, s) not in skip)
    counts: collections.Counter = collections.Counter()
    failures = []
    checked = total = 0
    for case, out in run_cases(cases, target, TIMEOUT[target]):
        counts[out["cls"]] += 1
        checked += out.get("checked", 0)
        total += out.get("total", 0)
        if out["cls"] in FAILURES or out["cls"] == "invalid":
            failures.append(f"seed {case['seed']}: {first_line(out)}\n"
                            + reproducer(case, out))
    print(f"\n{target}: {dict(counts)}")
    assert not failures, (f"{len(failures)} failing cases ({dict(counts)}); the first:\n\n"
                          + "\n\n".join(failures[:3]))
    n = sum(counts.values())
    # a generator that mostly produced refused schedules, or a reference unsure of most
    # elements, would test little
    assert counts["ok"] >= n // 2, dict(counts)
    assert checked >= 0.95 * total, (checked, total)


def test_fuzz_llvm():
    _run("llvm", LLVM_SEEDS, KNOWN_FAULTS)


def test_fuzz_cuda():
    why = _cuda_available()
    if why:
        pytest.skip(why)
    _run("cuda", CUDA_SEEDS, KNOWN_FAULTS)


@pytest.fixture(scope="module")
def workers():
    pool: dict = {}
    yield lambda t: pool.setdefault(t, Worker(t))
    for w in pool.values():
        w.close()


@pytest.mark.parametrize("target,seed", [pytest.param(
    t, s, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAULTS[t, s]), id=f"{t}-{s}")
    for t, s in sorted(KNOWN_FAULTS)])
def test_known_fault(target, seed, workers):
    if target == "cuda" and _cuda_available():
        pytest.skip(_cuda_available())
    case = generate(seed, target)
    out = workers(target).run(case, TIMEOUT[target])
    assert out["cls"] not in FAILURES, reproducer(case, out)


#: (target, seed) -> the fault each showed before its fix (the faults' own tests, with
#: their right values, are in test_regressions.py); each case must now pass.
FIXED_FAULTS: dict[tuple[str, int], str] = {
    ("cuda", 89): "isl AST generation of a fused, split and bound transpose took 100 s",
    ("cuda", 286): "isl 'void expression': a read under if_then_else of a clipped region",
    ("cuda", 436): "isl 'void expression': a clipped region at guarded-off instances",
    ("cuda", 458): "isl 'void expression': an rfactor partial with an empty clipped region",
    ("cuda", 459): "isl 'void expression': a clipped region at guarded-off instances",
    ("cuda", 481): "a barrier inside a thread-0 condition (idle threads): deadlock",
    ("cuda", 494): "a barrier inside a thread-0 condition (idle threads): deadlock",
    ("cuda", 880): "isl 'void expression': threads with an empty clipped region",
    ("cuda", 886): "isl 'void expression': threads with an empty clipped region",
    ("cuda", 6256): "a barrier under a test on threadIdx (a stage on fewer threads): deadlock",
    ("cuda", 7464): "the AST check of a fused, split, reordered, fused, split and bound loop "
                    "took 35 s (projected thread indices)",
    ("cuda", 7619): "the origin (parametric minimum) of a one-element region per thread of a "
                    "twice fused, split and bound loop took isl minutes",
    ("llvm", 4374): "generator: te.max(i, i) of two axes is a reduction (invalid program)",
    ("llvm", 4416): "reference: a product under if_then_else, inlined, fused into an fma",
    ("llvm", 15522): "reference: a product negated (x * -1) then subtracted, fused into an fma",
    ("llvm", 22074): "reference: a product cast f16 -> f32 -> f16 then subtracted, fused "
                     "into an fma",
    ("llvm", 60199): "LLVM 22 (x86) stored a one-lane masked store of a truncated vector at "
                     "the wide width: a tiled bfloat16 te.scan zeroed an element and "
                     "corrupted the heap",
    ("llvm", 60465): "a parallel argmax (tuple reduction) read after its loop: its buffer "
                     "was privatised in the loop, the reader saw an unwritten copy",
    ("llvm", 75150): "an argmax whose reduce loop was reordered outside its parallel loop: "
                     "the values' accumulator was privatised in the init loop and again in "
                     "the update loop (values lost between them): wrong indices",
    ("llvm", 65727): "cache_read for a te.scan reader rebuilt the scan as a plain compute "
                     "(its reads of its own rows lost): wrong values",
    ("llvm", 71419): "the AST check of three fused loops of a non-divisible tile ran out of "
                     "isl operations (is_injective, 11 s): refused after 30 s (a fuzz hang)",
    ("cuda", 70121): "a float16 sum's float32 accumulator shared by the virtual threads of "
                     "a vthread loop (one register summed both): wrong values",
    ("cuda", 60160): "CUDA C codegen BuildError: a bfloat16 sum's float32 accumulator of "
                     "symbolic size per thread (now refused at lowering)",
    ("cuda", 80008): "TVM's cross-thread idiom (rfactor, the rfactor'd axis on threadIdx.x, "
                     "the partial computed at it) under a vthread loop refused: 'stage "
                     "R.rf reads R.rf from a shared buffer that does not vary'",
    ("cuda", 80192): "the same idiom with rows on threadIdx.y refused likewise; and rows on "
                     "threadIdx.y whose outer loop is split into blocks and vthread "
                     "refused ('neither an axis nor the inner loop of a split')",
    ("cuda", 80208): "a cross-thread reduction with rows on threadIdx.y whose outer loop is "
                     "split into blocks and vthread refused ('neither an axis nor the inner "
                     "loop of a split')",
    ("cuda", 80148): "a crash: the thread roles compared a symbolic grid extent (ceil(n1 / "
                     "3) blocks) with 1 in Python, then printed it into isl text unparsed",
    ("cuda", 80140): "a local cache_read computed under a vthread loop, read by the partial "
                     "stage of TVM's cross-thread idiom (which runs once for all virtual "
                     "threads) refused: 'stage R.rf reads B.local from a local buffer that "
                     "does not vary with the loops'",
    ("cuda", 80085): "a misleading refusal (a local stage read across its threadIdx loop by "
                     "a shared copy: illegal, but the message named the reader's scope and "
                     "no loop); now says which loops and why",
    ("cuda", 90130): "a crash of the race check: the loop-IR interpreter cast a float beyond "
                     "int8's range (an empty bfloat16 max, rounded) through a Python int "
                     "numpy could not hold (OverflowError)",
    ("cuda", 90204): "a cross-thread (tuple) reduction whose row loop, bound to blockIdx.x, "
                     "stood inside a serial reduce loop refused ('spatial loops run inside "
                     "the reduction loops'): the grid is outside every loop anyway",
    ("cuda", 90038): "an argmax tuple (argmax, count) bound across threads refused: 'cannot "
                     "prove that the combiner is commutative, associative' (argmax whose ties "
                     "go to the smaller index is a lexicographic maximum: now proven)",
    ("cuda", 90098): "the same with (argmax, max) and threadIdx.y rows",
    ("llvm", 92534): "storage_align of a multi-output stage one of whose outputs (P.v1) is "
                     "a function argument padded every output buffer: the argument was "
                     "never written (NaN); now refused, naming the stage and the output",
    ("llvm", 83624): "an empty argmin's bfloat16 identity (3.4e38) cast to int4: LLVM's "
                     "fptosi gave poison, the byte of the element and its neighbour was "
                     "poison and its store deleted: the neighbour never written",
    ("llvm", 97008): "a tuple argmin's local accumulators read in short-circuit conditions "
                     "became branches: LLVM 22's loop vectorizer took minutes (a hang)",
    ("cuda", 92869): "a shared cache_read copied by one thread shared its barrier pair with "
                     "the next shared stage, a cross-thread reduction's partial whose local "
                     "rfactor stage reads the copy: no barrier between the write and the "
                     "other threads' reads (wrong sums, any dtype)",
    ("llvm", 98688): "the reference bounded sqrt(|x|) by its values at the error box's "
                     "corners: a negative corner gave NaN, which zeroed the bound (a function "
                     "not monotonic on the box, or undefined in it)",
}
#: FIXED_FAULTS whose fault was a refusal of a schedule that computes its definition:
#: they must now build and give the right values
WRONGLY_REFUSED = {("cuda", 80008), ("cuda", 80192), ("cuda", 80208), ("cuda", 80140),
                   ("cuda", 90204), ("cuda", 90038), ("cuda", 90098)}


@pytest.mark.parametrize("target,seed", [pytest.param(t, s, id=f"{t}-{s}")
                                         for t, s in sorted(FIXED_FAULTS)])
def test_fixed_fault(target, seed, workers):
    if target == "cuda" and _cuda_available():
        pytest.skip(_cuda_available())
    case = generate(seed, target)
    out = workers(target).run(case, TIMEOUT[target])
    assert out["cls"] not in FAILURES and out["cls"] != "invalid", reproducer(case, out)
    if (target, seed) in WRONGLY_REFUSED:
        assert out["cls"] == "ok", reproducer(case, out)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["llvm", "cuda"])
def test_fuzz_many(target):
    if target == "cuda" and _cuda_available():
        pytest.skip(_cuda_available())
    _run(target, SLOW_SEEDS[target])


def test_cases_do_not_depend_on_the_process():
    """A case is a pure function of its seed: the same in a process with another hash
    seed (so a failure reported by one run reproduces in another)."""
    seeds = list(range(0, 36, 5))
    here = [json.dumps(generate(s)) for s in seeds]
    pkg = __package__ or "fuzz"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if pkg.count("."):
        root = os.path.dirname(root)
    code = (f"import sys, json; sys.path.insert(0, {root!r}); "
            f"from {pkg}.cases import generate; "
            f"print('\\n'.join(json.dumps(generate(s)) for s in {seeds!r}))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, check=True).stdout.split("\n")
    assert here == there[:len(here)]
