"""Compilation targets: what to generate code for, parsed from TVM-style strings.

Grammar: ``<kind> [-option[=value]]...``.

* ``llvm``: the host CPU through LLVM. Options: ``-mcpu=<name>`` (default: the host CPU),
  ``-mattr=+f1,-f2,...`` (LLVM feature edits applied on top of the CPU's features; with the
  default CPU those are the host's features), ``-opt-level=0..3`` (default 3) and
  ``-fast-math`` (full fast-math flags on float arithmetic, and ``exp``/``tanh``/``erf``/
  ``sigmoid`` use the faster, less accurate float32 routines of ``te.fast_exp``... described
  in :mod:`polytile.targets.llvm.vecmath`; off by default, when only ``contract`` is set so
  that ``a*b + c`` may become one FMA).
* ``cuda``: an NVIDIA GPU. Options ``-arch=sm_<NN>`` (default: the compute capability of
  device 0, else ``sm_90``) and ``-fast-math`` (``__expf``-style intrinsics and
  ``--use_fast_math``).

Examples: ``"llvm"``, ``"llvm -mcpu=znver4"``, ``"llvm -mattr=-avx512f"``,
``"llvm -opt-level=2 -fast-math"``, ``"cuda -arch=sm_90"``.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import re
from dataclasses import dataclass, field

from polytile.errors import TargetError, format_error

KINDS = ("llvm", "cuda")
_LLVM_OPTIONS = ("-mcpu", "-mattr", "-opt-level", "-fast-math")
_CUDA_OPTIONS = ("-arch", "-fast-math")

# Vector register width (bytes) of CPUs named by -mcpu without -mattr: LLVM derives their
# features itself and llvmlite cannot list them, so the width comes from this table.
_AVX512_CPUS = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
                "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids",
                "graniterapids", "graniterapids-d", "znver4", "znver5", "x86-64-v4")
_AVX2_CPUS = ("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
              "arrowlake", "lunarlake", "gracemont", "znver1", "znver2", "znver3",
              "x86-64-v3", "bdver4")


def _host_cpu() -> str:
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name()


def _host_features() -> tuple[str, ...]:
    import llvmlite.binding as llvm

    try:
        flat = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # llvmlite raises when the host feature list is unavailable
        return ()
    return tuple(f for f in flat.split(",") if f)


def _edit_features(base: tuple[str, ...], edits: tuple[str, ...]) -> tuple[str, ...]:
    """Apply ``+f``/``-f`` edits to a feature list; a later entry for a name wins."""
    out: dict[str, str] = {f[1:]: f[0] for f in base}
    for e in edits:
        out[e[1:]] = e[0]
    return tuple(sign + name for name, sign in out.items())


@dataclass(frozen=True, slots=True)
class Target:
    """A code generation target and its capabilities.

    Attributes
    ----------
    kind : str
        ``"llvm"`` (host CPU) or ``"cuda"``.
    cpu : str
        LLVM CPU name (``"znver4"``); empty for ``cuda``.
    features : tuple of str
        LLVM feature flags such as ``"+avx2"``/``"-avx512f"``; empty means "those of ``cpu``".
    opt_level : int
        LLVM optimisation level, 0 to 3.
    fast_math : bool
        Set LLVM's ``fast`` flags on float arithmetic (reassociation, no NaN/inf, ...).
    arch : str
        GPU architecture (``"sm_90"``) for ``cuda``; empty otherwise.
    host : bool
        True when ``cpu``/``features`` are the host's (no ``-mcpu``/``-mattr`` given).
    """

    kind: str
    cpu: str = ""
    features: tuple = ()
    opt_level: int = 3
    fast_math: bool = False
    arch: str = ""
    host: bool = True
    options: tuple = field(default=(), compare=False)

    @property
    def feature_string(self) -> str:
        """The features as LLVM's comma-separated ``+f,-g`` string."""
        return ",".join(self.features)

    def has_feature(self, name: str) -> bool:
        """True when feature ``name`` (``"avx2"``) is enabled, explicitly or by ``cpu``."""
        if f"+{name}" in self.features:
            return True
        if f"-{name}" in self.features:
            return False
        if name == "avx512f":
            return self.cpu in _AVX512_CPUS
        if name in ("avx2", "fma"):  # every CPU of both tables has FMA3
            return self.cpu in _AVX512_CPUS or self.cpu in _AVX2_CPUS
        return False

    @property
    def vector_width(self) -> int:
        """Width of the widest SIMD registers in bytes: 64 with AVX-512F, 32 with AVX2,
        16 otherwise (SSE/NEON); 0 for GPU targets."""
        if self.kind != "llvm":
            return 0
        if self.has_feature("avx512f"):
            return 64
        if self.has_feature("avx2"):
            return 32
        return 16

    def vector_lanes(self, dtype_bytes: int) -> int:
        """Number of elements of ``dtype_bytes`` bytes that fill one SIMD register."""
        return max(1, self.vector_width // max(1, dtype_bytes))

    def __str__(self) -> str:
        return " ".join((self.kind,) + tuple(self.options))

    @staticmethod
    def parse(spec: str | Target) -> Target:
        """Parse a target string (see the module docstring); a ``Target`` passes through.

        Raises
        ------
        TargetError
            For an unknown kind or option, a malformed value, or a ``-mattr`` that enables
            a feature this host lacks while compiling for the host CPU.
        """
        if isinstance(spec, Target):
            return spec
        if not isinstance(spec, str):
            raise TargetError(format_error(
                "target", f"got {type(spec).__name__} {spec!r}",
                "expected a target string such as 'llvm' or 'llvm -mcpu=znver4', or a Target"))
        words = spec.split()
        if not words:
            raise TargetError(format_error("target", "empty target string",
                                           f"expected one of {', '.join(map(repr, KINDS))}"))
        kind, opts = words[0], tuple(words[1:])
        if kind not in KINDS:
            raise TargetError(format_error(
                "target", f"unknown target kind {kind!r} in {spec!r}",
                f"expected one of {', '.join(map(repr, KINDS))}"))
        if kind == "llvm":
            return _parse_llvm(spec, opts)
        return _parse_cuda(spec, opts)


def _split_opt(spec: str, opt: str, known: tuple[str, ...]) -> tuple[str, str | None]:
    name, eq, value = opt.partition("=")
    if name not in known:
        raise TargetError(format_error(
            "target", f"unknown option {opt!r} in {spec!r}",
            f"expected one of {', '.join(known)}"))
    return name, (value if eq else None)


def _need_value(spec: str, name: str, value: str | None) -> str:
    if not value:
        raise TargetError(format_error("target", f"option {name!r} in {spec!r} has no value",
                                       f"expected {name}=<value>"))
    return value


def _parse_llvm(spec: str, opts: tuple[str, ...]) -> Target:
    cpu = None
    edits: tuple[str, ...] = ()
    opt_level = 3
    fast = False
    for opt in opts:
        name, value = _split_opt(spec, opt, _LLVM_OPTIONS)
        if name == "-mcpu":
            cpu = _need_value(spec, name, value)
        elif name == "-mattr":
            items = tuple(x for x in _need_value(spec, name, value).split(",") if x)
            bad = [x for x in items if x[0] not in "+-" or len(x) < 2]
            if bad:
                raise TargetError(format_error(
                    "target", f"malformed feature {bad[0]!r} in {spec!r}",
                    "expected features written as +name or -name, comma separated "
                    "(-mattr=+avx2,-fma)"))
            edits += items
        elif name == "-opt-level":
            v = _need_value(spec, name, value)
            if v not in ("0", "1", "2", "3"):
                raise TargetError(format_error(
                    "target", f"bad optimisation level {v!r} in {spec!r}", "expected 0, 1, 2 or 3"))
            opt_level = int(v)
        else:
            if value is not None:
                raise TargetError(format_error(
                    "target", f"option '-fast-math' takes no value (got {value!r})",
                    "expected just -fast-math"))
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
                "target", f"feature {missing[0]!r} requested by {spec!r} is not available on "
                f"this host CPU {host_cpu!r}", "expected features this machine supports",
                hint="code using it would crash with an illegal instruction; pass "
                     "-mcpu=<cpu> to generate code for another machine"))
        features = _edit_features(base, edits)
    else:
        features = _edit_features((), edits)
    return Target("llvm", cpu=cpu, features=features, opt_level=opt_level, fast_math=fast,
                  host=cpu == host_cpu and not edits, options=opts)


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


def _parse_cuda(spec: str, opts: tuple[str, ...]) -> Target:
    arch = ""
    fast = False
    for opt in opts:
        name, value = _split_opt(spec, opt, _CUDA_OPTIONS)
        if name == "-fast-math":
            if value is not None:
                raise TargetError(format_error(
                    "target", f"option '-fast-math' takes no value (got {value!r})",
                    "expected just -fast-math"))
            fast = True
            continue
        arch = _need_value(spec, name, value)
        if not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
            raise TargetError(format_error("target", f"bad GPU architecture {arch!r} in "
                                           f"{spec!r}", "expected sm_<NN>, e.g. -arch=sm_90"))
    return Target("cuda", arch=arch, opt_level=3, fast_math=fast, host=False, options=opts)
