"""Matrix products of the decoding kernel: the kernel's packed product against the BLAS library's.

    python benchmarks/product_speed.py                 # 1 and 2 threads, the default shapes
    python benchmarks/product_speed.py --rounds 9 --threads 2

The kernel backend (``flexatt.decoding.kernel``, ``csrc/kernel.cpp``) computes every product of
its recurrence, its encoder and its readout with its own routine (``linear``: the weights packed
in panels of columns, blocks of rows accumulated in registers, one chain of fused multiply-adds
per output) instead of ``torch.mm`` (Intel MKL in the CPU wheel of PyTorch). This script times
both on the shapes of the default model (``params.yaml``: H = E = A = R = 128, a bidirectional
encoder, so c_t has 256 floats) at the batch sizes of ``decode_speed``:

* the LSTM's gates [c_t; h_{t-1}] [W_ic W_hh]ᵀ: rows x 384 x 512
* the attention's queries and g_t, h_{t-1} [W_q; W_gh]ᵀ: rows x 128 x 256
* the encoder's recurrence, h W_hhᵀ: rows x 128 x 512
* the readout's output layer, o W_sᵀ over every step of 50 sentences: 1850 x 128 x 4000

Side by side: each round times both routines on every shape, in alternating order; the figures
are the median over ``--rounds`` rounds (each the mean of enough calls to take about 50 ms) and
the ratio is the median of the per-round ratios. The two results are compared too (the largest
absolute difference; they differ only in rounding, the order of the sums). Results go to
``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as B  # noqa: E402

from flexatt.decoding import kernel  # noqa: E402

SHAPES = [("LSTM gates", 50, 384, 512), ("LSTM gates", 200, 384, 512), ("LSTM gates", 1, 384, 512),
          ("queries + g_t", 50, 128, 256), ("encoder W_hh", 50, 128, 512),
          ("output layer", 1850, 128, 4000)]


def per_call(fn, budget: float = 0.05) -> float:
    """Seconds per call of ``fn``, over as many calls as take about ``budget`` seconds."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    calls = max(3, int(budget / once))
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def run(threads: int, rounds: int) -> list[dict]:
    torch.set_num_threads(threads)
    ext = kernel.extension(required=True)
    g = torch.Generator().manual_seed(0)
    cases = []
    for name, m, k, n in SHAPES:
        x, w = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g) / k ** 0.5
        out, packed, none = torch.empty(m, n), ext.pack(w), torch.empty(0)
        calls = {"torch.mm": lambda x=x, w=w, out=out: torch.mm(x, w, out=out),
                 "packed": lambda x=x, p=packed, n=n: ext.linear(x, p, n, none)}
        diff = float((torch.mm(x, w) - ext.linear(x, packed, n, none)).abs().max())
        cases.append({"name": name, "shape": [m, k, n], "calls": calls, "max_abs_diff": diff,
                      "us": {key: [] for key in calls}})
    for r in range(rounds):
        for case in cases:
            for key in B.rotated(list(case["calls"]), r):
                case["us"][key].append(1e6 * per_call(case["calls"][key]))
    results = []
    for case in cases:
        m, k, n = case["shape"]
        us = {key: B.med(v) for key, v in case["us"].items()}
        ratios = [a / b for a, b in zip(case["us"]["torch.mm"], case["us"]["packed"])]
        results.append({"name": case["name"], "shape": case["shape"], "threads": threads, "us": us,
                        "gflops": {key: 2 * m * k * n / (1e3 * v) for key, v in us.items()},
                        "speedup": B.med(ratios), "speedup_rounds": B.spread(ratios),
                        "max_abs_diff": case["max_abs_diff"]})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/product_speed.json")
    args = parser.parse_args()
    B.warn_if_busy(max(args.threads))
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {args.rounds} rounds, side by side")
    print(f"  {'product':15s} {'rows x k x n':>18s} {'thr':>3s} {'torch.mm us':>11s} {'GFLOP/s':>8s} "
          f"{'packed us':>9s} {'GFLOP/s':>8s} {'speed-up':>8s} {'rounds':>11s} {'max |diff|':>10s}")
    results = []
    for threads in args.threads:
        for res in run(threads, args.rounds):
            results.append(res)
            m, k, n = res["shape"]
            print(f"  {res['name']:15s} {f'{m} x {k} x {n}':>18s} {threads:3d} {res['us']['torch.mm']:11.1f} "
                  f"{res['gflops']['torch.mm']:8.0f} {res['us']['packed']:9.1f} {res['gflops']['packed']:8.0f} "
                  f"{res['speedup']:7.2f}x {res['speedup_rounds']:>11s} {res['max_abs_diff']:10.1e}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rounds": args.rounds, "results": results}, indent=2) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
