"""Benchmark: conv2d on the GPU, polytile vs cuDNN (torch), ResNet-50 layer shapes.

For each layer (``--layers``, default the 3x3 convolutions of the four ResNet-50 stages
and a 1x1), each ``--batch`` (default 1 and 32) and each ``--dtype`` (default float16 and
float32), in one run:

* ``float16``: polytile's implicit GEMM on tensor cores, NHWC
  (:func:`polytile.targets.cuda.conv2d.conv2d_nhwc_tensorcore`: ldmatrix + mma.sync,
  zero-filled cp.async pipeline), the best of a few hand-picked tiles (``CONFIGS``), vs
  ``torch.nn.functional.conv2d`` on channels-last float16 tensors (cuDNN, float32
  accumulation).
* ``float32``: polytile's implicit GEMM on CUDA cores, NHWC (the ``conv2d_nhwc`` tuner
  template's default config: shared + register tiling), and the direct NCHW convolution
  (the ``conv2d_nchw`` GPU template's default config), vs cuDNN float32 with TF32 off.

Each polytile kernel's output is checked once against torch's float64 convolution
(relative Frobenius error) before it is timed; times are CUDA events around ``--reps``
calls after warm-up; TFLOP/s count ``2 * N * OH * OW * CO * CI * KH * KW``. One line per
figure: TFLOP/s, the ratio to cuDNN, the config. Without a GPU the kernels are only built
(``--no-run`` does that anywhere). Run: ``python benchmarks/gpu_conv2d.py``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

#: name -> (H = W, CI, CO, K, stride, pad)
LAYERS = {"56x56x64-3x3": (56, 64, 64, 3, 1, 1), "28x28x128-3x3": (28, 128, 128, 3, 1, 1),
          "14x14x256-3x3": (14, 256, 256, 3, 1, 1), "7x7x512-3x3": (7, 512, 512, 3, 1, 1),
          "56x56x64-1x1x256": (56, 64, 256, 1, 1, 0)}

#: tensor-core tiles tried per layer: (block, warp, stages)
CONFIGS = (((128, 64, 32), (64, 32), 3), ((64, 64, 32), (32, 32), 3))


def _time(fn, reps: int) -> float:
    """Seconds per call of ``fn`` (CUDA events, after warm-up)."""
    from wgmma_gemm import _time_cuda

    return _time_cuda(fn, reps)


def _flops(n, h, ci, co, k, stride, pad) -> float:
    o = (h + 2 * pad - k) // stride + 1
    return 2.0 * n * o * o * co * ci * k * k


def run_layer(name: str, n: int, dtype: str, reps: int, run: bool) -> None:
    import polytile
    from polytile.autotune.template import get_template
    from polytile.targets.cuda.conv2d import conv2d_nhwc_tensorcore, out_size

    h, ci, co, k, stride, pad = LAYERS[name]
    o = out_size(h, k, stride, pad)
    m = n * o * o
    flops = _flops(n, h, ci, co, k, stride, pad)
    tag = f"{name:18s} N={n:<3d} {dtype:8s}"
    kernels = []   # (label, built module, layout)
    if dtype == "float16":
        for block, warp, stages in CONFIGS:
            if co % block[1]:
                continue
            t0 = time.perf_counter()
            s, args = conv2d_nhwc_tensorcore(n, h, h, ci, co, k, k, stride, pad,
                                             block=block, warp=warp, stages=stages)
            f = polytile.build(s, args, target="cuda")
            kernels.append((f"mma.sync {list(block)}/{list(warp)} x{stages}", f, "nhwc",
                            time.perf_counter() - t0))
    else:
        wl = (n, ci, h, h, co, k, k, stride, pad)
        for tname, layout in (("conv2d_nhwc", "nhwc"), ("conv2d_nchw", "nchw")):
            t = get_template(tname)
            t0 = time.perf_counter()
            sp = t.space(wl, "float32", "cuda")
            s, args = t.instantiate(sp.get(sp.default_index()), wl, "float32", "cuda")
            f = polytile.build(s, args, target="cuda")
            kernels.append((f"{tname} default {sp.get(sp.default_index()).knob_values()}",
                            f, layout, time.perf_counter() - t0))
    if not run:
        for label, _, _, tb in kernels:
            print(f"{tag} built {label} in {tb:.1f} s")
        return
    import torch
    import torch.nn.functional as F

    tdt = {"float16": torch.float16, "float32": torch.float32}[dtype]
    g = torch.Generator().manual_seed(0)
    a = (torch.rand(n, ci, h, h, generator=g) * 2 - 1).to(tdt).cuda()
    w = (torch.rand(co, ci, k, k, generator=g) * 2 - 1).to(tdt).cuda()
    ref = F.conv2d(a.double(), w.double(), stride=stride, padding=pad)   # N, CO, OH, OW
    a_cl = a.to(memory_format=torch.channels_last)
    w_cl = w.to(memory_format=torch.channels_last)
    cudnn = flops / _time(lambda: F.conv2d(a_cl, w_cl, stride=stride, padding=pad),
                          reps) / 1e12
    print(f"{tag} {'cuDNN (torch, channels_last)':44s} {cudnn:7.1f} TFLOP/s")
    a_nhwc = a.permute(0, 2, 3, 1).contiguous()          # N, H, W, CI
    w_hwio = w.permute(2, 3, 1, 0).contiguous()          # KH, KW, CI, CO
    best = None
    for label, f, layout, tb in kernels:
        if layout == "nhwc":
            rows = -(-m // 128) * 128
            out = torch.full((rows, co), float("nan"), dtype=torch.float32, device="cuda")
            ins = (a_nhwc, w_hwio, out)
            got = lambda: out[:m].reshape(n, o, o, co).permute(0, 3, 1, 2)  # noqa: E731
        else:
            out = torch.full((n, co, o, o), float("nan"), dtype=tdt, device="cuda")
            ins = (a.contiguous(), w.contiguous(), out)
            got = lambda: out  # noqa: E731
        f(*ins)
        torch.cuda.synchronize()
        err = (torch.linalg.norm(got().double() - ref) / torch.linalg.norm(ref)).item()
        if not err < 1e-3:
            print(f"{tag} {label}: WRONG RESULT (relative error {err:.2e})")
            continue
        tf = flops / _time(lambda: f(*ins), reps) / 1e12
        print(f"{tag} polytile {label:35s} {tf:7.1f} TFLOP/s  {tf / cudnn:6.3f} x cuDNN  "
              f"(err {err:.1e}, build {tb:.1f} s)")
        best = max(best or 0.0, tf)
    if best is not None:
        print(f"{tag} BEST polytile {best:7.1f} TFLOP/s = {best / cudnn:.3f} x cuDNN")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=list(LAYERS), choices=list(LAYERS))
    ap.add_argument("--batch", nargs="+", type=int, default=[1, 32])
    ap.add_argument("--dtype", nargs="+", default=["float16", "float32"],
                    choices=["float16", "float32"])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-run", action="store_true", help="build only (no GPU needed)")
    args = ap.parse_args(argv)
    run = not args.no_run
    if run:
        try:
            import torch

            run = torch.cuda.is_available()
        except ImportError:
            run = False
        if not run:
            print("no CUDA device (or no torch): building only")
        else:
            torch.backends.cudnn.benchmark = True
            torch.backends.cudnn.allow_tf32 = False    # float32 means float32
            torch.backends.cuda.matmul.allow_tf32 = False
            print(f"device: {torch.cuda.get_device_name()}")
    for dtype in args.dtype:
        for n in args.batch:
            for name in args.layers:
                run_layer(name, n, dtype, args.reps, run)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
