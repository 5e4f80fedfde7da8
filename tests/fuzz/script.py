"""Reproducer scripts: a case (and its outcome) as a Python script that builds the same
program and schedule, and, run as ``python <file>`` from the repository root, checks the
built function against the reference."""

from __future__ import annotations

import textwrap

from .spec import args_of, ident, program_code, schedule_code


def first_line(out: dict) -> str:
    """The outcome in one line: class, phase, error and the first line of its message."""
    msg = (out.get("message") or out.get("detail") or "").strip().splitlines()
    text = f"{out['cls']}"
    if out.get("phase"):
        text += f" ({out['phase']})"
    if out.get("error"):
        text += f" {out['error']}"
    if msg:
        text += f": {msg[0][:160]}"
    return text


def reproducer(case: dict, out: dict | None = None) -> str:
    """The Python source reproducing ``case``; ``out`` adds its outcome as comments."""
    prog, target = case["program"], case.get("target", "llvm")
    head = [f"# polytile fuzz case: seed {case.get('seed')}, kind {case.get('kind')}, "
            f"target {target}, data {case.get('data')}"]
    if out is not None:
        head.append(f"# outcome: {first_line(out)}")
        detail = (out.get("detail") or out.get("message") or "").strip()
        for line in detail.splitlines()[:6]:
            head.append(f"#   {line[:200]}")
    lines = head + ["import polytile", "from polytile import te", "",
                    program_code(prog), schedule_code(prog, case["steps"]),
                    f"args = [{', '.join(ident(a) for a in args_of(prog))}]"]
    if target == "cuda":
        lines += ["import sys",
                  "sys.path.insert(0, '.')  # run from the repository root",
                  "from tests.fuzz.runner import Runtime  # the GPU, or its host emulation",
                  "rt = Runtime('cuda')"]
    extra = ""
    if prog.get("symbolic"):  # the reference runs the program with static sizes
        names = ", ".join(f"_static[{ident(a)!r}]" for a in args_of(prog))
        lines += ["_static = {'te': te}",
                  f"exec({program_code(prog, static=True)!r}, _static)",
                  f"static_args = [{names}]"]
        extra = f", static_args, {prog['dims']!r}"
    lines.append(f"f = polytile.build(s, args, target={target!r})")
    lines.append(textwrap.dedent(f"""
        if __name__ == "__main__":  # from the repository root: python <this file>
            import sys
            sys.path.insert(0, ".")
            from tests.fuzz.runner import check_script
            print(check_script(f, args, {"rt" if target == "cuda" else repr(target)}, \
{case.get("data", {})!r}{extra}))""").rstrip())
    return "\n".join(lines) + "\n"
