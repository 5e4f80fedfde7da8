"""Data types of tensor expressions and their promotion rules.

Dtypes are canonical strings: ``bool``, ``int4/8/16/32/64``, ``uint4/8/16/32/64``,
``float16/32/64`` and ``bfloat16``. Any numpy dtype or dtype name is accepted where a dtype
is expected and is canonicalised by :func:`canonical`, with TVM's aliases: ``"float"`` is
``float32``, ``"int"`` ``int32``, ``"uint"`` ``uint32`` and ``"double"`` ``float64`` (numpy
would read the first three as 64-bit types).

``bfloat16`` (Google Brain's 16-bit float: float32's sign and 8-bit exponent, 7 stored
mantissa bits) is a real dtype with 2-byte storage. numpy has none: host arrays of it are
``uint16`` arrays holding the bit patterns (:func:`bfloat16_bits`,
:func:`bfloat16_to_float32`), or ``ml_dtypes.bfloat16`` arrays when the optional package
``ml_dtypes`` is installed (``pip install polytile[bf16]``); both are accepted by built
functions. Every ``bfloat16`` operation (``+ - * /``, min/max, math functions) computes in
``float32`` and rounds its result to nearest even, so each value, in registers as in memory,
is a ``bfloat16`` and no schedule (inlining, caching) can change a result; this is
``ml_dtypes``' arithmetic and torch's eager one (TVM rounds only at stores, which
``compute_inline`` would then move). Since float32 has more than twice bfloat16's precision,
``+ - * /`` and ``sqrt`` are correctly rounded. A conversion to ``bfloat16`` from
``float64`` or an integer goes through ``float32`` (as ``ml_dtypes``, Eigen and torch do).
So ``te.sum(A[i, k] * B[k, j])`` over bfloat16 rounds each product, then accumulates in
``float32`` (below); cast the operands (``A[i, k].astype("float32")``) to keep the
products exact. Lowering writes all of it out in ``float32``
(:mod:`polytile.schedule.passes.bfloat16`): LLVM keeps a bfloat16 as its ``i16`` bits and
rounds with integer instructions, CUDA uses ``__nv_bfloat16`` and ``__float2bfloat16_rn``.

``int4``/``uint4`` (TVM's 4-bit integers, ranges [-8, 7] and [0, 15]) are a storage format:
a tensor of them holds two elements per byte, packed along its last axis, element ``2m``
in the low nibble of byte ``m`` and ``2m + 1`` in the high one, each row starting on a new
byte (a last axis of ``n`` takes ``ceil(n / 2)`` bytes; an odd row leaves its last high
nibble unused). Host arrays of them are ``uint8`` arrays in that packed form, shape
``(..., ceil(n / 2))`` (:func:`pack_int4`, :func:`unpack_int4`; ``polytile.nd`` exports
both). Arithmetic on them follows the integer rules below at 4 bits (it wraps modulo 16,
``int4`` ``7 + 1`` is ``-8``); lowering computes it in ``int8``/``uint8`` and wraps each
result (:mod:`polytile.schedule.passes.int4`); a store changes only its own nibble.

Promotion (binary arithmetic and comparison operands), numpy-like with *weak* Python
scalars, as in TVM and numpy 2 (NEP 50):

* two expressions of the same dtype keep it;
* ``bool`` promotes to the other operand's dtype; ``+``, ``-``, ``*``, ``//`` on two bools
  give ``int32`` (as Python's ``True + True == 2``; use ``|``/``&`` for logic);
* int with float gives the float; two floats give the wider one, and ``float16`` with
  ``bfloat16`` gives ``float32`` (neither holds the other, as in torch);
* two signed (or two unsigned) ints give the wider one; signed with unsigned gives a signed
  int wide enough for both (``int8 + uint8 -> int16``; ``uint64`` with a signed int raises);
* a Python ``int`` adopts the other operand's dtype (an int operand for an int, the float
  dtype for a float); a Python ``float`` adopts a float operand's dtype and makes an int
  operand ``float32`` (TVM's rule).

``/`` is true division: both operands are first promoted, and integer operands are refused
(use ``//`` for floor division or ``te.truncdiv`` for C division).

Numerics -- the rule every schedule, target and pass keeps (no schedule changes a result
beyond the float reassociation that a reduction's split, reorder or rfactor implies):

* **Integers wrap** in the declared dtype (two's complement modulo ``2**bits``), at every
  operation; constants fold at their operands' dtype the same way (:func:`wrap`: int8
  ``127 + 1`` is ``-128``, uint8 ``0 - 1`` is ``255``, uint64 ``(2**64-1) + 1`` is ``0``),
  never as Python big ints. Integer reductions accumulate in their own dtype and wrap,
  which equals numpy's ``np.add.reduce(x, dtype=...)`` in any order.
* **Literals** take their dtype: a float is rounded to it, and beyond its range is
  ``inf`` (``te.const(65535, "float16")``, as ``np.float16(65535)``); an integer outside its
  dtype is refused with ``OverflowError`` (as numpy 2's ``np.int8(300)``), while
  ``astype`` of a constant wraps like numpy's ``astype`` (``te.const(300).astype("int8")``
  is ``44``). Converting a NaN, infinite or out-of-range float to an integer gives an
  unspecified value (as in C and numpy) and is never folded.
* **Accumulation**: a reduction whose combiner does arithmetic (``te.sum``, a product, a
  ``te.comm_reducer``) over ``float16`` or ``bfloat16`` accumulates in ``float32``
  (:func:`accumulation_dtype`): the initial value and every reduced value are converted
  to ``float32``, combined there, and the result is rounded to the declared dtype once,
  after the last update -- whatever the schedule, as numpy's contiguous ``sum`` and torch
  do. The reduced values themselves are computed as written (``A[k] * B[k]`` in float16
  is rounded before it is accumulated). ``te.max``/``te.min`` and other combiners that only
  select an operand are exact and keep the declared dtype. An empty reduce range yields
  the initial value (the identity: 0 for sum, ``-inf``/the smallest integer for max).
* **NaN in max/min**: ``te.max``/``te.min`` (elementwise and as reductions) propagate a NaN
  in either operand, as numpy's ``maximum``/``minimum`` (``a >= b or isnan(a) ? a : b``),
  on every target and vector width; integer max/min are plain. Other float arithmetic is
  IEEE-754 without fast-math (see :mod:`polytile.te.expr`).
"""

