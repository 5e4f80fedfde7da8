"""JIT compilation of LLVM modules and the callable :class:`LLVMModule`.

Compilation: the llvmlite IR of :func:`.codegen.codegen_llvm` is parsed and verified,
optimised by LLVM's new pass manager (``create_pass_builder`` with
``PipelineTuningOptions``: the target's opt level, default O3, loop and SLP vectorization on)
for a target machine of the target's CPU name and features, and compiled by MCJIT (a
function with a basic block of more than ``BIG_BLOCK`` instructions, such as a sum of
thousands of terms, gets LLVM's fast instruction selector, with a warning: the default one
takes time quadratic in the block, minutes at 20,000 terms). libm
(``tanhf``, ``erf``...) and libgomp (``GOMP_parallel``, ``omp_get_thread_num``...) are loaded
into the process once with ``load_library_permanently`` so that the JIT resolves them.

Calling: :meth:`LLVMModule.__call__` validates every argument in Python before any native
code runs (see its docstring), then calls the function through ctypes and turns a nonzero
status into an exception. The execution engine lives as long as the module.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import shutil
import subprocess
import tempfile
import threading
import weakref

import llvmlite.binding as llvm
import numpy as np

from polytile.backend import Target
from polytile.errors import BuildError, TargetError, format_error, warn
from polytile.schedule.loop_ir import Buffer, PrimFunc, asserts
from polytile.te.expr import Var

from ..module import Module
from ..runtime_support import (SCALAR_CTYPES, check_arg_count, check_array, check_overlap,
                               scalar_arg, size_args)
from .analysis import stored_buffers
from .codegen import codegen_llvm
from .intrinsics import STATUS_ASSERT, STATUS_NO_MEMORY, STATUS_PACKED
from .workarounds import scalarize_constant_masked_stores

_lock = threading.Lock()
_state: dict = {}
_NEEDED_SYMBOLS = ("malloc", "free", "GOMP_parallel", "omp_get_thread_num",
                   "omp_get_num_threads", "tanhf", "tanh", "erff", "erf", "expf", "logf")
# float16 conversions LLVM lowers to libgcc calls on CPUs without AVX512-FP16 (GCC >= 12)
_HALF_SYMBOLS = ("__truncdfhf2", "__truncsfhf2", "__extendhfsf2")


def _load(name: str) -> str:
    path = ctypes.util.find_library(name)
    if path is None:
        raise BuildError(format_error("llvm runtime", f"library {name!r} not found",
                                      f"expected lib{name} installed (it comes with gcc)"))
    llvm.load_library_permanently(path)
    return path


#: libgomp's wait policy polytile asks for, unless the user chose one (see
#: :func:`omp_environment`).
OMP_WAIT_POLICY = "passive"


def omp_environment(environ=None) -> dict:
    """Set libgomp's wait policy in ``environ`` (default ``os.environ``) before libgomp is
    loaded; returns what was set (empty when the user set ``OMP_WAIT_POLICY`` or
    ``GOMP_SPINCOUNT``, which are left as they are).

    Why: libgomp reads its environment once, when it is loaded. Unset, its threads spin
    for 300,000 iterations at the end of each parallel region before sleeping; on cores
    shared with other processes (build workers, other users) a spinning thread takes the
    core from the thread that still has work. Measured on a loaded 2-core machine
    (``benchmarks/omp_wait.py``: a row softmax of four parallel regions, 2 threads): a
    median of 36 ms spinning vs 4.1 ms passive, and 63 ms vs 2.6 ms with one more
    busy process (load average 3.5); 83 vs 8.8 ms and 172 vs 20 ms at load average 40. On
    an idle machine spinning saves a few microseconds per region.
    Worker processes inherit the setting through the environment.
    """
    env = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" in env or "GOMP_SPINCOUNT" in env:
        return {}
    env["OMP_WAIT_POLICY"] = OMP_WAIT_POLICY
    return {"OMP_WAIT_POLICY": OMP_WAIT_POLICY}


def _gomp_already_loaded() -> bool:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return "libgomp" in f.read()
    except OSError:
        return False


#: LICM's cap on the memory accesses of a loop whose locations it promotes to registers
#: (LLVM's ``-licm-mssa-max-acc-promotion``, 250 by default), raised for unrolled
#: micro-kernels (see :func:`_ensure_llvm`).
LICM_MAX_ACCESSES = 4096


def _ensure_llvm() -> dict:
    """Initialise LLVM's native target once and load libm and libgomp into the process
    (libgomp's wait policy set first: :func:`omp_environment`)."""
    with _lock:
        if not _state:
            if omp_environment() and _gomp_already_loaded():
                # another library (xgboost, scikit-learn, torch) loaded libgomp first: its
                # environment was read then, so a spinning runtime is what we get here
                _state["gomp_preloaded"] = True
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            # LICM keeps a loop's memory accesses in registers (a GEMM micro-kernel's
            # accumulators) only up to 250 accesses in the loop: a 12 x 32 kernel with its
            # k loop unrolled 4 times has about 250, and then ran from memory (45 instead
            # of 170 GFLOP/s); register pressure, not this cap, is what should limit it
            llvm.set_option("polytile", f"-licm-mssa-max-acc-promotion={LICM_MAX_ACCESSES}")
            _load("m")
            if ctypes.util.find_library("gcc_s"):
                _load("gcc_s")
            gomp = ctypes.CDLL(_load("gomp"))
            gomp.omp_set_num_threads.argtypes = [ctypes.c_int]
            gomp.omp_get_max_threads.restype = ctypes.c_int
            missing = [s for s in _NEEDED_SYMBOLS if not llvm.address_of_symbol(s)]
            if missing:
                raise BuildError(format_error(
                    "llvm runtime", f"symbols {missing} do not resolve in this process",
                    "expected libm and libgomp exporting them"))
            _state["gomp"] = gomp
        return _state


def set_num_threads(n: int) -> None:
    """Set the number of OpenMP threads of later parallel loops (libgomp's
    ``omp_set_num_threads``; it applies to calls made from the calling thread).

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(format_error("set_num_threads", f"got {n!r}",
                                      "expected a positive number of threads"))
    _ensure_llvm()["gomp"].omp_set_num_threads(int(n))


def get_num_threads() -> int:
    """Number of threads the next parallel loop will use (``omp_get_max_threads``)."""
    return int(_ensure_llvm()["gomp"].omp_get_max_threads())


def _target_machine(target: Target, jit: bool = True):
    tgt = llvm.Target.from_triple(llvm.get_process_triple())
    if jit:
        return tgt.create_target_machine(cpu=target.cpu, features=target.feature_string,
                                         opt=target.opt_level, jit=True)
    # a shared library needs position-independent code
    return tgt.create_target_machine(cpu=target.cpu, features=target.feature_string,
                                     opt=target.opt_level, reloc="pic", codemodel="default")


#: instructions in one basic block beyond which code generation uses the fast selector
BIG_BLOCK = 20_000


def _largest_block(mod) -> int:
    return max((sum(1 for _ in b.instructions) for f in mod.functions for b in f.blocks),
               default=0)


def _codegen_machine(mod, tm, target: Target, name: str):
    """``tm``, or one at codegen opt level 0 (fast instruction selection) when ``mod`` has
    a basic block beyond :data:`BIG_BLOCK` instructions (the IR stays optimised)."""
    big = _largest_block(mod)
    if big <= BIG_BLOCK:
        return tm
    warn(format_error(
        "build", f"function {name!r} has a basic block of {big} LLVM instructions, so it is "
        f"compiled with LLVM's fast instruction selector (the default one takes time "
        f"quadratic in the block's size)", "expected blocks of at most "
        f"{BIG_BLOCK} instructions for full code generation",
        hint="reduce over a te.reduce_axis instead of summing thousands of terms in one "
        "expression"))
    tgt = llvm.Target.from_triple(llvm.get_process_triple())
    return tgt.create_target_machine(cpu=target.cpu, features=target.feature_string, opt=0,
                                     jit=True)


def optimize(mod, tm, opt_level: int) -> None:
    """Run LLVM's default pipeline at ``opt_level`` with loop and SLP vectorization on."""
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


#: A line of imported LLVM IR text naming a shared library to load for its functions
#: (``polytile.contrib.clang.create_llvm`` without clang compiles with the C compiler).
SHARED_LIBRARY_TAG = "; polytile-shared-library: "


def compile_c(source: str, out_dir: str | None = None, name: str = "extern") -> str:
    """Compile C (or C++, when it says ``extern "C"``) ``source`` with the system compiler
    into a shared library; returns its path.

    Raises
    ------
    BuildError
        When no compiler is found or compilation fails (with the compiler's output).
    """
    cplus = 'extern "C"' in source
    cc = shutil.which("g++" if cplus else "cc") or shutil.which("c++" if cplus else "gcc")
    if cc is None:
        raise BuildError(format_error("import_c", "no C compiler found",
                                      "gcc/cc (or g++ for C++ source) on PATH"))
    out_dir = out_dir or tempfile.mkdtemp(prefix="polytile_c_")
    src = os.path.join(out_dir, f"{name}.{'cc' if cplus else 'c'}")
    lib = os.path.join(out_dir, f"{name}.so")
    with open(src, "w") as f:
        f.write(source)
    r = subprocess.run([cc, "-O3", "-march=native", "-shared", "-fPIC", "-o", lib, src],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(format_error("import_c", f"{os.path.basename(cc)} failed on the "
                                      f"extern source: {r.stderr.strip()[:2000]}",
                                      "C source that compiles"))
    return lib


def link_imports(mod, imports) -> list:
    """Link the ``import_llvm`` texts into ``mod`` and load the libraries of ``import_c``
    sources (and of texts naming one); returns the loaded library paths."""
    libs = []
    for kind, text in imports:
        if kind == "import_c":
            libs.append(compile_c(text))
            llvm.load_library_permanently(libs[-1])
            continue
        for line in text.splitlines():
            if line.startswith(SHARED_LIBRARY_TAG):
                libs.append(line[len(SHARED_LIBRARY_TAG):].strip())
                llvm.load_library_permanently(libs[-1])
        other = llvm.parse_assembly(text)
        other.verify()
        mod.link_in(other)
    return libs


def _check_resolved(mod, name: str) -> None:
    """Refuse a module that calls a function nobody defines. MCJIT links such a call to
    address 0, so the first call of the built function crashed the process (a tensor
    intrinsic's ``call_extern`` naming a function its ``import_c`` source lacks).

    Raises
    ------
    BuildError
        Naming the unresolved functions.
    """
    missing = sorted(f.name for f in mod.functions
                     if f.is_declaration and not f.name.startswith("llvm.")
                     and not llvm.address_of_symbol(f.name))
    if missing:
        raise BuildError(format_error(
            "build", f"function {name!r} calls {missing}, defined nowhere (not in an "
            "import_c/import_llvm source, nor in a library of this process)",
            "every call_extern to name a function that an import_c or import_llvm pragma "
            "defines", hint="check the spelling of the call_extern name and of the C "
            "function (a C++ source needs extern \"C\")"))


class LLVMModule(Module):
    """A function compiled for the CPU, callable with numpy arrays and scalars.

    ``get_source("ll")`` gives the optimised LLVM IR (``optimized=False``: as generated),
    ``get_source("asm")`` the assembly; ``export_library`` writes ``.ll``, ``.s``, an
    object file ``.o`` or a shared library ``.so`` that runs without polytile (see
    :mod:`.library` for its C ABI; :func:`polytile.runtime.load_module` loads it back).

    Parameters
    ----------
    func : PrimFunc
        Lowered loop IR.
    target : Target
        An ``llvm`` target.

    Raises
    ------
    BuildError
        If LLVM rejects the generated module (the message carries LLVM's log).
    """

    def __init__(self, func: PrimFunc, target: Target):
        if target.kind != "llvm":
            raise TargetError(format_error("build", f"target {str(target)!r} cannot run on "
                                           "the CPU", "expected an 'llvm' target"))
        _ensure_llvm()
        super().__init__(func, target)
        #: (checker of the arguments, bound ctypes call) of the last checked call
        self._fast = None
        self._ir = codegen_llvm(func, target)
        self._asserts = asserts(func.body)
        self._ir_text = str(self._ir)
        if "half" in self._ir_text:
            missing = [x for x in _HALF_SYMBOLS if not llvm.address_of_symbol(x)]
            if missing:
                raise BuildError(format_error(
                    "build", f"float16 code needs {missing} (libgcc_s of GCC >= 12), which "
                    "this process cannot resolve", "expected a libgcc_s.so.1 exporting them"))
        try:
            mod = llvm.parse_assembly(self._ir_text)
            mod.verify()
            self._libs = link_imports(mod, func.attrs.get("imports", ()))
        except RuntimeError as exc:
            raise BuildError(format_error("build", f"LLVM rejected the code generated for "
                                          f"{func.name!r}: {exc}", "expected valid LLVM IR",
                                          hint="this is a polytile bug; please report it"))
        tm = _target_machine(target)
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        optimize(mod, tm, target.opt_level)
        self._opt_text = str(mod)
        fixed = scalarize_constant_masked_stores(self._opt_text)
        if fixed is not self._opt_text:   # around an x86 miscompilation (workarounds.py)
            mod = llvm.parse_assembly(fixed)
            mod.verify()
            self._opt_text = fixed
        from polytile.registry import PACKED_PREFIX, bind_symbols

        self._packed = sorted(f.name for f in mod.functions
                              if f.is_declaration and f.name.startswith(PACKED_PREFIX))
        bind_symbols(self._packed)
        _check_resolved(mod, func.name)
        self._tm = tm
        self._asm = None
        self._engine = llvm.create_mcjit_compiler(mod, _codegen_machine(mod, tm, target,
                                                                        func.name))
        self._engine.finalize_object()
        addr = self._engine.get_function_address(func.name)
        argtypes = [ctypes.c_void_p if isinstance(p, Buffer) else SCALAR_CTYPES[p.dtype]
                    for p in func.params]
        self._cfunc = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(addr)
        self._stored = stored_buffers(func.body)

    source_formats = ("ll", "asm")
    export_formats = {".ll": "ll", ".s": "asm"}
    #: (checker of the arguments, bound ctypes call) of the last checked call; a class
    #: default for subclasses that bind ``_cfunc`` themselves (:mod:`.library`)
    _fast = None

    # ------------------------------------------------------------------ sources
    def get_source(self, fmt: str | None = "ll", optimized: bool = True) -> str:
        """Generated code as text.

        Parameters
        ----------
        fmt : {"ll", "asm"}
            LLVM IR or the host assembly.
        optimized : bool
            For ``"ll"``: the IR after LLVM's optimisation (default) or as generated.

        Raises
        ------
        ValueError
            For another ``fmt``.
        """
        if fmt in (None, "ll", "llvm"):
            return self._opt_text if optimized else self._ir_text
        if fmt in ("asm", "s"):
            if self._asm is None:
                self._asm = self._tm.emit_assembly(llvm.parse_assembly(self._opt_text))
            return self._asm
        raise ValueError(format_error("get_source", f"unknown format {fmt!r}",
                                      "expected 'll' (LLVM IR) or 'asm' (assembly)"))

    # ------------------------------------------------------------------ calling
    def _convert(self, args: tuple) -> list:
        f = self.func
        args = size_args(self.name, f, args)   # symbolic sizes, read off the arrays
        check_arg_count(self.name, f.params, args)
        scalars = {}
        out: list = [None] * len(args)
        for k, (p, a) in enumerate(zip(f.params, args)):
            if isinstance(p, Var):
                out[k], scalars[p] = scalar_arg(self.name, p, a)
        arrays = []
        for k, (p, a) in enumerate(zip(f.params, args)):
            if isinstance(p, Buffer):
                _check_array(self.name, p, a, scalars, p in self._stored)
                out[k] = a.ctypes.data
                arrays.append((p, a))
        check_overlap(self.name, [(a.ctypes.data, a.ctypes.data + a.nbytes, p)
                                  for p, a in arrays if a.nbytes], self._stored)
        return out

    def __call__(self, *args) -> None:
        """Run the function on numpy arrays (written in place) and scalars.

        Arguments come in parameter order. An array must be a ``numpy.ndarray`` of exactly
        the buffer's dtype and shape, C-contiguous, writeable when the function stores to
        it, and must not overlap another array argument when either of them is written
        (parameters are ``noalias``). A scalar must be a Python or numpy number that fits
        the parameter's dtype.

        Raises
        ------
        TypeError
            Wrong number of arguments, a non-array for a buffer, a wrong dtype, a
            non-number for a scalar.
        ValueError
            Wrong shape, non-contiguous or read-only output arrays, overlapping arrays, a
            scalar out of its dtype's range.
        MemoryError
            A heap allocation of the function failed.
        """
        # the same arrays as in the last call, unchanged: their checks hold and their
        # converted values are bound already (a 64^3 matmul: 24 us checking every call,
        # 5.5 with a loop over cached checks, 4.7 with this one; numpy 4.5; CPU time)
        fast = self._fast
        if fast is not None and fast[0](args):
            status = fast[1]()
        else:
            status = self._slow_call(args)
        if status:
            self._check_status(status)

    def _slow_call(self, args: tuple) -> int:
        """Check and convert ``args``, remember them for the next call (numpy arrays only:
        :func:`_fast_check`) and run the function; returns its status."""
        cargs = self._convert(args)
        call = functools.partial(self._cfunc, *cargs)
        from polytile.nd import CPUArray   # (polytile.nd imports the backends)

        # polytile.nd.array's CPUArray (TVM's tvm.nd.array) is a plain ndarray to the checks
        if all(type(a) is np.ndarray or type(a) is CPUArray for a in args):
            written = [p in self._stored for p in self.func.params[:len(args)]]
            self._fast = (_fast_check(args, written), call)
        return call()

    def _check_status(self, status: int) -> None:
        if status == 0:
            return
        if status >= STATUS_ASSERT and status - STATUS_ASSERT < len(self._asserts):
            a = self._asserts[status - STATUS_ASSERT]
            exc = {"ZeroDivisionError": ZeroDivisionError}.get(a.error, IndexError)
            raise exc(f"{self.name}: {a.message}")
        if status == STATUS_PACKED:
            from polytile.registry import take_pending

            exc = take_pending()
            if exc is not None:
                raise exc
        if status == STATUS_NO_MEMORY:
            raise MemoryError(format_error(self.name, "a heap allocation failed (malloc "
                                           "returned NULL or the size overflowed)",
                                           "expected enough memory for the 'heap' buffers"))
        raise RuntimeError(format_error(self.name, f"returned the unknown status {status}",
                                        "expected 0"))

    def _bind(self, args: tuple):
        """The user's call ``self(*args)``: what :meth:`time_evaluator` and the tuner time
        (:mod:`polytile.autotune.timing`), Python call and argument checks included (the
        checks of the first call are reused by the next ones, see :meth:`__call__`)."""
        return functools.partial(self.__call__, *args)

    def _check_result(self, status) -> None:
        """Nothing to do: ``__call__`` raised already for a failed status."""

    # ------------------------------------------------------------------ export
    def _binary_exports(self) -> tuple:
        return (".o", ".so")

    def _export(self, path: str, suffix: str) -> None:
        from .library import write_library

        write_library(self, path, suffix)


def _fast_check(args: tuple, written: list):
    """A function ``same(args)``: True when ``args`` are the numpy arrays ``args`` of a
    checked call, unchanged in what the checks read: the same objects (weak references: a
    dead array never matches), shape, strides and dtype, and, for the ``written`` ones,
    still writeable. The data pointer of a live array cannot change at the same shape.

    Generated as one expression per call signature: a loop over the arrays took 0.8 us
    for three of them, this 0.55 (a 64^3 matmul runs in 3.7)."""
    n = len(args)
    if n == 0:
        return lambda args: not args
    env: dict = {}
    for k, a in enumerate(args):
        env[f"r{k}"], env[f"s{k}"], env[f"t{k}"], env[f"d{k}"] = (
            weakref.ref(a), a.shape, a.strides, a.dtype)
    names = ", ".join(f"a{k}" for k in range(n)) + ("," if n == 1 else "")
    terms = [f"r{k}() is a{k}" for k in range(n)]
    terms += [f"a{k}.shape == s{k} and a{k}.strides == t{k} and a{k}.dtype is d{k}"
              for k in range(n)]
    terms += [f"a{k}.flags.writeable" for k in range(n) if written[k]]
    src = (f"def same(args):\n    if len(args) != {n}:\n        return False\n"
           f"    {names} = args\n    return bool({' and '.join(terms)})\n")
    exec(src, env)  # noqa: S102 - the source holds generated names only, no input text
    return env["same"]


def _check_array(fname: str, p: Buffer, a, scalars: dict, written: bool) -> None:
    if not isinstance(a, np.ndarray):
        raise TypeError(format_error(fname, f"argument {p.name!r} is a {type(a).__name__}"
                                     f"{_device_of(a)}", f"expected a numpy.ndarray of dtype "
                                     f"{p.dtype}", hint=_host_hint(a, p)))
    if isinstance(a, np.ma.MaskedArray):
        # the function would read masked elements and leave the mask as it was
        raise TypeError(format_error(fname, f"argument {p.name!r} is a masked array",
                                     f"expected a plain numpy.ndarray of dtype {p.dtype}",
                                     hint=f"pass {p.name}.filled(value) or {p.name}.data"))
    check_array(fname, p, dtype=a.dtype, shape=a.shape, contiguous=a.flags.c_contiguous,
                writeable=a.flags.writeable, written=written, scalars=scalars,
                contiguous_hint=f"pass np.ascontiguousarray({p.name})")


def _device_of(a) -> str:
    """`` on cuda:0`` for an array object whose DLPack device is not the host, else ''."""
    try:
        kind, index = a.__dlpack_device__()
    except Exception:  # noqa: BLE001 - not a DLPack producer, or a broken one
        return ""
    names = {2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm",
             13: "cuda_managed", 14: "oneapi"}
    return "" if int(kind) == 1 else f" on {names.get(int(kind), f'device {kind}')}:{index}"


def _host_hint(a, p: Buffer) -> str:
    name = p.name
    if _device_of(a):
        return (f"functions built for 'llvm' run on the CPU: copy it to the host "
                f"(torch: {name}.cpu().numpy()), or build for 'cuda'")
    if hasattr(a, "__dlpack__") or hasattr(a, "__array__"):
        return f"convert it with np.asarray({name}) (torch: {name}.numpy())"
    return f"wrap it with np.asarray({name}, dtype='{p.dtype}')"
