"""The ``polytile`` command line: ``tune``, ``records``, ``run``, ``templates``,
``targets``, ``pipeline``.

Exit codes: 0 success, 2 usage error (argparse's message), 1 any other error (a one-line
cause; ``--debug`` shows the traceback), 130 when Ctrl-C stops a command (a tuning log
stays valid and ``--resume`` continues it). ``POLYTILE_LOG=debug`` (or ``info``,
``trace``) sends polytile's log to stderr: each lowering phase and its time (``trace``:
and its output).

Each command imports the modules it needs when it runs, not at the top: ``polytile
--help``, ``records`` and ``templates`` start in about 0.1 s instead of 0.5 s (islpy,
llvmlite and xgboost are not loaded).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings

from polytile import __version__
from polytile.cli_report import Fail as _Fail
from polytile.cli_report import fmt_time as _fmt_time
from polytile.cli_report import gflops as _gflops
from polytile.cli_report import blas_rows as _blas_rows
from polytile.cli_report import print_summary as _print_summary
from polytile.cli_report import run_timing as _run_timing

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPT = 0, 1, 2, 130
#: Records file of ``tune`` and ``run`` without ``--log`` (records are keyed by workload and
#: target, so one file holds any number of workloads).
DEFAULT_LOG = "polytile_tune.jsonl"


# --------------------------------------------------------------------------- helpers


def _int_list(text: str) -> tuple:
    """Workload arguments: non-negative ints, or names of symbolic sizes (``n``) whose values
    ``--sizes`` gives."""
    vals = []
    for x in text.replace(" ", "").split(","):
        if not x:
            continue
        if x.isidentifier():
            vals.append(x)
            continue
        try:
            vals.append(int(x))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated integers, got {text!r} (or names of symbolic "
                "sizes: n,512 with --sizes n=64,256)") from None
    # zero is a legal value for some arguments (a conv's padding); the template decides
    if not vals or any(isinstance(v, int) and v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return tuple(vals)


def _size_list(text: str) -> tuple:
    """``n=64,128,256`` -> ``("n", (64, 128, 256))``."""
    name, _, vals = text.replace(" ", "").partition("=")
    if not name.isidentifier() or not vals:
        raise argparse.ArgumentTypeError(f"expected name=v1,v2,... (e.g. n=64,256), got "
                                         f"{text!r}")
    try:
        values = tuple(int(v) for v in vals.split(",") if v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integer values in {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected sizes >= 0 in {text!r}")
    return name, values


def _expand_sizes(args, sizes) -> list:
    """The concrete workload argument lists of ``args`` (ints and size names) for every
    combination of the ``--sizes`` values (``"n=64"`` in place of ``n``); ``[args]``
    without size names."""
    import itertools

    given = dict(sizes or ())
    names = [x for x in (args or ()) if isinstance(x, str)]
    missing = [n for n in dict.fromkeys(names) if n not in given]
    if missing:
        raise _Fail(f"--args names the symbolic size {missing[0]!r}: give its values with "
                    f"--sizes {missing[0]}=64,256,...")
    extra = [n for n in given if n not in names]
    if extra:
        raise _Fail(f"--sizes {extra[0]}=...: {extra[0]!r} is not among --args "
                    f"{','.join(map(str, args or ()))}; name it there (e.g. --args "
                    f"{extra[0]},512)")
    if not names:
        return [args]
    keys = list(dict.fromkeys(names))
    out = []
    for combo in itertools.product(*[given[k] for k in keys]):
        val = dict(zip(keys, combo))
        out.append(tuple(f"{x}={val[x]}" if isinstance(x, str) else x for x in args))
    return out


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


#: AutoTVM's tuner names a TVM user types, and polytile's tuner that does that job
_AUTOTVM_TUNERS = {"xgb": "model", "xgb_knob": "model", "xgb_itervar": "model",
                   "xgb_curve": "model", "xgb-rank": "model", "gridsearch": "grid"}


def _tuner(text: str) -> str:
    if text in ("model", "random", "grid"):
        return text
    alt = _AUTOTVM_TUNERS.get(text)
    hint = f" (AutoTVM's {text!r} is polytile's {alt!r})" if alt else ""
    raise argparse.ArgumentTypeError(f"expected 'model', 'random' or 'grid', got "
                                     f"{text!r}{hint}")


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}")
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return v


def _table(rows: list, header: list) -> str:
    cols = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[k]) for r in cols) for k in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cols]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _flops_of(workload: dict) -> float | None:
    from polytile.autotune.template import get_template

    try:
        t = get_template(workload["template"])
        return t.flops(tuple(workload["args"]))
    except Exception:
        return None


def _warn_line(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- tune


def _cmd_tune(a) -> int:
    runs = _expand_sizes(a.args, a.sizes)
    rc = EXIT_OK
    for k, args in enumerate(runs):
        if len(runs) > 1:
            print(f"== sizes {', '.join(x for x in args if isinstance(x, str))} "
                  f"({k + 1}/{len(runs)})", file=sys.stdout)
        rc = _tune_one(a, args)
        if rc != EXIT_OK:
            return rc
    return rc


def _tune_one(a, args) -> int:
    from polytile.autotune import MeasureOptions, get_template, tune
    from polytile.autotune.records import check_log_path
    from polytile.autotune.tune import DEFAULT_BUDGET_S, DEFAULT_TRIALS, tunable_target

    t = get_template(a.workload)
    wl = t.workload(args, a.dtype)
    target = tunable_target(a.target)
    if a.plot:
        _require_matplotlib()
        parent = os.path.dirname(os.path.abspath(a.plot))
        if not os.path.isdir(parent):
            raise _Fail(f"--plot: directory {parent!r} does not exist")
    trials = a.trials or DEFAULT_TRIALS
    budget = a.timeout_total
    if a.trials is None and budget is None:
        budget = DEFAULT_BUDGET_S
    log = a.log or DEFAULT_LOG
    if a.resume and not os.path.exists(log):
        raise _Fail(f"--resume: log {log!r} does not exist")
    check_log_path(log, "--log")  # before the numpy timing, not after it
    opt = MeasureOptions(parallel=a.parallel or 0, threads=a.threads or 0, number=a.number,
                         repeat=a.repeat, min_repeat_ms=a.min_repeat_ms,
                         max_spread=a.max_spread,
                         flush_cache=a.flush_cache, check=a.check,
                         build_timeout=a.build_timeout, run_timeout=a.run_timeout,
                         seed=a.seed or 0)
    from polytile.backend import Target

    gpu = Target.parse(target).backend.is_gpu
    space_size = len(t.space(wl.args, wl.dtype, target))
    if a.ray:
        from polytile.autotune.ray_measure import import_ray

        import_ray()  # before the header: a missing extra is the first thing said
    out = sys.stdout
    print(f"polytile tune {wl} on '{target}'", file=out)
    limit = f" (at most {budget:g} s)" if budget else ""
    where = ("timed on the GPU in a runner process" if gpu else f"{opt.threads} threads")
    print(f"  space {space_size:,} configs; tuner {a.tuner}; {trials} trials{limit}"
          f"{' (resumed)' if a.resume else ''}; {opt.parallel} build workers; "
          f"{where}; log {log}", file=out)
    if a.ray:
        print(f"  built and measured on the Ray cluster --ray {a.ray} (one measuring actor "
              f"per device able to run '{target}'; {opt.parallel} build workers each)",
              file=out)
    from polytile.autotune.anchors import available

    anchors = () if a.no_numpy else tuple(available(t, wl.args, target))
    if anchors:
        print(f"  {' and '.join(anchors)} timed after the search, alternately with the best "
              f"configs ({'on the GPU' if gpu else f'{opt.threads} threads'}, same inputs)",
              file=out)
    for k, v in _blas_rows(anchors):
        # said before the search, so that a pinned anchor can be fixed before minutes pass
        print(f"  {k}: {v}", file=out)
    out.flush()
    bar = _progress(trials, a.quiet)
    flops = t.flops(wl.args)

    def on_trial(res, rec):
        if bar is None:
            return
        bar.n = res.n_trials
        best = res.best
        bar.set_postfix_str(f"best {_gflops(flops, best.cost)} GFLOP/s" if best and flops
                            else f"best {_fmt_time(best.cost)}" if best else "best -",
                            refresh=False)
        bar.refresh()

    res = tune(t, wl.args, wl.dtype, target=a.target, tuner=a.tuner, n_trial=trials,
               measure_option=opt, log_file=log, resume=a.resume,
               early_stopping=a.early_stopping, timeout_total=budget,
               seed=a.seed, callbacks=[on_trial], anchors=anchors, ray=a.ray,
               transfer_from=a.transfer, full_space=a.full_space)
    if bar is not None:
        bar.close()
    cmp = res.comparison
    anchor = "torch-cuda" if gpu else "numpy"  # the reference line of the plot
    t_np = cmp.timing(anchor).median if cmp is not None and cmp.timing(anchor) else None
    _print_summary(res, out)
    if a.plot:
        _plot(res, t_np, a.plot, anchor)
        print(f"  plot            {a.plot}", file=out)
    if res.interrupted:
        print(f"interrupted: {res.n_trials} trials are in {log}; continue with the same "
              f"command and --resume", file=sys.stderr)
        return EXIT_INTERRUPT
    if res.best is None:
        raise _Fail(f"no candidate of {wl} could be measured ({res.n_failed} failures; see "
                    f"`polytile records show {log}`)")
    return EXIT_OK


def _progress(total: int, quiet: bool):
    if quiet:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    return tqdm(total=total, desc="tuning", unit="trial", file=sys.stderr, leave=True,
                dynamic_ncols=True)


def _require_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise _Fail("--plot needs matplotlib: pip install 'polytile[plot]'") from None


def _plot(res, t_np, path: str, anchor: str = "numpy") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = res.curve()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    ax.plot(range(1, len(curve) + 1), curve, label=f"{res.tuner} tuner, best so far")
    unit = "GFLOP/s" if res.flops else "1/s"
    if t_np and res.flops:
        ax.axhline(res.flops / t_np / 1e9, color="gray", linestyle="--",
                   label="torch on the GPU" if anchor == "torch-cuda" else anchor)
    ax.set_xlabel("trial")
    ax.set_ylabel(unit)
    ax.set_title(f"{res.workload} on {res.target}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --------------------------------------------------------------------------- records


def _cmd_records(a) -> int:
    from polytile.autotune.records import best_records, read_records

    recs = read_records(a.file)
    flops_cache: dict = {}

    def flops(w):
        k = json.dumps(w, sort_keys=True)
        if k not in flops_cache:
            flops_cache[k] = _flops_of(w)
        return flops_cache[k]

    from polytile.autotune.device import device_class

    if a.action == "show":
        rows = []
        for r in recs:
            cfg = " ".join(f"{k}={json.dumps(v)}" for k, v in r.config.items())
            rows.append((r.line, r.workload_str(), _gflops(flops(r.workload), r.cost),
                         _fmt_time(r.cost), r.error or "ok", cfg if r.ok else r.error_msg[:70]))
        print(_table(rows, ["line", "workload", "GFLOP/s", "median", "status",
                            "config / error"]))
        print(f"{len(recs)} records")
    elif a.action == "best":
        rows = []
        every = read_records(a.file, summaries=True)
        for (_, target, dev), r in sorted(best_records(every).items()):
            cfg = " ".join(f"{k}={json.dumps(v)}" for k, v in r.config.items())
            rows.append((r.workload_str(), target, dev or "-", _gflops(flops(r.workload),
                                                                      r.cost),
                         _fmt_time(r.cost), r.line, cfg))
        print(_table(rows, ["workload", "target", "device", "GFLOP/s", "median", "line",
                            "config"]))
    else:
        groups: dict = {}
        for r in recs:
            groups.setdefault((json.dumps(r.workload, sort_keys=True), r.target,
                               device_class(r.device)), []).append(r)
        rows = []
        for (_, target, _dev), rs in sorted(groups.items()):
            ok = [r for r in rs if r.ok]
            fails: dict = {}
            for r in rs:
                if not r.ok:
                    fails[r.error] = fails.get(r.error, 0) + 1
            best = min((r.cost for r in ok), default=math.inf)
            med = sorted(r.cost for r in ok)[len(ok) // 2] if ok else math.inf
            f = flops(rs[0].workload)
            rows.append((rs[0].workload_str(), target, len(rs), len(ok),
                         ", ".join(f"{n} {c}" for c, n in sorted(fails.items())) or "-",
                         _gflops(f, best), _gflops(f, med),
                         f"{sum(r.wall_s for r in rs):.1f} s"))
        print(_table(rows, ["workload", "target", "trials", "ok", "failed", "best GFLOP/s",
                            "median GFLOP/s", "trial time"]))
    return EXIT_OK


# --------------------------------------------------------------------------- run


def _cmd_run(a) -> int:
    rc = EXIT_OK
    for args in _expand_sizes(a.args, a.sizes):
        rc = _run_one(a, args)
    return rc


def _float64_input(x, dtype: str):
    """A reference input: float arrays (bfloat16 ones by value) in float64, others as
    they are."""
    if dtype == "bfloat16":
        from polytile.te.dtype import bfloat16_values

        return bfloat16_values(x).astype("float64")
    return x.astype("float64") if x.dtype.kind == "f" else x


def _run_one(a, args) -> int:
    import numpy as np

    import polytile
    from polytile.autotune import apply_history_best, get_template, load_best
    from polytile.autotune.dispatch import canonical_target
    from polytile.errors import TuneError
    from polytile.autotune.data import make_inputs, output_positions, outputs_match
    from polytile.schedule.pipeline import lower
    from polytile.targets.llvm.runtime import set_num_threads

    t = get_template(a.workload)
    wl = t.workload(args, a.dtype)
    target = canonical_target(a.target)
    log = a.log or DEFAULT_LOG
    if not os.path.exists(log):
        raise _Fail(f"records file {log!r} not found (tune first: polytile tune "
                    f"{a.workload} --log {log})")
    from polytile.backend import Target

    gpu = Target.parse(target).backend.is_gpu
    if a.threads and not gpu:
        set_num_threads(a.threads)
    rec = load_best(log, wl, a.target)  # GPU: refuses records of another device class
    if rec is not None:
        # a best record outside the template's space (edited, or from another version of
        # the template) is refused here, before anything is built or printed about it
        try:
            t.space(wl.args, wl.dtype, rec.target if gpu else None).from_json(rec.config)
        except TuneError as exc:
            raise _Fail(f"the best record of {wl} ({log}:{rec.line}) does not fit the "
                        f"template's space: {exc}; tune again, or remove that line") from None
    run_target = rec.target if gpu and rec is not None else a.target
    with apply_history_best(log, run_target):
        s, tensors = t(*wl.args, dtype=wl.dtype)
    print(f"polytile run {wl} on '{target}'")
    if rec is not None:
        cfg = " ".join(f"{k}={json.dumps(v)}" for k, v in rec.config.items())
        print(f"  record          {log}:{rec.line} ({_fmt_time(rec.cost)} when searched)")
        print(f"  config          {cfg}")
    else:
        print("  record          none: built with the default config")
    if a.print_ir:
        print(lower(s, tensors, target=run_target))
    f = polytile.build(s, tensors, target=run_target)
    if a.print_source:
        print(f.get_source())
    arrays = make_inputs(tensors, args=wl.args)
    outs = output_positions(tensors)
    if gpu:  # run once on the device here; timed below in the GPU runner
        dev = [polytile.nd.array(x, device="cuda") for x in arrays]
        f(*dev)
        arrays = [d.numpy() for d in dev]
    else:
        f(*arrays)
    if t.reference is not None:
        want = t.reference(*[_float64_input(x, tensors[k].dtype) for k, x in
                             enumerate(arrays) if k not in outs], args=wl.args)
        want = want if isinstance(want, tuple) else (want,)
        ok, why = True, ""
        for k, w in zip(outs, want):
            ok_k, why_k = outputs_match(arrays[k], np.asarray(w).astype(arrays[k].dtype),
                                        arrays[k].dtype)
            ok, why = ok and ok_k, why or why_k
        print(f"  check           {'matches numpy' if ok else 'WRONG: ' + why}")
        if not ok:
            raise _Fail(f"the built kernel disagrees with numpy: {why}")
    elif rec is not None and not gpu:
        # a template of the user's has no numpy reference: the default config is one
        sp = t.space(wl.args, wl.dtype, run_target)
        s0, tensors0 = t.instantiate(sp.default(), wl.args, wl.dtype, target=run_target)
        want = make_inputs(tensors0, args=wl.args)   # the same inputs (one seed)
        polytile.build(s0, tensors0, target=run_target)(*want)
        ok, why = True, ""
        for k in outs:
            ok_k, why_k = outputs_match(arrays[k], want[k], arrays[k].dtype)
            ok, why = ok and ok_k, why or why_k
        print(f"  check           {'matches' if ok else 'WRONG: differs from'} the default "
              f"config (the template has no numpy reference){': ' + why if not ok else ''}")
        if not ok:
            raise _Fail(f"the best record's kernel disagrees with the default config: {why}")
    else:
        print("  check           none (the template has no numpy reference)")
    _run_timing(t, wl, run_target if gpu else target, rec, log, a.threads)
    return EXIT_OK


# --------------------------------------------------------------------------- templates


def _cmd_templates(a) -> int:
    from polytile.autotune.template import registered

    rows = []
    for name, t in sorted(registered().items()):
        sizes = []
        for kind in t.target_kinds() or [None]:
            try:
                n = f"{len(t.space(None, 'float32', kind)):,}"
            except Exception as exc:  # a broken user template should not hide the others
                n = f"error: {exc}"[:40]
            sizes.append(n)
        size = " / ".join(sizes)
        desc = t.description if len(t.description) <= 64 else t.description[:63] + "…"
        kinds = t.target_kinds()
        rows.append((name, ",".join(kinds) if kinds else "any",
                     ",".join(map(str, t.default_args)), size, desc))
    print(_table(rows, ["template", "targets", "default --args", "space size (per target)",
                        "description"]))
    return EXIT_OK


# --------------------------------------------------------------------------- targets


def _cmd_targets(a) -> int:
    from polytile.backend import backends

    rows = []
    for b in backends():
        lim = b.limits
        gpu = (f"{lim.max_threads_per_block} threads, warp {lim.warp_size}, "
               f"{lim.shared_bytes_per_block // 1024} KiB shared") if b.is_gpu else "-"
        rows.append((b.kind, "gpu" if b.is_gpu else "cpu", "yes" if b.tunable else "no",
                     ", ".join(b.option_names) or "-", gpu, b.description))
    print(_table(rows, ["kind", "device", "tunable", "options", "limits", "description"]))
    return EXIT_OK


def _cmd_pipeline(a) -> int:
    from polytile.schedule.pipeline import describe

    print(f"lowering for '{a.target}' (lower() stops after 'allocation'; build() runs all):")
    print(describe(a.target))
    return EXIT_OK


def _configure_logging() -> None:
    """Apply ``POLYTILE_LOG`` (see :mod:`polytile.logconfig`); a bad value is a usage error."""
    from polytile.logconfig import configure, level_from_env

    try:
        level = level_from_env()
    except ValueError as e:
        raise _Fail(str(e)) from None
    if level is not None:
        configure(level)


# --------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="polytile", description="polytile: tune, run and inspect "
                                "tensor kernels.")
    p.add_argument("--version", action="version", version=f"polytile {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def workload_opts(q):
        q.add_argument("workload", help="template name (see `polytile templates`) or "
                       "path/to/file.py:function")
        q.add_argument("--args", type=_int_list, default=None,
                       help="workload arguments, e.g. 1024,1024,1024 (default: the "
                       "template's); a name (n,512) is a symbolic size, see --sizes")
        q.add_argument("--sizes", type=_size_list, action="append", default=None,
                       metavar="NAME=V1,V2,...",
                       help="values of a symbolic size named in --args: the template "
                       "(built for every n) is tuned/run at each value; repeat for more "
                       "sizes (every combination)")
        q.add_argument("--dtype", default="float32", help="element type (default float32)")
        q.add_argument("--target", default="llvm",
                       help="target string (default llvm, the host CPU); cuda (or cuda "
                       "-arch=sm_90) builds here and times on the NVIDIA GPU in a runner "
                       "process; `polytile templates` lists each template's targets")
        q.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)

    q = sub.add_parser("tune", help="search a template's schedule space (CPU or GPU)")
    workload_opts(q)
    q.add_argument("--tuner", type=_tuner, default="model",
                   help="model (a cost model guiding an evolutionary search; AutoTVM's "
                   "xgb), random or grid")
    q.add_argument("--trials", type=_positive, default=None,
                   help="trials in total, resumed ones included (default 96, within "
                   "95 s of search unless --timeout-total)")
    q.add_argument("--parallel", type=_positive, default=None,
                   help="build worker processes (default: cores)")
    q.add_argument("--threads", type=_positive, default=None,
                   help="threads candidates run with (default: cores; CPU targets)")
    q.add_argument("--log", default=None, help=f"records file (JSON Lines; default "
                   f"{DEFAULT_LOG})")
    q.add_argument("--resume", action="store_true", help="continue the run in --log")
    q.add_argument("--check", action="store_true",
                   help="check every candidate's output against the default config's (on "
                   "the GPU: against the numpy reference; without --check each distinct "
                   "kernel is checked on its first trial)")
    q.add_argument("--plot", default=None, metavar="PNG",
                   help="write best-so-far GFLOP/s vs trial to this PNG")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--full-space", action="store_true",
                   help="search every config of the template's space, also where the "
                   "template prefers a part of it (duplicates and regions known to be "
                   "slow, e.g. the cuda matmul at large sizes)")
    q.add_argument("--transfer", action="append", default=None, metavar="RECORDS",
                   help="records file whose trials of the same template at other shapes "
                   "warm-start the model tuner (repeatable; records of other shapes in "
                   "--log are used too)")
    q.add_argument("--early-stopping", type=_positive, default=None, metavar="N",
                   help="stop after N trials without improvement")
    q.add_argument("--timeout-total", type=_seconds, default=None, metavar="S",
                   help="wall-clock budget in seconds")
    q.add_argument("--number", type=_positive, default=1)
    q.add_argument("--repeat", type=_positive, default=3,
                   help="least repeats per measurement (more for fast kernels)")
    q.add_argument("--min-repeat-ms", type=float, default=20.0)
    q.add_argument("--max-spread", type=float, default=0.10,
                   help="re-measure a candidate once when its spread (IQR / median) is "
                   "above this (default 0.10)")
    q.add_argument("--flush-cache", action="store_true",
                   help="flush the caches before each repeat (CPU; on the GPU the inputs "
                   "always rotate over buffer sets larger than L2)")
    q.add_argument("--build-timeout", type=_seconds, default=20.0)
    q.add_argument("--run-timeout", type=_seconds, default=15.0,
                   help="seconds one candidate may run (a GPU kernel past it is taken as "
                   "hung: its runner is restarted)")
    q.add_argument("--no-numpy", action="store_true",
                   help="skip the comparison with numpy and torch (on the GPU: torch on "
                   "the GPU, cuBLAS without TF32 for matmul)")
    q.add_argument("--quiet", action="store_true", help="no progress bar")
    q.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="build and measure on a Ray cluster: auto (the cluster this machine "
                   "joined with `ray start`), local (a Ray instance started here) or "
                   "ray://host:port; needs pip install 'polytile[ray]'")
    q.set_defaults(fn=_cmd_tune)

    q = sub.add_parser("records", help="inspect a records file")
    q.add_argument("action", choices=("show", "best", "summary"))
    q.add_argument("file")
    q.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)
    q.set_defaults(fn=_cmd_records)

    q = sub.add_parser("run", help="build a workload with its best record, check, benchmark")
    workload_opts(q)
    q.add_argument("--log", default=None, help=f"records file (default {DEFAULT_LOG})")
    q.add_argument("--threads", type=_positive, default=None)
    q.add_argument("--print-ir", action="store_true", help="print the lowered loop nest")
    q.add_argument("--print-source", action="store_true", help="print the LLVM IR")
    q.set_defaults(fn=_cmd_run)

    q = sub.add_parser("targets", help="list the registered backends and their limits")
    q.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)
    q.set_defaults(fn=_cmd_targets)

    q = sub.add_parser("pipeline", help="print the phases of lowering for a target")
    q.add_argument("--target", default="llvm", help="target string (default llvm)")
    q.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)
    q.set_defaults(fn=_cmd_pipeline)

    q = sub.add_parser("templates", help="list the built-in templates")
    q.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)
    q.set_defaults(fn=_cmd_templates)
    return p


def _negative_args(argv: list) -> list:
    """``--args -3,4,4`` as ``--args=-3,4,4``: argparse takes a value starting with ``-``
    for an option and says only "expected one argument"; joined, the value reaches
    ``_int_list``, whose message says what is wrong with it."""
    out, k = [], 0
    while k < len(argv):
        nxt = argv[k + 1] if k + 1 < len(argv) else ""
        if argv[k] == "--args" and nxt[:1] == "-" and nxt[1:2].isdigit():
            out.append(f"--args={nxt}")
            k += 2
        else:
            out.append(argv[k])
            k += 1
    return out


def main(argv=None) -> int:
    """Run the command line; returns the exit code (``polytile`` exits with it)."""
    argv = _negative_args(list(sys.argv[1:] if argv is None else argv))
    args = _parser().parse_args(argv)  # exits 2 with argparse's message on usage errors
    from polytile.errors import PolytileError

    warnings.showwarning = _warn_line
    try:
        _configure_logging()
        return args.fn(args)
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stdout = open(os.devnull, "w")
        return EXIT_OK
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPT
    except (_Fail, PolytileError, OSError, ValueError, TypeError) as exc:
        if args.debug:
            raise
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        print(f"polytile: error: {lines[0]}", file=sys.stderr)
        for line in lines[1:]:  # the house format's hint names the fix
            if line.strip().startswith("hint:"):
                print(f"  {line.strip()}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:
        if args.debug:
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"polytile: error: {type(exc).__name__}: {first} (run with --debug for the "
              "traceback)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
