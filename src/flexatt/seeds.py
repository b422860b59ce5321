"""The headline comparisons tested across training seeds (the ``+sweep=seeds`` sweep).

Table 1's p-values resample test sentences of one trained model each; they say nothing about
training noise. Each job of the seeds sweep trains every model of the headline comparison with
one ``train.seed`` (:mod:`flexatt.stages.replicate`), so the models of one job are paired by
seed. Per pair of its summary columns (``a`` − ``b``) this module gives, over the completed jobs
with both figures: ``n``, the mean difference, its sample standard deviation, the 95% t interval
of the mean, and the two-sided p of the paired t-test (``scipy.stats.ttest_rel``), Holm-adjusted
across the pairs (:func:`flexatt.claims.holm`). With 3 seeds the t-test has 2 degrees of freedom:
only a large, steady difference comes out significant, which is what training noise allows.

Runs as a Hydra callback after the sweep's summary (``conf/sweep/seeds.yaml``), writing
``paired.{md,json}`` beside ``summary.md``; ``python -m flexatt.seeds SWEEP_DIR`` writes them again.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from flexatt.errors import ConfigError, FlexattError
from flexatt.io import atomic_path, write_json

#: (a, b, what a − b measures): the comparisons behind the claims, as columns of the seeds summary.
#: A pair with a ``_tau_`` column compares figures at the τ selected on dev (the control's at its
#: own): a job where none was selected decodes those rows at τ = ∞ (a difference of 0, or two full
#: windows), so it is left out of that pair (:func:`paired`, ``selected_tau``,
#: ``selected_tau_control``).
PAIRS: tuple[tuple[str, str, str], ...] = (
    ("flexible_bleu", "global_bleu", "Flexible τ=∞ − Global, BLEU"),
    ("flexible_ft_tau_bleu", "flexible_ft_bleu", "fine-tuned Flexible at its τ − at τ=∞, BLEU"),
    ("flexible_ft_bleu", "flexible_ctl_bleu", "fine-tuned − control (β = 0) at τ=∞, BLEU"),
    ("flexible_ft_tau_bleu", "flexible_ctl_tau_bleu", "fine-tuned − control, each at its own τ, BLEU"),
    ("flexible_ft_tau_window", "flexible_ctl_tau_window", "fine-tuned − control, each at its own τ, window"),
    ("flexible_ft_tau_bleu", "local_bleu", "fine-tuned Flexible at its τ − the local variant, BLEU"),
)
FILES = ("paired.md", "paired.json")


def _number(value: Any) -> float | None:
    """A job's figure as a float (``None``: missing, empty or not a finite number)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def paired(rows: Sequence[dict], pairs: Sequence[tuple[str, str, str]] = PAIRS) -> list[dict]:
    """Each pair ``(a, b, label)`` over the completed ``rows`` (``status`` COMPLETED) holding both
    figures: ``n``, ``mean`` and ``sd`` of a − b, ``ci`` (95%, t with n − 1 degrees of freedom),
    ``p`` (paired t-test, two-sided) and ``p_holm`` (Holm across the pairs that have a p).
    A pair at τ (a ``_tau_`` column) counts only the jobs with a ``selected_tau``, and one with
    the control at its τ (a ``_ctl_tau_`` column) only those whose control has one too
    (``selected_tau_control``).
    Below two jobs the spread, interval and p are ``None``; differences that are all equal give
    no t statistic, so no p either."""
    from scipy import stats

    from flexatt.claims import holm

    out = []
    for a, b, label in pairs:
        needs = [key for key, marker in (("selected_tau", "_tau_"), ("selected_tau_control", "_ctl_tau_"))
                 if marker in a or marker in b]
        both = [(_number(r.get(a)), _number(r.get(b))) for r in rows if r.get("status") == "COMPLETED"
                and all(_number(r.get(key)) is not None for key in needs)]
        both = [(x, y) for x, y in both if x is not None and y is not None]
        diffs = [x - y for x, y in both]
        n = len(diffs)
        entry = {"a": a, "b": b, "label": label, "n": n, "diffs": diffs,
                 "mean": sum(diffs) / n if n else None, "sd": None, "ci": None, "p": None}
        if n >= 2:
            mean = entry["mean"]
            sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
            half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
            entry.update(sd=sd, ci=[mean - half, mean + half])
            if sd > 0:
                entry["p"] = float(stats.ttest_rel([x for x, _ in both], [y for _, y in both]).pvalue)
        out.append(entry)
    adjusted = holm({i: e["p"] for i, e in enumerate(out) if e["p"] is not None})
    for i, entry in enumerate(out):
        entry["p_holm"] = adjusted.get(i)
    return out


def markdown(results: Sequence[dict]) -> str:
    """The comparisons as a Markdown table (the pairs no job had both figures for are left out)."""
    lines = ["| comparison (a − b) | n | mean ± sd | 95% CI | p (paired t) | p (Holm) |", "|---|---|---|---|---|---|"]
    for e in results:
        if not e["n"]:
            continue
        spread = f" ± {e['sd']:.2f}" if e["sd"] is not None else ""
        ci = f"[{e['ci'][0]:+.2f}, {e['ci'][1]:+.2f}]" if e["ci"] else "–"
        p = f"{e['p']:.3f}" if e["p"] is not None else "–"
        ph = f"{e['p_holm']:.3f}" if e["p_holm"] is not None else "–"
        lines.append(f"| {e['label']} | {e['n']} | {e['mean']:+.2f}{spread} | {ci} | {p} | {ph} |")
    return "\n".join(lines)


def write(sweep_dir: str | Path) -> list[dict]:
    """Compare the completed jobs of the seeds sweep in ``sweep_dir``; write ``paired.{md,json}``."""
    from flexatt.sweeps import collect

    sweep_dir = Path(sweep_dir)
    _, _, rows = collect(sweep_dir)
    results = paired(rows)
    md, js = (sweep_dir / name for name in FILES)
    text = ("# Across training seeds, paired by seed\n\nEach job trains every model with its own "
            "`train.seed`; a − b per job, then the mean, its 95% t interval and the paired t-test "
            "(two-sided), Holm-adjusted across the comparisons.\n\n" + markdown(results) + "\n")
    with atomic_path(md) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    write_json(js, {"comparisons": results})
    return results


class SeedComparison(Callback):
    """Hydra callback of the seeds sweep: once every job has ended, :func:`write` in its sweep dir."""

    def __init__(self, **unknown: Any):
        if unknown:
            raise ConfigError("hydra.callbacks.seed_comparison", f"unknown key(s) {', '.join(sorted(unknown))}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        results = write(str(config.hydra.sweep.dir))
        shown = sum(1 for e in results if e["n"])
        print(f"seeds: {shown} comparisons across seeds in {Path(str(config.hydra.sweep.dir)) / FILES[0]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexatt.seeds", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", type=Path, help="the seeds sweep's dir, e.g. multirun/seeds/<date>_<time>")
    args = parser.parse_args(argv)
    try:
        results = write(args.sweep_dir)
    except FlexattError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
