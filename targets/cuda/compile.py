"""CUDA C → cubin: NVRTC through ``cuda.bindings.nvrtc``, or the ``nvcc`` executable.

:func:`compile_cuda` picks NVRTC when ``cuda-python`` imports and NVRTC loads, else ``nvcc``
from ``PATH`` or a CUDA toolkit under ``/usr/local``. The architecture defaults to the compute
capability of CUDA device 0, or ``sm_90`` when this machine has no GPU. A failed compilation
raises :class:`~polytile.errors.BuildError` carrying the compiler's log and the source lines
it points at.

Compiled cubins are cached on disk, named by the sha256 of (source, architecture, options,
compiler and its version), by default under ``~/.cache/polytile/cuda``. Entries are written
atomically (a temporary file renamed into place); an unwritable cache directory only costs
the caching.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from polytile.errors import BuildError, TargetError, format_error

from .driver import device_compute_capability

DEFAULT_ARCH = "sm_90"
COMPILERS = ("auto", "nvrtc", "nvcc")


def default_cache_dir() -> Path:
    """``~/.cache/polytile/cuda``."""
    return Path.home() / ".cache" / "polytile" / "cuda"


# ---------------------------------------------------------------------------- discovery
@functools.cache
def _nvrtc():
    """The ``nvrtc`` bindings module, or None when cuda-python or libnvrtc is missing."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # cuda-python < 12.6
        except ImportError:
            return None
    try:
        err, _, _ = nvrtc.nvrtcVersion()
    except Exception:  # noqa: BLE001 - the library itself failed to load
        return None
    return nvrtc if int(err) == 0 else None


def nvrtc_version() -> tuple | None:
    """``(major, minor)`` of the NVRTC that :func:`compile_cuda` would use, or None."""
    m = _nvrtc()
    if m is None:
        return None
    _, major, minor = m.nvrtcVersion()
    return (major, minor)


def _toolkit_roots() -> list:
    roots = ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    return [r for r in roots if os.path.isdir(r)]