from __future__ import annotations

import functools

import re

import numpy as np

from polytile.errors import DefinitionTypeError

_BITS = {
    "bool": 1, "int4": 4, "uint4": 4, "int8": 8, "int16": 16, "int32": 32, "int64": 64,
    "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64,
    "float16": 16, "float32": 32, "float64": 64, "bfloat16": 16,
}

ALL_DTYPES = tuple(_BITS)

#: TVM's dtype names that numpy reads differently (``np.dtype("float")`` is float64)
ALIASES = {"float": "float32", "int": "int32", "uint": "uint32", "double": "float64"}


def canonical(dtype) -> str:
    """Return the canonical dtype string for ``dtype`` (a string or numpy dtype).

    Raises
    ------
    TypeError
        If ``dtype`` names no dtype polytile supports.
    """
    if isinstance(dtype, str) and dtype in _BITS:
        return dtype
    if isinstance(dtype, str) and dtype in ALIASES:
        return ALIASES[dtype]
    if isinstance(dtype, str):
        m = _VECTOR.match(dtype)
        if m and m.group(2) == "1" and (m.group(1) in _BITS or m.group(1) in ALIASES):
            return ALIASES.get(m.group(1), m.group(1))
        _refuse_known(dtype)
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in _BITS:
        raise DefinitionTypeError(
            f"dtype: unsupported dtype {dtype!r}; expected one of {', '.join(ALL_DTYPES)}"
        )
    return name


_VECTOR = re.compile(r"^([a-z]+[0-9]*)x([0-9]+)$")


def _refuse_known(dtype: str) -> None:
    """Clear refusals for TVM dtypes polytile does not have (see docs/tvm_compatibility.md):

    * vector dtypes (``"float32x4"``, ``"int8x4"``) as the dtype of a scalar (a
      ``te.var``, ``astype`` of a scalar): tensors and constants of vector dtypes are
      views handled by :mod:`polytile.te.vector` before this function is reached;

    ``"float32x1"`` (one lane) is ``float32``, as in TVM.
    """
    m = _VECTOR.match(dtype)
    if m and (m.group(1) in _BITS or m.group(1) in ALIASES) and int(m.group(2)) > 1:
        base, lanes = ALIASES.get(m.group(1), m.group(1)), int(m.group(2))
        raise DefinitionTypeError(
            f"dtype: {dtype!r} is a vector dtype ({lanes} lanes of {base}), which polytile "
            f"takes as the element dtype of a tensor only (te.placeholder((n,), "
            f"dtype={dtype!r}), te.const(v, {dtype!r}), see polytile.te.vector), not of a "
            f"scalar. hint: or give the tensor a trailing axis of {lanes} "
            f"(te.placeholder((n, {lanes}), dtype={base!r})), index it A[i, l] in the "
            f"compute and vectorize that axis")


