"""Does a larger batch reach the same dev BLEU sooner? Epochs to a dev BLEU per batch size and lr,
and what that makes of the CPU's wall-clock.

    # train each config with the train stage, side by side, for a fixed time (here on a GPU)
    python benchmarks/batch_convergence.py --run runs/ --accelerator gpu --max-time 00:00:05:30 \\
        --configs global:64:0.002 global:256:0.004 global:256:0.002 flexible:64:0.002 flexible:256:0.004
    # read their learning curves; with the CPU's tokens/s per batch size (train_throughput.py
    # --batch-sizes 64 256), project the CPU's wall-clock to each dev BLEU
    python benchmarks/batch_convergence.py --curves runs/ --cpu global:64=4180 global:256=4700 ...

``--run`` starts ``python -m flexatt.stages.train`` once per ``VARIANT:BATCH:LR`` (float32
``32-true``, W&B off, ``trainer.max_time``, the default profile's data and sizes), all at once,
each writing its learning curve to ``DIR/<variant>_b<batch>_lr<lr>/<variant>.csv``. A GPU runs
them side by side; on a 2-core CPU give ``--one-at-a-time``.

The report: for each variant, the dev BLEU levels every run of it reached (every 2 BLEU), and the
epochs and training seconds (on the device the runs used; validation not counted) each config
needed to first reach each level (linear between epoch ends). The first
config of a variant is the reference. Epochs to a dev BLEU are a property of the optimisation,
not of the device (the same float32 arithmetic up to rounding), so with ``--cpu`` (target
tokens/s at each batch size, measured side by side on the CPU) the CPU's wall-clock to that dev
BLEU, relative to the reference, is (epochs / reference epochs) × (reference tokens/s /
tokens/s). Below 1: the larger batch trains faster on that CPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def config_name(variant: str, batch: int, lr: float) -> str:
    return f"{variant}_b{batch}_lr{lr:g}"


def parse_config(text: str) -> tuple[str, int, float]:
    try:
        variant, batch, lr = text.split(":")
        return variant, int(batch), float(lr)
    except ValueError:
        raise SystemExit(f"error: --configs {text!r}: expected VARIANT:BATCH:LR, e.g. global:256:0.004")


def train_command(variant: str, batch: int, lr: float, out: Path, accelerator: str, max_time: str) -> list[str]:
    name = config_name(variant, batch, lr)
    return [sys.executable, "-m", "flexatt.stages.train", f"train.variant={variant}", f"train.batch_size={batch}",
            f"train.lr={lr}", "train.epochs=100", f"train.out_dir={out / name / 'ckpt'}",
            f"train.metrics_dir={out / name}", "logger.enabled=false", f"trainer.accelerator={accelerator}",
            "trainer.devices=1", "trainer.precision=32-true", "trainer.enable_progress_bar=false",
            f"+trainer.max_time={max_time}"]


def run(configs: list[tuple[str, int, float]], out: Path, accelerator: str, max_time: str, parallel: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WANDB_MODE": "disabled"}
    procs = []
    for variant, batch, lr in configs:
        name = config_name(variant, batch, lr)
        log = open(out / f"{name}.log", "w", encoding="utf-8")
        proc = subprocess.Popen(train_command(variant, batch, lr, out, accelerator, max_time), cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        procs.append((name, proc, log))
        if not parallel:
            proc.wait()
    for name, proc, log in procs:
        if proc.wait() != 0:
            print(f"warning: {name} exited with status {proc.returncode} (see {out / (name + '.log')})")
        log.close()


def read_curve(path: Path) -> list[tuple[float, float, float]]:
    """``[(epochs done, training seconds so far, dev BLEU)]`` of a learning curve
    (``<variant>.csv`` of the train stage). The last row may be a part epoch (a time limit): its
    fraction is its steps over a full epoch's."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise SystemExit(f"error: {path}: no epochs in the learning curve")
    per_epoch = int(rows[0]["step"])
    points, done, seconds = [], 0.0, 0.0
    for i, row in enumerate(rows):
        steps = int(row["step"]) - (int(rows[i - 1]["step"]) if i else 0)
        done += steps / per_epoch
        seconds += float(row["train_seconds"])
        points.append((done, seconds, float(row["val_bleu"])))
    return points


def epochs_to(curve: list[tuple[float, float, float]], level: float) -> tuple[float, float] | None:
    """``(epochs, training seconds)`` until dev BLEU first reaches ``level`` (linear between
    evaluations), ``None`` if never."""
    prev_e, prev_s, prev_b = 0.0, 0.0, 0.0
    for e, sec, b in curve:
        if b >= level:
            f = (level - prev_b) / (b - prev_b) if b > prev_b else 1.0
            return prev_e + (e - prev_e) * f, prev_s + (sec - prev_s) * f
        prev_e, prev_s, prev_b = e, sec, b
    return None


