"""Expressions of the loop IR as C text: the expression half of the C printer.

:class:`CExprPrinter` is a base class of :class:`polytile.targets.c_printer.CPrinter`, which
owns the state it reads: the dialect ``d``, ``fast`` (fast-math), ``who`` (the name errors
carry), ``kname`` (the kernel being printed), ``env`` (``id(Var)`` -> C name), ``buffers``
(``id(Buffer)`` -> C name), ``texts`` (the memo of :meth:`CExprPrinter.expr`, emptied
whenever ``env`` or ``buffers`` changes), and collects ``helpers`` (inline functions to define) and
``dtypes`` (to pick headers). Every binary operation is parenthesised; see the module
docstring of :mod:`polytile.targets.c_printer` for the semantics kept.
"""

from __future__ import annotations

import numpy as np

from polytile.errors import BuildError, InternalError, format_error
from polytile.targets.c_dialect import GPUDialect
from polytile.schedule.intdiv import floordiv_expr, floormod_expr
from polytile.schedule.kinds import FRAGMENT_SCOPES, fragment_tile
from polytile.schedule.loop_ir import AccessPtr, Buffer, ExternCall, Load
from polytile.te import dtype as dt
from polytile.te.expr import And, Binary, Call, Cast, Cmp, Const, Expr, Not, Or, Select, Var

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "truncdiv": "/", "truncmod": "%",
          "bitand": "&", "bitor": "|", "bitxor": "^", "shl": "<<", "shr": ">>"}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def strip_parens(s: str) -> str:
    """``s`` without one pair of enclosing parentheses, when they match each other."""
    if not (s.startswith("(") and s.endswith(")")):
        return s
    # jump from parenthesis to parenthesis (``str.find``) instead of reading every
    # character: the indices of an unrolled kernel are thousands of long strings
    find, last = s.find, len(s) - 1
    depth, pos, opening = 1, 1, find("(", 1)
    while True:
        close = find(")", pos)
        while opening != -1 and opening < close:
            depth += 1
            opening = find("(", opening + 1)
        depth -= 1
        if depth == 0:
            return s[1:-1] if close == last else s
        pos = close + 1


def split_period(index: Expr, period: int) -> tuple:
    """``(hi, lo)`` with ``index == hi + lo``: ``hi`` the terms of ``index`` (a sum of
    multiples of sub-expressions) whose coefficients are multiples of ``period`` and the
    constant's multiple of it, ``lo`` the rest; ``hi`` None when there are none. Why: a
    swizzle of pattern ``period`` (a power of two) moves bits below it only, by bits
    below it, so ``swizzle(hi + lo) == hi + swizzle(lo)``: the slot and tile offsets of a
    pipelined copy stay out of the XOR, which then depends on the thread alone (computed
    once per thread instead of once per copy)."""
    from polytile.schedule.passes.async_copy import linear_terms

    lin = linear_terms(index)
    if lin is None:
        return None, index
    terms, const = lin
    q, r = divmod(const, period)
    out = {id(e) for e, k in terms.items() if k % period == 0 and k}
    if not out and not q:
        return None, index
    t = index.dtype

    def term(e: Expr, k: int) -> Expr:
        e = e if e.dtype == t else Cast(t, e)
        return e if k == 1 else Binary(t, "mul", e, Const(t, k))

    def total(parts: list, c: int) -> Expr:
        acc = None
        for p in parts:
            acc = p if acc is None else Binary(t, "add", acc, p)
        if c or acc is None:
            acc = Const(t, c) if acc is None else Binary(t, "add", acc, Const(t, c))
        return acc

    hi = total([term(e, k) for e, k in terms.items() if id(e) in out], q * period)
    lo = total([term(e, k) for e, k in terms.items() if id(e) not in out and k], r)
    return hi, lo