@functools.cache
def nvcc_path() -> str | None:
    """The ``nvcc`` executable: on ``PATH``, else in a toolkit under ``/usr/local``."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in _toolkit_roots():
        p = os.path.join(root, "bin", "nvcc")
        if os.access(p, os.X_OK):
            return p
    return None


@functools.cache
def nvcc_version() -> str:
    """The release line of ``nvcc --version`` (part of the cache key)."""
    out = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True,
                         check=False).stdout
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return lines[-1] if lines else "unknown"


@functools.cache
def _include_dirs() -> tuple:
    """Directories holding ``cuda_fp16.h`` for NVRTC (which has no built-in copy):
    next to the NVRTC library's own headers, cuda-pathfinder's toolkit headers, the
    toolkit of ``nvcc``, toolkits under ``/usr/local``."""
    cands = []
    try:
        import cuda.pathfinder as pf

        for lib in ("nvrtc", "cudart"):
            try:
                d = pf.find_nvidia_header_directory(lib)
            except Exception:  # noqa: BLE001 - not found or unsupported name
                d = None
            if d:
                cands.append(str(d))
    except ImportError:
        pass
    try:
        import nvidia.cuda_runtime as ncr  # the pip wheel torch depends on

        cands += [os.path.join(p, "include") for p in ncr.__path__]
    except ImportError:
        pass
    nvcc = nvcc_path()
    if nvcc:
        cands.append(os.path.join(os.path.dirname(os.path.realpath(nvcc)), "..", "include"))
    cands += [os.path.join(r, "include") for r in _toolkit_roots()]
    out = []
    for c in cands:
        c = os.path.normpath(c)
        if os.path.isfile(os.path.join(c, "cuda_fp16.h")) and c not in out:
            out.append(c)
    return tuple(out[:1])


@functools.cache
def default_arch() -> str:
    """``sm_<major><minor>`` of CUDA device 0, or :data:`DEFAULT_ARCH` without a GPU."""
    cc = device_compute_capability()
    return f"sm_{cc[0]}{cc[1]}" if cc else DEFAULT_ARCH


def available_compiler() -> str | None:
    """``"nvrtc"``, ``"nvcc"`` or None: what ``compiler="auto"`` picks."""
    if _nvrtc() is not None:
        return "nvrtc"
    if nvcc_path() is not None:
        return "nvcc"
    return None


# ---------------------------------------------------------------------------- errors
def _error(compiler: str, arch: str, log: str, source: str, name: str) -> BuildError:
    lines = source.splitlines()
    shown = []
    for m in re.finditer(r"\((\d+)\): (?:catastrophic )?error", log):
        n = int(m.group(1))
        if 1 <= n <= len(lines) and n not in shown:
            shown.append(n)
    context = {"Log": "\n    " + "\n    ".join(log.strip().splitlines())}
    if shown:
        context["Source"] = "\n    " + "\n    ".join(
            f"line {n}: {lines[n - 1].strip()}" for n in shown[:5])
    return BuildError(format_error(
        "compile_cuda", f"{compiler} failed to compile {name!r} for {arch}",
        "expected valid CUDA C", hint="a polytile bug if the source was generated; "
        "please report it with the schedule", **context))


# ---------------------------------------------------------------------------- compilers
def _compile_nvrtc(source: str, arch: str, options: tuple, name: str) -> bytes:
    nvrtc = _nvrtc()
    err, supported = nvrtc.nvrtcGetSupportedArchs()
    if int(err) == 0 and supported and int(arch[3:].rstrip("af")) not in supported:
        raise TargetError(format_error(
            "compile_cuda", f"this NVRTC {nvrtc_version()} cannot compile for {arch}",
            f"expected one of sm_{', sm_'.join(map(str, supported))}",
            hint="pass target='cuda -arch=sm_XX' or compiler='nvcc'"))
    opts = [f"--gpu-architecture={arch}", "--std=c++17"]
    if "#include <cuda_" in source:
        opts += [f"-I{d}" for d in _include_dirs()]
    opts += list(options)
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check_nvrtc(nvrtc, err, "nvrtcCreateProgram")
    try:
        bopts = [o.encode() for o in opts]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(bopts), bopts)
        if int(status) != 0:
            err, n = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * n
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise _error("NVRTC", arch, log.decode(errors="replace").rstrip("\0 "), source,
                         name)
        err, n = nvrtc.nvrtcGetCUBINSize(prog)
        _check_nvrtc(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * n
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check_nvrtc(nvrtc, err, "nvrtcGetCUBIN")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _check_nvrtc(nvrtc, err, what: str) -> None:
    if int(err) != 0:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        raise BuildError(format_error("compile_cuda", f"{what} failed: {msg.decode()}",
                                      "expected NVRTC to succeed"))


def compile_nvcc(source: str, arch: str = DEFAULT_ARCH, options: tuple = (),
                 name: str = "kernel.cu") -> tuple[bytes, str]:
    """Compile ``source`` with the ``nvcc`` executable into a cubin.

    Returns
    -------
    (cubin, stderr)
        The cubin's bytes and nvcc's diagnostics (warnings) as text.

    Raises
    ------
    BuildError
        When nvcc is missing or reports an error (with ``-Werror all-warnings`` in
        ``options``, any warning).
    """
    nvcc = nvcc_path()
    if nvcc is None:
        raise BuildError(format_error("compile_cuda", "no nvcc executable found",
                                      "expected nvcc on PATH or a CUDA toolkit in /usr/local"))
    with tempfile.TemporaryDirectory(prefix="polytile-nvcc-") as tmp:
        src = os.path.join(tmp, name)
        out = os.path.join(tmp, "out.cubin")
        with open(src, "w") as fh:
            fh.write(source)
        # sm_90a-style targets (arch-specific features: wgmma, setmaxnreg): nvcc 13.0's
        # -arch=sm_90a shorthand also runs a plain sm_90 pass that rejects them; -gencode
        # names the one pass
        flag = (f"-gencode=arch=compute_{arch[3:]},code={arch}" if arch.endswith(("a", "f"))
                else f"-arch={arch}")
        cmd = [nvcc, flag, "-cubin", "-std=c++17", "-o", out, *options, src]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp)
        log = (res.stderr + res.stdout).replace(tmp + os.sep, "")
        if res.returncode != 0 or not os.path.isfile(out):
            if "Unsupported gpu architecture" in log:
                raise TargetError(format_error(
                    "compile_cuda", f"nvcc {nvcc_version()} does not support {arch}",
                    "expected an architecture of this toolkit, e.g. sm_90",
                    hint="`nvcc --list-gpu-arch` lists them; omit -arch for the GPU's own"))
            raise _error("nvcc", arch, log, source, name)
        with open(out, "rb") as fh:
            return fh.read(), log


# ---------------------------------------------------------------------------- entry point
def compile_cuda(source: str, arch: str | None = None, options: tuple = (), *,
                 compiler: str = "auto", cache_dir: str | os.PathLike | None = None,
                 use_cache: bool = True, name: str = "polytile.cu") -> bytes:
    """Compile CUDA C ``source`` into a cubin for ``arch``.

    Parameters
    ----------
    source : str
        CUDA C++ source (kernels declared ``extern "C"``).
    arch : str, optional
        ``sm_XX``; default :func:`default_arch` (device 0, else ``sm_90``).
    options : tuple of str
        Extra compiler options, spelled for the chosen compiler (``-use_fast_math`` is
        understood by both).
    compiler : {"auto", "nvrtc", "nvcc"}
        ``auto`` prefers NVRTC and falls back to nvcc when NVRTC is missing or fails.
    cache_dir : path, optional
        Cache directory (default :func:`default_cache_dir`).
    use_cache : bool
        Read and write the on-disk cache.
    name : str
        File name the compiler reports in its diagnostics.

    Returns
    -------
    bytes
        The cubin.

    Raises
    ------
    BuildError
        No compiler available, an unsupported architecture, or a compile error (the message
        holds the log and the offending source lines).
    TargetError
        An unknown ``compiler``, or an architecture the compiler does not support.
    """
    if compiler not in COMPILERS:
        raise TargetError(format_error("compile_cuda", f"unknown compiler {compiler!r}",
                                       f"expected one of {', '.join(COMPILERS)}"))
    arch = arch or default_arch()
    chosen = available_compiler() if compiler == "auto" else compiler
    if chosen is None or (chosen == "nvrtc" and _nvrtc() is None):
        raise BuildError(format_error(
            "compile_cuda", "no CUDA compiler found" if chosen is None else
            "NVRTC is not available (cuda-python or libnvrtc missing)",
            "expected cuda-python with NVRTC (pip install cuda-python) or nvcc on PATH"))
    version = repr(nvrtc_version()) if chosen == "nvrtc" else (
        nvcc_version() if nvcc_path() else "none")
    key = hashlib.sha256(json.dumps([source, arch, list(options), chosen, version])
                         .encode()).hexdigest()
    path = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    entry = path / f"{key}.cubin"
    if use_cache and entry.is_file():
        return entry.read_bytes()
    if chosen == "nvrtc":
        try:
            cubin = _compile_nvrtc(source, arch, tuple(options), name)
        except (BuildError, TargetError):
            # auto: an NVRTC without the headers or the arch this source needs may still
            # leave nvcc able to build it; a genuine source error fails there too
            if compiler != "auto" or nvcc_path() is None:
                raise
            cubin, _ = compile_nvcc(source, arch, tuple(options), name)
    else:
        cubin, _ = compile_nvcc(source, arch, tuple(options), name)
    if use_cache:
        _store(entry, cubin)
    return cubin


def _store(entry: Path, data: bytes) -> None:
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-", suffix=".cubin")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, entry)
    except OSError:  # a cache that cannot be written only costs recompilation
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
