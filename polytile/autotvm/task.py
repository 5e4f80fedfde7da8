"""AutoTVM's ``autotvm.template`` and ``autotvm.task.create``: a task is a workload of a
template registered with :func:`polytile.autotune.template`."""

from __future__ import annotations

from collections.abc import Callable

from polytile.autotune import ConfigEntity, ConfigSpace, get_config
# TVM's ``autotvm.task.space`` (SplitEntity, ReorderEntity, ... for ``cfg[name] = ...``)
from polytile.autotune import space
from polytile.autotune.template import Template, Workload, get_template, template as _template
from polytile.errors import TuneError, format_error
from polytile.te.expr import (And, Binary, Call, Cmp, Const, Expr, Not, Or, Reduce, Select,
                              TensorRead)
from polytile.te.tensor import ComputeOp
from polytile.te.visitor import _children

# the operations TVM's flop counter counts, one each (index arithmetic inside a tensor
# read is no operation of the computation)
_OPS = (Binary, Cmp, And, Or, Not, Call)


def _count(e: Expr) -> int:
    if isinstance(e, TensorRead):
        return 0
    if isinstance(e, Reduce):
        n = 1
        for iv in e.axis:
            n *= iv.dom.extent
        # one combine per iteration (a sum's add), plus the source's operations
        return n * (1 + _count(e.source))
    if isinstance(e, Select):      # one branch runs (TVM counts the larger)
        return _count(e.cond) + max(_count(e.true_value), _count(e.false_value))
    return int(isinstance(e, _OPS)) + sum(_count(c) for c in _children(e))


def compute_flop(tensors) -> int:
    """Operations of one run of the computes that produce ``tensors`` (TVM's
    ``autotvm.task.task.compute_flop``): per compute, its number of elements times the
    arithmetic, comparison, logical and math operations of its body (a reduction counts
    its source's operations and one combine per reduction iteration). Index arithmetic
    and casts do not count. 0 where an extent is symbolic.
    """
    seen: set = set()
    total = 0
    todo = [t.op for t in tensors]
    while todo:
        op = todo.pop()
        if id(op) in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(id(op))
        size = 1
        for iv in op.axis:
            size *= iv.dom.extent
        ext = [iv.dom.extent for iv in op.axis] + [
            a.dom.extent for b in op.body if isinstance(b, Reduce) for a in b.axis]
        if not all(isinstance(x, int) or isinstance(x, Const) for x in ext):
            return 0
        # a tuple reduction's outputs share one combine: count the first body only
        bodies = op.body[:1] if isinstance(op.body[0], Reduce) else op.body
        total += size * sum(_count(b) for b in bodies)
        todo.extend(t.op for t in op.input_tensors)
    return int(total)


def template(task_name: str, func: Callable | None = None):
    """Register ``func`` as the tunable template ``task_name`` (TVM's
    ``@autotvm.template("tutorial/matmul")``): :func:`polytile.autotune.template` under
    that name. The function declares its knobs on :func:`get_config` and returns
    ``(schedule, tensors)``; a ``dtype`` argument may come positionally (``matmul(N, L,
    M, "float32")``), as in TVM. Used as ``template(name)`` (a decorator) or
    ``template(name, func)``; returns the :class:`~polytile.autotune.Template`.

    Raises
    ------
    TuneError
        For a name that is not a non-empty string.
    """
    if not isinstance(task_name, str) or not task_name:
        raise TuneError(format_error("autotvm.template", f"task name {task_name!r}",
                                     "expected a non-empty string such as 'tutorial/matmul'"))
    deco = _template(task_name)
    return deco if func is None else deco(func)


class Task:
    """A tuning task (TVM's ``autotvm.task.Task``): template ``name`` at ``args`` for
    ``target``.

    Attributes
    ----------
    name : str
    args : tuple
        The workload arguments without the dtype.
    dtype : str
    target : str
    workload : polytile.autotune.Workload
    config_space : polytile.autotune.ConfigSpace
        Collected when the task is created (``print(task.config_space)``).
    flop : float
        Operations of one run: the template's ``flops=``, else the sum of its
        ``cfg.add_flop`` calls, else :func:`compute_flop` of its tensors (as TVM); 0 when
        none is known (symbolic sizes; the tuners report 1/seconds then).
    """

    def __init__(self, tmpl: Template, args: tuple, dtype: str, target: str):
        self.template = tmpl
        self.name = tmpl.name
        self.args = tuple(args)
        self.dtype = dtype
        self.target = target
        self.workload: Workload = tmpl.workload(self.args, dtype)
        self.config_space: ConfigSpace = tmpl.space(self.args, dtype, target)
        self.flop = float(tmpl.flops(self.args) or self.config_space.flop or 0.0)
        if not self.flop:   # TVM counts the operations of the computes then
            _, tensors = self.instantiate(self.config_space.default())
            self.flop = float(compute_flop(tensors))

    def instantiate(self, config: ConfigEntity):
        """``(schedule, tensors)`` of ``config`` (TVM's ``task.instantiate``)."""
        return self.template.instantiate(config, self.args, self.dtype, self.target)

    def __repr__(self) -> str:
        return (f"Task(func_name={self.name}, args={self.args}, dtype={self.dtype}, "
                f"target={self.target!r})")


def create(task_name: str, args=(), target="llvm", target_host=None) -> Task:
    """A tuning task of the registered template ``task_name`` (TVM's
    ``autotvm.task.create(task_name, args, target, target_host)``).

    Parameters
    ----------
    task_name : str
        The name given to :func:`template` (or a built-in template such as ``"matmul"``,
        or ``"path/to/file.py:function"``).
    args : tuple
        The template's arguments; a string in the place of its ``dtype`` parameter is the
        dtype (AutoTVM's ``args=(N, L, M, "float32")``).
    target : str or polytile.target.Target
        ``"llvm"`` or ``"cuda"`` (with options).
    target_host : ignored
        polytile's CUDA modules have no separate host code to target.

    Raises
    ------
    TuneError
        For an unknown template, or arguments the template does not take.
    """
    tmpl = get_template(task_name)
    rest, dtype = tmpl._dtype_apart(tuple(args), "float32")
    return Task(tmpl, rest, dtype, str(target))


__all__ = ["ConfigEntity", "ConfigSpace", "Task", "compute_flop", "create", "get_config",
           "space", "template"]