class CExprPrinter:
    """Prints expressions and memory accesses (a base class of ``CPrinter``)."""

    # ---------------------------------------------------------------- memory
    def buffer(self, b: Buffer) -> str:
        try:
            return self.buffers[id(b)]
        except KeyError:
            raise BuildError(format_error(
                self.who, f"buffer {b.name!r} is used outside its allocation",
                "expected a parameter buffer or one introduced by an enclosing Allocate",
                Kernel=self.kname)) from None

    def index(self, b: Buffer, indices: tuple) -> str:
        if len(indices) != 1:
            raise InternalError(format_error(
                self.who, f"access to {b.name!r} has {len(indices)} indices",
                "expected exactly one (flattened) index after storage flattening"))
        if b.swizzle != "none":
            # Stage.swizzle: the logical offset's 16-byte chunk XOR its 128-byte line
            from polytile.targets.cuda.wgmma import SWIZZLE_ROW_BYTES, swizzle_elements

            nbytes = dt.nbytes(b.dtype)
            hi, lo = split_period(indices[0], 8 * SWIZZLE_ROW_BYTES[b.swizzle] // nbytes)
            sw = swizzle_elements(lo, b.swizzle, nbytes)
            if hi is not None:
                sw = Binary(indices[0].dtype, "add", hi, sw)
            return strip_parens(self.expr(sw))
        return strip_parens(self.expr(indices[0]))

    # ---------------------------------------------------------------- expressions
    def expr(self, e: Expr) -> str:
        # the text of a node depends on the names in scope only: remembered by identity
        # until a name is bound (``texts`` is emptied then), so a node shared by several
        # statements (the loads the copies of an unrolled body share) is printed once
        texts = self.texts
        hit = texts.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        fn = getattr(self, "expr_" + type(e).__name__, None)
        if fn is None:
            raise InternalError(format_error(
                self.who, f"expression node {type(e).__name__} reached code generation",
                "expected only loop IR expressions (lowering removes TensorRead and Reduce)"))
        self.dtypes.add(e.dtype)
        out = fn(e)
        texts[id(e)] = (e, out)   # holding ``e`` keeps its id from being reused
        return out

    def expr_Var(self, e: Var) -> str:
        try:
            return self.env[id(e)]
        except KeyError:
            raise BuildError(format_error(
                self.who, f"variable {e.name!r} is used but not defined",
                "expected a parameter, a loop variable, a hardware index or a LetStmt "
                "variable in scope", Kernel=self.kname)) from None

    def expr_Const(self, e: Const) -> str:
        return self.const(e.dtype, e.value)

    def const(self, t: str, v) -> str:
        d = self.d
        if t == "bool":
            return "true" if v else "false"
        if t == "bfloat16":
            return f"{self._bfloat16('bfloat16_from_bits')}((unsigned short)" \
                   f"{int(dt.bfloat16_bits(v)):#06x})"
        if dt.is_float(t):
            x = np.array(v, dtype=t)[()]
            if np.isnan(x) or np.isinf(x):
                bits = {"float16": (d.half_from_bits, "0x7c00", "0x7e00", "(unsigned short)"),
                        "float32": (d.float_from_bits, "0x7f800000", "0x7fc00000", ""),
                        "float64": (d.double_from_bits, "0x7ff0000000000000LL",
                                    "0x7ff8000000000000LL", "")}[t]
                fn, inf, nan, cast = bits
                if np.isnan(x):
                    return f"{fn}({cast}{nan})"
                return f"{fn}({cast}{inf})" if x > 0 else f"(-{fn}({cast}{inf}))"
            if t == "float16":
                return f"{d.half_from_float}({self._float_lit(float(x), 'float32')})"
            return self._float_lit(float(x), t)
        v = int(v)
        suffix = {"int64": "LL", "uint32": "U", "uint64": "ULL"}.get(t, "")
        if t in ("int32", "int64") and v == dt.min_value(t):
            lit = f"(-{-v - 1}{suffix} - 1{suffix})"
        elif v < 0:
            lit = f"(-{-v}{suffix})"
        else:
            lit = f"{v}{suffix}"
        if dt.bits(t) < 32:
            return f"(({d.ctype(t)}){lit})"
        return lit

    @staticmethod
    def _float_lit(v: float, t: str) -> str:
        s = str(np.float32(v)) if t == "float32" else repr(v)
        if "e" not in s and "." not in s:
            s += ".0"
        s = s + "f" if t == "float32" else s
        return f"({s})" if v < 0 or s.startswith("-") else s

    def expr_Cast(self, e: Cast) -> str:
        return self.cast(self.expr(e.value), e.value.dtype, e.dtype)

    def cast(self, v: str, src: str, dst: str) -> str:
        """C text converting ``v`` (of ``src``) to ``dst`` with the loop IR's rules."""
        d = self.d
        if src == dst:
            return v
        if src == "bfloat16":
            f = f"{self._bfloat16('bfloat16_to_float')}({strip_parens(v)})"
            return self.cast(f, "float32", dst)
        if dst == "bfloat16":
            f = strip_parens(self.cast(v, src, "float32"))
            return f"{self._bfloat16('bfloat16_from_float')}({f})"
        if dst == "bool":
            if src == "float16":
                return f"({d.half_to_float}({strip_parens(v)}) != 0.0f)"
            return f"({v} != {self.const(src, 0)})"
        if src == "float16":
            f = f"{d.half_to_float}({strip_parens(v)})"
            return f if dst == "float32" else f"(({d.ctype(dst)}){f})"
        if dst == "float16":
            if src == "float32":
                return f"{d.half_from_float}({strip_parens(v)})"
            if src == "float64":
                return f"{d.half_from_double}({strip_parens(v)})"
            if dt.is_unsigned(src):
                return f"{d.half_from_uint64}((unsigned long long)({strip_parens(v)}))"
            return f"{d.half_from_int64}((long long)({strip_parens(v)}))"
        return f"(({d.ctype(dst)}){v})"

    def _bfloat16(self, what: str) -> str:
        """The dialect's bfloat16 conversion ``what`` (see ``CDialect``)."""
        fn = getattr(self.d, what)
        if not fn:
            raise BuildError(format_error(
                self.who, f"dialect {self.d.name!r} has no bfloat16 type",
                "expected float16/float32/float64 data on this target",
                hint="compute in float32 (.astype('float32'))", Kernel=self.kname))
        return fn

    def _not_bfloat16(self, what: str, dtype: str) -> None:
        if dtype == "bfloat16":
            raise InternalError(format_error(
                self.who, f"{what} on bfloat16 operands reached code generation",
                "expected float32 arithmetic and conversions (legalize_bfloat16 writes them)",
                Kernel=self.kname))

    def expr_Binary(self, e: Binary) -> str:
        self._not_bfloat16(f"binary op {e.op!r}", e.dtype)
        if e.op == "floordiv":
            return self.expr(floordiv_expr(e.a, e.b))
        if e.op == "floormod":
            return self.expr(floormod_expr(e.a, e.b))
        t = e.dtype
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op in ("min", "max"):
            name = ("pt_f" if dt.is_float(t) else "pt_") + e.op
            return f"{self.helper(name)}<{self.d.ctype(t)}>({strip_parens(a)}, {strip_parens(b)})"
        bad = (dt.is_float(t) and e.op not in ("add", "sub", "mul", "div")) or \
              (not dt.is_float(t) and e.op == "div") or e.op not in _INFIX
        if bad:
            raise BuildError(format_error(self.who, f"binary op {e.op!r} on {t} operands",
                                          "expected an op that polytile.te defines for this "
                                          "dtype", Kernel=self.kname))
        op = _INFIX[e.op]
        if (e.op in ("truncdiv", "truncmod") and dt.is_signed(t) and dt.bits(t) >= 32
                and not (isinstance(e.b, Const) and e.b.value not in (-1, 0))):
            # C's INT_MIN / -1 is undefined (a trap on x86): the helper wraps like numpy
            name = "pt_sdiv" if e.op == "truncdiv" else "pt_smod"
            return f"{self.helper(name)}<{self.d.ctype(t)}>({strip_parens(a)}, {strip_parens(b)})"
        if t == "bool":
            return f"((bool)({a} {op} {b}))"
        if dt.is_int(t) and dt.bits(t) < 32:
            if dt.is_unsigned(t) and e.op == "mul":
                a, b = f"(uint32_t){a}", f"(uint32_t){b}"
            return f"(({self.d.ctype(t)})({a} {op} {b}))"
        return f"({a} {op} {b})"

    def expr_Cmp(self, e: Cmp) -> str:
        self._not_bfloat16(f"comparison {e.op!r}", e.a.dtype)
        return f"({self.expr(e.a)} {_CMP[e.op]} {self.expr(e.b)})"

    def expr_And(self, e: And) -> str:
        return f"({self.expr(e.a)} && {self.expr(e.b)})"

    def expr_Or(self, e: Or) -> str:
        return f"({self.expr(e.a)} || {self.expr(e.b)})"

    def expr_Not(self, e: Not) -> str:
        return f"(!{self.expr(e.a)})"

    def expr_Select(self, e: Select) -> str:
        return f"({self.expr(e.cond)} ? {self.expr(e.true_value)} : {self.expr(e.false_value)})"

    def expr_Load(self, e: Load) -> str:
        if e.buffer.scope in FRAGMENT_SCOPES:
            raise BuildError(format_error(
                self.who, f"fragment {e.buffer.name!r} ({e.buffer.scope}) is read element by "
                "element", "fragments used only by tensor-core intrinsics (tensorize the "
                "stages that read them)", Kernel=self.kname))
        b = e.buffer
        v = f"{self.buffer(b)}[{self.index(b, e.indices)}]"
        if b.dtype == "bool":
            v = f"({v} != 0)"
        if e.dtype != b.dtype:
            v = self.cast(v, b.dtype, e.dtype)
        return v

    def expr_AccessPtr(self, e: AccessPtr) -> str:
        if e.buffer.scope in FRAGMENT_SCOPES:
            # a fragment buffer [R, C] is an array of th x tw tiles, row-major over the
            # tile grid: the element offset of a tile's corner -> its index
            th, tw = fragment_tile(e.buffer.scope, e.buffer.dtype, e.buffer.shape[-1])
            off, width = self.expr(e.offset), e.buffer.shape[-1]
            if width == tw:
                return f"{self.buffer(e.buffer)}[{strip_parens(off)} / {th * tw}]"
            return (f"{self.buffer(e.buffer)}[{off} / {th * width} * {width // tw} + "
                    f"{off} % {width} / {tw}]")
        return f"(&{self.buffer(e.buffer)}[{strip_parens(self.expr(e.offset))}])"

    def expr_ExternCall(self, e: ExternCall) -> str:
        if e.kind == "atomic":
            return self._atomic(e)
        if e.kind == "packed":
            from polytile.registry import SITES

            raise BuildError(format_error(
                self.who, f"tir.call_packed of {SITES.get(e.name, (e.name,))[0]!r} (a Python "
                f"function) on the {self.d.name!r} target",
                "expected call_packed on the 'llvm' target only (its code calls into Python)",
                hint="on a GPU, call a device function with tir.call_extern"))
        if e.kind == "llvm_intrin":
            raise BuildError(format_error(
                self.who, f"LLVM intrinsic {e.name!r} in a GPU kernel",
                "call_intrin or call_extern on C targets", Kernel=self.kname))
        name, _, _ = e.name.partition(":")     # ":<layout>" tags a fragment's layout
        found = self.d.call_helper(name)   # the dialect's instruction table
        if found is not None:
            name, text, preludes = found
            self.helpers.update(preludes)
            self.helpers[name] = text
        if e.name == "tma.load_2d":
            return self._tma_load(name, e)
        args = [strip_parens(self.expr(a)) for a in e.args]
        return f"{name}({', '.join(args)})"

    def _tma_load(self, name: str, e: ExternCall) -> str:
        """``tma.load_2d`` (:mod:`polytile.schedule.passes.tma_copy`) as ``name(dst,
        &map, c0, c1, bytes, bar)``, the map the kernel's parameter of its source, box
        and swizzle."""
        dst, src, c0, c1, rows, cols, bar, m, n = e.args
        key = (id(src.buffer), m.value, n.value, rows.value, cols.value, dst.buffer.swizzle)
        nbytes = rows.value * cols.value * dt.nbytes(src.buffer.dtype)
        args = [strip_parens(self.expr(a)) for a in (dst, c0, c1, bar)]
        return (f"{name}({args[0]}, &{self.tensor_maps[key]}, {args[1]}, {args[2]}, "
                f"{nbytes}u, {args[3]})")

    def _atomic(self, e: ExternCall) -> str:
        """``nibble_store(ptr, shift, v)`` (:mod:`polytile.schedule.passes.int4`): bits
        ``shift..shift+3`` of the byte at ``ptr`` become ``v``, with an atomic ``and`` and
        ``or`` on the aligned 32-bit word that holds the byte (the smallest atomics of
        CUDA and HIP; little-endian), so that a thread storing the other nibble keeps its
        bits. The word's address is ``p`` moved back by pointer arithmetic, not rebuilt
        from an integer: a pointer of no provenance let nvcc assume the atomics leave the
        ``__restrict__`` array alone, hoist its loads out of the loop and read it through
        the non-coherent cache (a cross-thread int4 sum was wrong on the H200)."""
        from polytile.schedule.passes.int4 import NIBBLE_STORE

        if e.name != NIBBLE_STORE or not isinstance(self.d, GPUDialect):
            raise BuildError(format_error(self.who, f"atomic call {e.name!r} in dialect "
                                          f"{self.d.name!r}", f"{NIBBLE_STORE!r} in a GPU "
                                          "kernel", Kernel=self.kname))
        name = "pt_nibble_store"
        self.helpers[name] = (
            f"{self.d.device_inline} void {name}(unsigned char* p, unsigned s, unsigned v) "
            "{ unsigned long long a = (unsigned long long)p; "
            "unsigned* w = (unsigned*)(p - (a & 3ULL)); unsigned sh = (unsigned)(a & 3ULL) * 8u + s; "
            "atomicAnd(w, ~(15u << sh)); atomicOr(w, (v & 15u) << sh); }")
        args = [strip_parens(self.expr(a)) for a in e.args]
        return f"{name}({', '.join(args)})"

    def expr_Call(self, e: Call) -> str:
        t = e.args[0].dtype if e.args else e.dtype
        self._not_bfloat16(f"intrinsic {e.name!r}", t)
        args = [strip_parens(self.expr(a)) for a in e.args]
        if e.name == "abs" and not dt.is_float(t):
            if dt.is_unsigned(t) or t == "bool":
                return args[0]
            return f"{self.helper('pt_abs')}<{self.d.ctype(t)}>({args[0]})"
        if e.name in ("popcount", "clz") and dt.is_int(t):
            return self._int_bits(e.name, args[0], t, e.dtype)
        if not dt.is_float(t) or e.name not in self.d.math:
            raise BuildError(format_error(
                self.who, f"unknown intrinsic {e.name!r} for {t} arguments",
                f"expected one of {', '.join(sorted(self.d.math))} on float arguments (abs "
                "also on ints)", Kernel=self.kname))
        fn = self.d.math_fn(e.name, t, self.fast)
        if fn is not None:
            return self._apply(fn, args, t)
        # no native function for this dtype (float16): compute in float32, round back
        f32 = [self.cast(a, t, "float32") for a in args]
        r = self._apply(self.d.math_fn(e.name, "float32", self.fast), f32, "float32")
        return r if e.dtype == "bool" else self.cast(r, "float32", t)

    def _int_bits(self, name: str, arg: str, t: str, out: str) -> str:
        """``popcount``/``clz`` of ``arg`` (dtype ``t``) through the dialect's builtins:
        the operand's bits zero-extended to 32 or 64 (popcount of narrower types)."""
        w = 64 if dt.bits(t) > 32 else 32
        fn = self.d.int_bit_fns.get((name, w))
        if fn is None:
            raise BuildError(format_error(
                self.who, f"{name} of {t} on the {self.d.name!r} target",
                "a target with integer bit-count builtins (cuda, hip, llvm)",
                Kernel=self.kname))
        if name == "popcount":
            wide = "unsigned long long" if w == 64 else "unsigned"
            x = f"({wide})({self.d.ctype('uint' + str(dt.bits(t)))})({arg})"
        else:
            x = f"(long long)({arg})" if w == 64 else f"(int)({arg})"
        return f"(({self.d.ctype(out)}){fn}({x}))"

    def _apply(self, fn: str, args: list, t: str) -> str:
        if fn in self.d.math_helpers:
            self.helpers[fn] = self.d.math_helpers[fn]
        if "{" in fn:
            exp = self.d.math_fn("exp", t, self.fast)
            return fn.format(*(f"({a})" for a in args), exp=exp)
        return f"{fn}({', '.join(args)})"

    # ---------------------------------------------------------------- helpers
    def helper(self, name: str) -> str:
        """Name of an inline helper, whose definition is added to the source once."""
        inline = self.d.device_inline
        body = {
            "pt_min": "a < b ? a : b",
            "pt_max": "a > b ? a : b",
            # numpy's minimum/maximum: a NaN in either operand propagates (fminf/fmaxf and
            # a plain ``a > b ? a : b`` drop one)
            "pt_fmin": "(a <= b || a != a) ? a : b",
            "pt_fmax": "(a >= b || a != a) ? a : b",
            # signed division and remainder that wrap at the minimum divided by -1
            "pt_sdiv": "b == (T)-1 ? (T)(0ULL - (unsigned long long)a) : a / b",
            "pt_smod": "b == (T)-1 ? (T)0 : a % b",
        }
        if name == "pt_abs":
            # negation through unsigned arithmetic: wraps at the minimum instead of UB
            text = (f"template <typename T> {inline} T pt_abs(T x) {{ return x < (T)0 ? "
                    "(T)(0ULL - (unsigned long long)x) : x; }")
        else:
            text = f"template <typename T> {inline} T {name}(T a, T b) {{ return {body[name]}; }}"
        special = getattr(self.d, "helper_specializations", {}).get(name)
        if special:
            text = f"{text}\n{special}"
        self.helpers[name] = text
        return name