def bits(dtype: str) -> int:
    """Width of ``dtype`` in bits (1 for ``bool``)."""
    return _BITS[dtype]


def nbytes(dtype: str) -> int:
    """Storage size of one element in bytes (``bool`` is stored as one byte; ``int4`` and
    ``uint4`` count as one, an upper bound: they are packed two per byte)."""
    return max(1, _BITS[dtype] // 8)


def is_float(dtype: str) -> bool:
    """True for ``float16/32/64`` and ``bfloat16``."""
    return dtype.startswith("float") or dtype == "bfloat16"


def is_int(dtype: str) -> bool:
    """True for signed and unsigned integers (not ``bool``)."""
    return dtype.startswith("int") or dtype.startswith("uint")


def is_signed(dtype: str) -> bool:
    return dtype.startswith("int") or is_float(dtype)


def is_unsigned(dtype: str) -> bool:
    return dtype.startswith("uint")


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


def is_int4(dtype: str) -> bool:
    """True for the packed 4-bit integers ``int4`` and ``uint4``."""
    return dtype in ("int4", "uint4")


def to_numpy(dtype: str) -> np.dtype:
    """The numpy dtype used for arrays of ``dtype``: for ``bfloat16``,
    ``ml_dtypes.bfloat16`` when that package is installed, else ``uint16`` (the bits);
    ``uint8`` (packed bytes, see :func:`pack_int4`) for ``int4``/``uint4``."""
    if is_int4(dtype):
        return np.dtype(np.uint8)
    if dtype == "bfloat16":
        ml = ml_dtypes()
        return np.dtype(ml.bfloat16) if ml is not None else np.dtype(np.uint16)
    return np.dtype(dtype)


def ml_dtypes():
    """The ``ml_dtypes`` module when it is installed (the optional ``bf16`` extra), else
    None."""
    try:
        import ml_dtypes as ml
    except ImportError:
        return None
    return ml


def is_bfloat16_array_dtype(dtype) -> bool:
    """Whether arrays of ``dtype`` (a numpy dtype or a dtype name) can hold ``bfloat16``
    values: ``uint16`` (bit patterns) or ``ml_dtypes.bfloat16``."""
    name = dtype if isinstance(dtype, str) else getattr(np.dtype(dtype), "name", "")
    return name in ("uint16", "bfloat16")


def bfloat16_bits(x) -> np.ndarray:
    """The ``bfloat16`` bit patterns (``uint16``) nearest to ``x`` (any float array or
    number): ``x`` is first rounded to ``float32``, then to bfloat16 to nearest even, as
    ``ml_dtypes`` and torch do; values beyond bfloat16's range become ``inf``, NaN stays a
    (quiet) NaN with its sign.

    Examples: ``bfloat16_bits(1.0) == 0x3F80``, ``bfloat16_bits(1 + 2**-8) == 0x3F80`` (a
    tie, to even), ``bfloat16_bits(3.4e38) == 0x7F80`` (inf).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.array(x, dtype=np.float32)
    shape = f.shape
    u = f.reshape(-1).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16).reshape(shape)


def bfloat16_to_float32(bits) -> np.ndarray:
    """The ``float32`` values of ``bfloat16`` bit patterns (``uint16``; exact)."""
    b = np.array(bits, dtype=np.uint16)
    return (b.reshape(-1).astype(np.uint32) << 16).view(np.float32).reshape(b.shape)


def as_bfloat16_bits(a: np.ndarray) -> np.ndarray:
    """A ``uint16`` view of a bfloat16 array (``uint16`` or ``ml_dtypes.bfloat16``)."""
    return a if a.dtype == np.uint16 else a.view(np.uint16)


def bfloat16_array(x) -> np.ndarray:
    """A host array of ``bfloat16`` holding the values of ``x`` (any array-like of numbers)
    rounded as :func:`bfloat16_bits` does: an ``ml_dtypes.bfloat16`` array when
    ``ml_dtypes`` is installed, else the ``uint16`` bit patterns. Built functions accept
    either for a ``bfloat16`` parameter.

    Examples: ``bfloat16_values(bfloat16_array([0.1, 3.0]))`` is
    ``[0.10009766, 3.0]`` (float32).
    """
    bits = bfloat16_bits(x)
    ml = ml_dtypes()
    return bits.view(ml.bfloat16) if ml is not None else bits


def bfloat16_values(a) -> np.ndarray:
    """The ``float32`` values (exact) of a host ``bfloat16`` array: ``uint16`` bit patterns
    or ``ml_dtypes.bfloat16``.

    Raises
    ------
    TypeError
        For an array of any other dtype.
    """
    a = np.asarray(a)
    if not is_bfloat16_array_dtype(a.dtype):
        raise TypeError(f"bfloat16_values: an array of dtype {a.dtype} holds no bfloat16 "
                        "values; expected uint16 bit patterns or ml_dtypes.bfloat16")
    return bfloat16_to_float32(as_bfloat16_bits(a))


def promote(a: str, b: str) -> str:
    """Result dtype of a binary arithmetic operation on two expressions (see module doc).

    Raises
    ------
    TypeError
        For ``uint64`` combined with a signed integer (no integer type holds both).
    """
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    if is_float(a) or is_float(b):
        if {a, b} == {"float16", "bfloat16"}:
            return "float32"
        if is_float(a) and is_float(b):
            return a if bits(a) >= bits(b) else b
        return a if is_float(a) else b
    if is_unsigned(a) == is_unsigned(b):
        return a if bits(a) >= bits(b) else b
    signed, unsigned = (a, b) if is_signed(a) else (b, a)
    if bits(signed) > bits(unsigned):
        return signed
    if bits(unsigned) >= 64:
        raise DefinitionTypeError(
            f"dtype: no integer type holds both {a} and {b}; cast one explicitly")
    return f"int{bits(unsigned) * 2}"


def scalar_dtype(value, other: str | None) -> str:
    """Dtype a Python scalar takes when combined with an expression of dtype ``other``."""
    if isinstance(value, (bool, np.bool_)):
        return other if other is not None else "bool"
    if isinstance(value, (int, np.integer)):
        if other is None or other == "bool":
            return "int32" if -(2**31) <= int(value) < 2**31 else "int64"
        return other
    if isinstance(value, (float, np.floating)):
        if other is not None and is_float(other):
            return other
        return "float32"
    raise DefinitionTypeError(
        f"dtype: cannot use {type(value).__name__} {value!r} in an expression")


#: Reductions of these dtypes accumulate in the wider one (see the module docstring).
_ACCUMULATE = {"float16": "float32", "bfloat16": "float32"}


def accumulation_dtype(dtype: str) -> str:
    """The dtype an arithmetic reduction of ``dtype`` accumulates in: ``float32`` for
    ``float16`` (and ``bfloat16``), else ``dtype`` itself (see the module docstring)."""
    return _ACCUMULATE.get(dtype, dtype)


def wrap(value: int, dtype: str) -> int:
    """``value`` wrapped into the range of integer ``dtype`` (two's complement modulo
    ``2**bits``, as the machine and numpy's ``astype`` do): ``wrap(128, "int8") == -128``,
    ``wrap(-1, "uint8") == 255``, ``wrap(2**64, "uint64") == 0``. Pure Python: no
    intermediate numpy integer can overflow."""
    n = _BITS[dtype]
    v = int(value) & ((1 << n) - 1)
    if not dtype.startswith("uint") and v >> (n - 1):
        v -= 1 << n
    return v


def round_float(value, dtype: str) -> float:
    """``value`` rounded to float ``dtype`` (to nearest even), as a Python float; values
    beyond the dtype's range become ``inf`` with their sign, as ``np.float16(65535)`` does
    (``bfloat16``: see :func:`bfloat16_bits`)."""
    try:
        x = float(value)
    except OverflowError:  # a Python int beyond float64
        x = float("inf") if value > 0 else float("-inf")
    if dtype == "bfloat16":
        return float(bfloat16_to_float32(bfloat16_bits(x))[()])
    with np.errstate(over="ignore"):
        return float(np.array(x, dtype=dtype)[()])


#: largest finite value of each float dtype
_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
              "float32": float(np.finfo(np.float32).max),
              "float64": float(np.finfo(np.float64).max)}


def largest_finite(dtype: str):
    """Largest finite value of ``dtype`` (TVM's ``max_value``): ``65504.0`` for float16,
    ``3.3895e38`` for bfloat16, the integer maximum for ints, ``True`` for bool."""
    if is_float(dtype):
        return _FLOAT_MAX[dtype]
    return max_value(dtype)


def smallest_finite(dtype: str):
    """Smallest finite value of ``dtype`` (TVM's ``min_value``): ``-largest_finite`` for
    floats, the integer minimum for ints, ``False`` for bool."""
    if is_float(dtype):
        return -_FLOAT_MAX[dtype]
    return min_value(dtype)


@functools.cache
def min_value(dtype: str):
    """Smallest finite value of ``dtype`` (``-inf`` for floats), as a Python number."""
    if is_float(dtype):
        return float("-inf")
    if dtype == "bool":
        return False
    if is_int4(dtype):
        return -8 if dtype == "int4" else 0
    return int(np.iinfo(dtype).min)


@functools.cache
def max_value(dtype: str):
    """Largest finite value of ``dtype`` (``inf`` for floats), as a Python number."""
    if is_float(dtype):
        return float("inf")
    if dtype == "bool":
        return True
    if is_int4(dtype):
        return 7 if dtype == "int4" else 15
    return int(np.iinfo(dtype).max)


def packed_shape(shape: tuple) -> tuple:
    """The shape of the ``uint8`` array holding an ``int4``/``uint4`` tensor of ``shape``:
    the last axis ``n`` becomes ``ceil(n / 2)`` bytes (a 0-d tensor takes one byte,
    shape ``()``). Ints only."""
    shape = tuple(int(d) for d in shape)
    return shape[:-1] + ((shape[-1] + 1) // 2,) if shape else ()


def pack_int4(values, dtype: str = "int4") -> np.ndarray:
    """Pack integers into the host form of an ``int4``/``uint4`` tensor (see the module
    docstring): a C-contiguous ``uint8`` array of shape :func:`packed_shape` ``(values.shape)``,
    element ``[..., 2m]`` in the low nibble of byte ``[..., m]``, ``[..., 2m + 1]`` in the
    high one; the unused high nibble of an odd row is 0.

    Parameters
    ----------
    values : array-like of integers
        In [-8, 7] for ``int4``, [0, 15] for ``uint4``.
    dtype : str
        ``"int4"`` or ``"uint4"``.

    Raises
    ------
    ValueError
        For a value outside the range of ``dtype`` or a dtype other than these two.
    TypeError
        For non-integer values.

    Examples: ``pack_int4([1, -2, 3])`` is ``uint8 [0xE1, 0x03]``.
    """
    if dtype not in ("int4", "uint4"):
        raise ValueError(f"pack_int4: dtype {dtype!r}; expected 'int4' or 'uint4'")
    v = np.asarray(values)
    if v.dtype.kind not in "iub":
        raise TypeError(f"pack_int4: values of dtype {v.dtype}; expected integers")
    lo, hi = min_value(dtype), max_value(dtype)
    if v.size and (int(v.min()) < lo or int(v.max()) > hi):
        raise ValueError(f"pack_int4: values in [{int(v.min())}, {int(v.max())}] do not fit "
                         f"in {dtype} [{lo}, {hi}]")
    if v.ndim == 0:
        return np.array(int(v) & 15, dtype=np.uint8)
    n = v.shape[-1]
    nib = (v.astype(np.int16) & 15).astype(np.uint8)
    if n % 2:
        nib = np.concatenate([nib, np.zeros(v.shape[:-1] + (1,), np.uint8)], axis=-1)
    return np.ascontiguousarray(nib[..., 0::2] | (nib[..., 1::2] << 4))


def unpack_int4(packed, n: int | None = None, dtype: str = "int4") -> np.ndarray:
    """The values of a packed ``int4``/``uint4`` array (the inverse of :func:`pack_int4`):
    an ``int8`` (``int4``, sign-extended) or ``uint8`` (``uint4``) array whose last axis has
    ``n`` elements (default: twice the packed one; give ``n`` for an odd last axis).

    Raises
    ------
    TypeError
        For an array that is not ``uint8``.
    ValueError
        For ``n`` that does not match the packed last axis.
    """
    if dtype not in ("int4", "uint4"):
        raise ValueError(f"unpack_int4: dtype {dtype!r}; expected 'int4' or 'uint4'")
    p = np.asarray(packed)
    if p.dtype != np.uint8:
        raise TypeError(f"unpack_int4: an array of dtype {p.dtype}; expected the uint8 bytes "
                        "of pack_int4")
    if p.ndim == 0:
        out = p & 15
    else:
        m = p.shape[-1]
        n = 2 * m if n is None else int(n)
        if (n + 1) // 2 != m:
            raise ValueError(f"unpack_int4: {n} elements take {(n + 1) // 2} bytes, the "
                             f"array's last axis has {m}")
        out = np.stack([p & 15, p >> 4], axis=-1).reshape(p.shape[:-1] + (2 * m,))[..., :n]
    if dtype == "int4":
        return ((out.astype(np.int8) ^ 8) - 8).astype(np.int8)
    return out.astype(np.uint8)