def report(out: Path, cpu: dict[str, float]) -> dict:
    runs = {}
    for csv_path in sorted(out.glob("*/*.csv")):
        name = csv_path.parent.name
        variant, batch, lr = name.rsplit("_b", 1)[0], *name.rsplit("_b", 1)[1].split("_lr")
        runs[name] = {"variant": variant, "batch": int(batch), "lr": float(lr), "curve": read_curve(csv_path)}
    if not runs:
        raise SystemExit(f"error: {out}: no learning curves (*/<variant>.csv)")
    result = {"runs": runs, "variants": {}}
    for variant in dict.fromkeys(r["variant"] for r in runs.values()):
        names = [n for n, r in runs.items() if r["variant"] == variant]
        names.sort(key=lambda n: (runs[n]["batch"], -runs[n]["lr"]))
        ref = names[0]
        top = min(max(b for *_, b in runs[n]["curve"]) for n in names)
        levels = [float(x) for x in range(4, int(top) + 1, 2)]
        rows = []
        for level in levels:
            row = {"dev_bleu": level}
            for n in names:
                hit, hit_ref = epochs_to(runs[n]["curve"], level), epochs_to(runs[ref]["curve"], level)
                e, e_ref = (hit or (None, None))[0], (hit_ref or (None, None))[0]
                row[n] = {"epochs": e, "epochs_vs_ref": e / e_ref if e and e_ref else None,
                          "seconds": hit[1] if hit else None,
                          "seconds_vs_ref": hit[1] / hit_ref[1] if hit and hit_ref else None}
                key, key_ref = f"{variant}:{runs[n]['batch']}", f"{variant}:{runs[ref]['batch']}"
                if row[n]["epochs_vs_ref"] is not None and key in cpu and key_ref in cpu:
                    row[n]["cpu_time_vs_ref"] = row[n]["epochs_vs_ref"] * cpu[key_ref] / cpu[key]
            rows.append(row)
        result["variants"][variant] = {"reference": ref, "configs": names, "levels": rows}
    return result


def show(result: dict) -> str:
    lines = []
    for variant, v in result["variants"].items():
        names = v["configs"]
        lines.append(f"{variant}: epochs and training seconds to a dev BLEU (epochs ×, seconds × the reference "
                     f"{v['reference']}; projected CPU wall-clock × where --cpu)")
        lines.append(f"{'dev BLEU':>8s} " + " ".join(f"{n:>34s}" for n in names))
        for row in v["levels"]:
            cells = []
            for n in names:
                c = row[n]
                if c["epochs"] is None:
                    cells.append(f"{'not reached':>34s}")
                    continue
                text = f"{c['epochs']:.2f} ep {c['seconds']:.0f} s"
                if n != v["reference"] and c["epochs_vs_ref"] is not None:
                    text += f" ({c['epochs_vs_ref']:.2f}x, {c['seconds_vs_ref']:.2f}x"
                    text += f"; cpu {c['cpu_time_vs_ref']:.2f}x)" if "cpu_time_vs_ref" in c else ")"
                cells.append(f"{text:>34s}")
            lines.append(f"{row['dev_bleu']:8.0f} " + " ".join(cells))
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, metavar="DIR", help="train --configs into DIR, then report")
    parser.add_argument("--curves", type=Path, metavar="DIR", help="report on the runs in DIR")
    parser.add_argument("--configs", nargs="+", default=["global:64:0.002", "global:256:0.004"],
                        help="VARIANT:BATCH:LR")
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--max-time", default="00:01:00:00", help="per run, DD:HH:MM:SS")
    parser.add_argument("--one-at-a-time", action="store_true", help="run the configs one after another")
    parser.add_argument("--cpu", nargs="*", default=[], metavar="VARIANT:BATCH=TOKENS_PER_S",
                        help="the CPU's training tokens/s per batch size (train_throughput.py --batch-sizes)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    if not (args.run or args.curves):
        parser.error("give --run DIR or --curves DIR")
    if args.run:
        run([parse_config(c) for c in args.configs], args.run, args.accelerator, args.max_time,
            parallel=not args.one_at_a_time)
    cpu = {}
    for item in args.cpu:
        key, _, value = item.partition("=")
        try:
            cpu[key] = float(value)
        except ValueError:
            raise SystemExit(f"error: --cpu {item!r}: expected VARIANT:BATCH=TOKENS_PER_S")
    result = report(args.run or args.curves, cpu)
    result["cpu_tokens_per_s"] = cpu
    print(show(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
