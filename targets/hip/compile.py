"""HIP C -> AMD GPU code, and its ISA, without needing an AMD GPU.

Two compilers, picked per ``-mcpu`` by :func:`compile_hip`:

* ``hipcc`` (Debian packages ``hipcc libamdhip64-dev rocm-device-libs``, run with
  ``HIP_PLATFORM=amd``): ``hipcc --offload-arch=<mcpu> --genco -O3`` gives a code-object
  bundle, a loadable image; its ISA comes from ``clang-offload-bundler --unbundle`` and
  ``llvm-objdump -d``.
* Where that hipcc's clang does not know ``mcpu`` (Debian 12's ROCm 5.2 uses clang 15,
  which has ``gfx90a`` and ``gfx940`` but not ``gfx942``/``gfx950``): clang compiles the
  device code for ``gfx940`` (the CDNA3 ISA that ``gfx942`` shares; the front end checks
  the builtins against it) to LLVM bitcode, and llvmlite's own LLVM (its AMDGPU back end,
  which knows ``gfx942`` and ``gfx950``) generates the code for ``mcpu`` itself: a
  relocatable ELF object and its assembly. That object is an ISA check, not a loadable
  code object; a real run compiles for the device (hiprtc, :mod:`.runtime`).

Nothing here is tested on AMD hardware (the project has none).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from polytile.errors import BuildError, TargetError, format_error

#: the -mcpu values of the ``hip`` target
ARCHS = ("gfx90a", "gfx942", "gfx950")
#: what clang compiles the front end for when it lacks the -mcpu (the same ISA family)
_FRONT_END_STAND_IN = {"gfx942": "gfx940", "gfx950": "gfx940"}
#: warnings that make a generated source a polytile bug
WARNINGS = ("-Wall", "-Wuninitialized", "-Wsometimes-uninitialized")


@dataclass(frozen=True)
class CodeObject:
    """The result of :func:`compile_hip`.

    Attributes
    ----------
    image : bytes
        A code-object bundle (hipcc) or a relocatable AMDGPU ELF object (llvmlite).
    mcpu : str
        The architecture the code was generated for.
    loadable : bool
        Whether ``image`` is a loadable code object (hipcc) rather than an ISA check.
    log : str
        The compiler's warnings.
    how : str
        Which compilers made it, for messages and docs.
    """

    image: bytes
    mcpu: str
    loadable: bool
    log: str
    how: str
    assembly_text: str = ""


@functools.cache
def hipcc_path() -> str | None:
    """The ``hipcc`` executable: on ``PATH``, else ``/opt/rocm/bin/hipcc``."""
    found = shutil.which("hipcc")
    if found:
        return found
    p = "/opt/rocm/bin/hipcc"
    return p if os.access(p, os.X_OK) else None


@functools.cache
def _llvm_bin() -> str | None:
    """The directory of the clang hipcc drives (``clang-offload-bundler``,
    ``llvm-objdump``)."""
    for d in ["/opt/rocm/llvm/bin"] + sorted(
            (f"/usr/lib/{x}/bin" for x in os.listdir("/usr/lib") if x.startswith("llvm-")),
            reverse=True):
        if os.path.isfile(os.path.join(d, "clang-offload-bundler")):
            return d
    return None


def _env() -> dict:
    env = dict(os.environ)
    env["HIP_PLATFORM"] = "amd"   # nvcc on the machine would make hipcc target NVIDIA
    return env


def _run_hipcc(args: list, source: str, tmp: str, name: str) -> tuple:
    src = os.path.join(tmp, name)
    with open(src, "w") as fh:
        fh.write(source)
    res = subprocess.run([hipcc_path(), *args, src], capture_output=True, text=True,
                         check=False, cwd=tmp, env=_env())
    return res, (res.stderr + res.stdout).replace(tmp + os.sep, "")


def _unsupported(log: str) -> bool:
    return "invalid target ID" in log or "unsupported" in log and "offload-arch" in log


def compile_hip(source: str, mcpu: str, options: tuple = (), *,
                name: str = "polytile.hip") -> CodeObject:
    """Compile HIP ``source`` for ``mcpu`` (module docstring: hipcc, or clang + llvmlite).

    Raises
    ------
    BuildError
        No hipcc, or a compile error (with the compiler's log and the source lines it
        points at).
    TargetError
        For an ``mcpu`` outside :data:`ARCHS`.
    """
    if mcpu not in ARCHS:
        raise TargetError(format_error("compile_hip", f"unknown -mcpu {mcpu!r}",
                                       f"one of {', '.join(ARCHS)}"))
    if hipcc_path() is None:
        raise BuildError(format_error(
            "compile_hip", "no hipcc found", "hipcc on PATH or in /opt/rocm/bin",
            hint="apt-get install hipcc libamdhip64-dev rocm-device-libs (Debian 12)"))
    with tempfile.TemporaryDirectory(prefix="polytile-hipcc-") as tmp:
        out = os.path.join(tmp, "out.co")
        res, log = _run_hipcc([f"--offload-arch={mcpu}", "--genco", "-O3", *WARNINGS,
                               *options, "-o", out], source, tmp, name)
        if res.returncode == 0 and os.path.isfile(out):
            with open(out, "rb") as fh:
                return CodeObject(fh.read(), mcpu, True, log, f"hipcc --offload-arch={mcpu}")
        if not _unsupported(log) or mcpu not in _FRONT_END_STAND_IN:
            raise _error(log, source, name, mcpu)
        front = _FRONT_END_STAND_IN[mcpu]
        bc = os.path.join(tmp, "out.bc")
        res, log = _run_hipcc([f"--offload-arch={front}", "--cuda-device-only", "-O3",
                               "-emit-llvm", "-c", *WARNINGS, *options, "-o", bc],
                              source, tmp, name)
        if res.returncode != 0 or not os.path.isfile(bc):
            raise _error(log, source, name, mcpu)
        with open(bc, "rb") as fh:
            obj, asm = _llvmlite_codegen(fh.read(), front, mcpu)
    return CodeObject(obj, mcpu, False, log,
                      f"hipcc --offload-arch={front} -emit-llvm, then llvmlite's LLVM for "
                      f"{mcpu}", asm)


def _llvmlite_codegen(bitcode: bytes, front: str, mcpu: str) -> tuple:
    """Bitcode generated for ``front`` -> (ELF object, assembly) for ``mcpu``, in a child
    process (an LLVM back-end failure aborts its process, which must not be the user's).

    Raises
    ------
    BuildError
        When LLVM fails.
    """
    import sys

    with tempfile.TemporaryDirectory(prefix="polytile-llvmlite-") as tmp:
        bc = os.path.join(tmp, "in.bc")
        with open(bc, "wb") as fh:
            fh.write(bitcode)
        res = subprocess.run([sys.executable, "-m", __name__, bc, front, mcpu, tmp],
                             capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise BuildError(format_error(
                "compile_hip", f"LLVM (llvmlite) failed to generate {mcpu} code",
                "valid device bitcode", Log="\n    " + "\n    ".join(
                    (res.stderr or res.stdout).strip().splitlines()[-20:])))
        with open(os.path.join(tmp, "out.o"), "rb") as fh, \
                open(os.path.join(tmp, "out.s")) as fs:
            return fh.read(), fs.read()


def _codegen_main(bc: str, front: str, mcpu: str, out: str) -> None:
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    with open(bc, "rb") as fh:
        text = str(llvm.parse_bitcode(fh.read()))
    text = text.replace(f'"target-cpu"="{front}"', f'"target-cpu"="{mcpu}"')
    tm = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(
        cpu=mcpu, opt=3, reloc="pic")
    # code generation rewrites the module it runs on (control-flow intrinsics): one
    # fresh parse per output
    for what, emit in (("out.o", tm.emit_object), ("out.s", tm.emit_assembly)):
        mod = llvm.parse_assembly(text)
        mod.verify()
        data = emit(mod)
        with open(os.path.join(out, what), "wb" if what.endswith(".o") else "w") as fh:
            fh.write(data)


def assembly(code: CodeObject) -> str:
    """The AMDGPU assembly of ``code`` (``llvm-objdump -d`` of the unbundled code object,
    or the assembly llvmlite printed).

    Raises
    ------
    BuildError
        When ``clang-offload-bundler``/``llvm-objdump`` are missing or fail.
    """
    if code.assembly_text:
        return code.assembly_text
    tools = _llvm_bin()
    if tools is None:
        raise BuildError(format_error("compile_hip", "no clang-offload-bundler found",
                                      "the clang of hipcc (llvm-*/bin)"))
    with tempfile.TemporaryDirectory(prefix="polytile-hipdis-") as tmp:
        bundle, elf = os.path.join(tmp, "in.co"), os.path.join(tmp, "out.elf")
        with open(bundle, "wb") as fh:
            fh.write(code.image)
        for cmd in ([os.path.join(tools, "clang-offload-bundler"), "--unbundle", "--type=o",
                     f"--input={bundle}", f"--targets=hipv4-amdgcn-amd-amdhsa--{code.mcpu}",
                     f"--output={elf}"],
                    [os.path.join(tools, "llvm-objdump"), "-d", f"--mcpu={code.mcpu}", elf]):
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise BuildError(format_error("compile_hip", f"{os.path.basename(cmd[0])} "
                                              f"failed: {res.stderr.strip()}",
                                              "a code object of hipcc"))
        return res.stdout


def mfma_instructions(asm: str) -> list:
    """The ``v_mfma_*`` mnemonics in assembly text, in order."""
    return re.findall(r"\b(v_mfma_\w+)", asm)


def _error(log: str, source: str, name: str, mcpu: str) -> BuildError:
    lines = source.splitlines()
    shown = []
    for m in re.finditer(re.escape(name) + r":(\d+):\d+: error", log):
        n = int(m.group(1))
        if 1 <= n <= len(lines) and n not in shown:
            shown.append(n)
    context = {"Log": "\n    " + "\n    ".join(log.strip().splitlines()[:40])}
    if shown:
        context["Source"] = "\n    " + "\n    ".join(
            f"line {n}: {lines[n - 1].strip()}" for n in shown[:5])
    return BuildError(format_error(
        "compile_hip", f"hipcc failed to compile {name!r} for {mcpu}", "valid HIP C",
        hint="a polytile bug if the source was generated; please report it with the "
        "schedule", **context))


__all__ = ["ARCHS", "CodeObject", "WARNINGS", "assembly", "compile_hip", "hipcc_path",
           "mfma_instructions"]

if __name__ == "__main__":
    import sys

    _codegen_main(*sys.argv[1:5])
