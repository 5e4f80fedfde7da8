"""The ``llvm`` backend: the host CPU (or a named one) through LLVM, registered as data.

Options of ``llvm`` target strings: ``-mcpu=<name>`` (default: the host CPU),
``-mattr=+f1,-f2,...`` (LLVM feature edits applied on top of the CPU's features; with the
default CPU those are the host's features), ``-opt-level=0..3`` (default 3) and
``-fast-math`` (full fast-math flags on float arithmetic, and ``exp``/``tanh``/``erf``/
``sigmoid`` use the faster, less accurate float32 routines of ``te.fast_exp``... described
in :mod:`polytile.targets.llvm.vecmath`; off by default, when only ``contract`` is set so
that ``a*b + c`` may become one FMA).

Examples: ``"llvm"``, ``"llvm -mcpu=znver4"``, ``"llvm -mattr=-avx512f"``,
``"llvm -opt-level=2 -fast-math"``.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from dataclasses import replace

import llvmlite.binding as llvm

from polytile.backend import (Backend, DeviceLimits, Target, need_value, no_value,
                              register_backend, split_option)
from polytile.errors import TargetError, format_error

from .runtime import LLVMModule

# Vector register width (bytes) of CPUs named by -mcpu without -mattr: LLVM derives their
# features itself and llvmlite cannot list them, so the width comes from this table.
_AVX512_CPUS = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
                "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids",
                "graniterapids", "graniterapids-d", "znver4", "znver5", "x86-64-v4")
_AVX2_CPUS = ("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
              "arrowlake", "lunarlake", "gracemont", "znver1", "znver2", "znver3",
              "x86-64-v3", "bdver4")

#: Limits of a CPU target; ``vector_bytes`` is set per target from its features.
#: Stack: the smallest common thread stacks are 2 MiB (glibc's default for threads when
#: ``ulimit -s`` is unlimited; libgomp workers get that default unless ``OMP_STACKSIZE`` is
#: set) and 512 KiB (macOS secondary threads); a quarter of the latter per frame leaves
#: room for the caller's own frames, and one buffer takes at most half of that.
CPU_LIMITS = DeviceLimits(stack_buffer_bytes=64 * 1024, stack_frame_bytes=128 * 1024)


def _host_cpu() -> str:
    return llvm.get_host_cpu_name()


def _host_features() -> tuple:
    try:
        flat = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # llvmlite raises when the host feature list is unavailable
        return ()
    return tuple(f for f in flat.split(",") if f)


def _edit_features(base: tuple, edits: tuple) -> tuple:
    """Apply ``+f``/``-f`` edits to a feature list; a later entry for a name wins."""
    out: dict = {f[1:]: f[0] for f in base}
    for e in edits:
        out[e[1:]] = e[0]
    return tuple(sign + name for name, sign in out.items())


@functools.cache
def _cpu_known(cpu: str) -> bool:
    """Whether LLVM can generate code for ``cpu``. Asked in a subprocess: LLVM aborts the
    whole process (``LLVM ERROR``) on some unknown names instead of reporting them."""
    code = ("import llvmlite.binding as l; l.initialize_native_target(); "
            "l.initialize_native_asmprinter(); "
            f"tm = l.Target.from_default_triple().create_target_machine(cpu={cpu!r}); "
            "tm.emit_object(l.parse_assembly('define void @f() { ret void }'))")
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return True  # cannot tell: let the build report what LLVM says
    return p.returncode == 0 and "not a recognized processor" not in p.stderr


class LLVMBackend(Backend):
    """The CPU backend: llvmlite IR builder, LLVM's O3 pipeline, MCJIT, OpenMP threads."""

    kind = "llvm"
    description = "the host CPU (or -mcpu=<name>) through LLVM, JIT compiled"
    is_gpu = False
    option_names = ("-mcpu", "-mattr", "-opt-level", "-fast-math")
    tunable = True
    limits = CPU_LIMITS

    def parse_options(self, spec: str, options: tuple) -> Target:
        """Parse ``-mcpu``, ``-mattr``, ``-opt-level`` and ``-fast-math`` (module doc).

        Raises
        ------
        TargetError
            For an unknown option or CPU, a malformed value, or a ``-mattr`` that enables
            a feature this host lacks while compiling for the host CPU.
        """
        cpu = None
        edits: tuple = ()
        opt_level = 3
        fast = False
        for opt in options:
            name, value = split_option(spec, opt, self.option_names)
            if name == "-mcpu":
                cpu = need_value(spec, name, value)
            elif name == "-mattr":
                items = tuple(x for x in need_value(spec, name, value).split(",") if x)
                bad = [x for x in items if x[0] not in "+-" or len(x) < 2]
                if bad:
                    raise TargetError(format_error(
                        "target", f"malformed feature {bad[0]!r} in {spec!r}",
                        "expected features written as +name or -name, comma separated "
                        "(-mattr=+avx2,-fma)"))
                edits += items
            elif name == "-opt-level":
                v = need_value(spec, name, value)
                if v not in ("0", "1", "2", "3"):
                    raise TargetError(format_error(
                        "target", f"bad optimisation level {v!r} in {spec!r}",
                        "expected 0, 1, 2 or 3"))
                opt_level = int(v)
            else:
                no_value(name, value)
                fast = True
        host_cpu = _host_cpu()
        on_host = cpu is None or cpu == host_cpu
        if not on_host and not _cpu_known(cpu):
            raise TargetError(format_error(
                "target", f"LLVM does not know the CPU {cpu!r} in {spec!r}",
                "expected an LLVM CPU name such as 'znver4', 'skylake-avx512' or 'x86-64-v3'",
                hint="llc -mcpu=help lists them; omit -mcpu for this machine's CPU"))
        if cpu is None:
            cpu = host_cpu
        if on_host:
            base = _host_features()
            missing = [e[1:] for e in edits if e[0] == "+" and f"+{e[1:]}" not in base]
            if missing and base:
                raise TargetError(format_error(
                    "target", f"feature {missing[0]!r} requested by {spec!r} is not available "
                    f"on this host CPU {host_cpu!r}", "expected features this machine supports",
                    hint="code using it would crash with an illegal instruction; pass "
                         "-mcpu=<cpu> to generate code for another machine"))
            features = _edit_features(base, edits)
        else:
            features = _edit_features((), edits)
        t = Target("llvm", cpu=cpu, features=features, opt_level=opt_level, fast_math=fast,
                   host=cpu == host_cpu and not edits, options=options)
        return _with_vector_width(t)

    def implies_feature(self, target: Target, name: str) -> bool:
        """AVX-512F, AVX2 and FMA of CPUs named by ``-mcpu`` (the tables above)."""
        if name == "avx512f":
            return target.cpu in _AVX512_CPUS
        if name in ("avx2", "fma"):  # every CPU of both tables has FMA3
            return target.cpu in _AVX512_CPUS or target.cpu in _AVX2_CPUS
        return False

    def canonical(self, target: Target) -> str:
        """``"llvm"`` becomes ``"llvm -mcpu=<host cpu>"`` so records of different machines
        are told apart."""
        words = str(target).split()
        if not any(w.startswith("-mcpu") for w in words[1:]):
            words.insert(1, f"-mcpu={target.cpu}")
        return " ".join(words)

    def passes(self, target: Target) -> tuple:
        """Software prefetches (``Stage.prefetch``) become ``llvm.prefetch`` calls."""
        from polytile.schedule.passes.prefetch import insert_prefetches

        return (("insert_prefetches", insert_prefetches),)

    def build_module(self, func, target: Target, **options) -> LLVMModule:
        """JIT-compile ``func`` (see :class:`~.runtime.LLVMModule`)."""
        return LLVMModule(func, target)


def _with_vector_width(t: Target) -> Target:
    """``t`` with ``limits.vector_bytes`` from its features: 64 with AVX-512F, 32 with AVX2,
    16 otherwise (SSE/NEON)."""
    width = 64 if t.has_feature("avx512f") else 32 if t.has_feature("avx2") else 16
    return replace(t, limits=replace(CPU_LIMITS, vector_bytes=width))


register_backend(LLVMBackend())
