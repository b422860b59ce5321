"""How many epochs an equal budget needs, read from a long run's recorded learning curves.

    python scripts/budget.py results/bible/train                 # the default corpus
    python scripts/budget.py results/grc/train --epochs 20 30 40     # the Greek corpus
    python scripts/budget.py results/bible/train --out results/bible/budget.json

An equal budget trains every model of a corpus for the same number of epochs. The choice weighs
two things, both readable from the curves a run under a stopping rule left
(``<variant>.csv``: ``epoch``, ``lr``, ``val_bleu``, ``train_seconds``):

* whether the models rank at epoch E as they rank at the end: Spearman's and Kendall's rank
  correlation (scipy) between each model's best dev BLEU up to E and its best over the run;
* how much dev BLEU each model still lacks at E: its best over the run minus its best up to E
  (the median and the largest over the models), and how many had their learning rate halved by
  then (a fixed schedule that halves near the end gains part of that gap back);

beside what E epochs cost: the median training minutes of an epoch times E, per model.
The curves come from a run that stopped models at different epochs, so "the end" is each model's
own end (a model stopped early counts as converged there); the table says how many ended before E.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

#: the columns of a learning curve (``results/<profile>/train/<variant>.csv``) that a budget reads
COLUMNS = ("epoch", "lr", "val_bleu", "train_seconds")


def read_curves(folder: Path) -> dict[str, list[dict[str, float]]]:
    """``{variant: [row per epoch]}`` from every ``<variant>.csv`` of ``folder``."""
    curves: dict[str, list[dict[str, float]]] = {}
    for path in sorted(folder.glob("*.csv")):
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
        missing = set(COLUMNS) - set(reader.fieldnames or ())
        if missing or not rows:
            raise ValueError(f"{path}: not a learning curve "
                             f"({'missing: ' + ', '.join(sorted(missing)) if missing else 'no epochs'})")
        try:
            curves[path.stem] = [{key: float(row[key]) for key in COLUMNS} for row in rows]
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        epochs = [int(row["epoch"]) for row in curves[path.stem]]
        if epochs != list(range(1, len(epochs) + 1)):
            raise ValueError(f"{path}: epochs are not 1, 2, 3, ... (got {epochs[:5]} ...)")
    if len(curves) < 3:
        raise ValueError(f"{folder}: {len(curves)} learning curve(s); a ranking needs at least 3")
    return curves


def at_budget(curves: dict[str, list[dict[str, float]]], epochs: int) -> dict:
    """The figures of a budget of ``epochs`` (see the module doc)."""
    from scipy.stats import kendalltau, spearmanr

    names = sorted(curves)
    final = [max(row["val_bleu"] for row in curves[n]) for n in names]
    reached = [max(row["val_bleu"] for row in curves[n][:epochs]) for n in names]
    gaps = {n: round(f - r, 2) for n, f, r in zip(names, final, reached)}
    halved = [n for n in names if any(row["lr"] < curves[n][0]["lr"] for row in curves[n][:epochs])]
    minutes = {n: round(statistics.median(row["train_seconds"] for row in curves[n]) * epochs / 60, 1)
               for n in names}
    return {"epochs": epochs,
            "spearman": round(float(spearmanr(reached, final).statistic), 3),
            "kendall": round(float(kendalltau(reached, final).statistic), 3),
            "median_gap": round(statistics.median(gaps.values()), 2), "max_gap": max(gaps.values()),
            "worst": max(gaps, key=gaps.get), "gaps": gaps, "halved_by_then": len(halved),
            "ended_before": sum(len(curves[n]) < epochs for n in names),
            "train_minutes": minutes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("curves", type=Path, help="a folder of <variant>.csv learning curves")
    parser.add_argument("--epochs", type=int, nargs="+", default=[10, 15, 20, 25, 30])
    parser.add_argument("--out", type=Path, help="write the figures here (JSON)")
    args = parser.parse_args(argv)
    try:
        curves = read_curves(args.curves)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if any(e < 1 for e in args.epochs):
        print(f"error: --epochs: must be >= 1 (got {args.epochs})", file=sys.stderr)
        return 2
    rows = [at_budget(curves, e) for e in args.epochs]
    print(f"{args.curves}: {len(curves)} models ({', '.join(sorted(curves))}), "
          f"{min(map(len, curves.values()))}-{max(map(len, curves.values()))} epochs recorded")
    print(f"{'epochs':>6} {'spearman':>8} {'kendall':>7} {'median gap':>10} {'max gap':>18} "
          f"{'lr halved':>9} {'ended':>5} {'train min/model':>15}")
    for row in rows:
        spread = sorted(row["train_minutes"].values())
        print(f"{row['epochs']:6d} {row['spearman']:8.2f} {row['kendall']:7.2f} {row['median_gap']:10.2f} "
              f"{row['max_gap']:6.2f} ({row['worst']:>9s}) {row['halved_by_then']:9d} {row['ended_before']:5d} "
              f"{spread[0]:9.1f}-{spread[-1]:.1f}")
    print("gap: best dev BLEU over the run minus best up to the budget; lr halved / ended: models whose "
          "learning rate had been halved / whose run had ended by then")
    if args.out:
        args.out.write_text(json.dumps({"curves": str(args.curves), "budgets": rows}, indent=1) + "\n",
                            encoding="utf-8")
        print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
