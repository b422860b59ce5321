"""One training seed of the headline comparison: Global against Flexible (and fine-tuned
Flexible), from training to test BLEU — the job of the named sweep ``+sweep=seeds``.

Table 1's confidence intervals measure test-set noise; this measures training noise. Each job,
with its ``train.seed``:

1. trains ``global`` and ``flexible`` (the pipeline's settings: ``train``, ``model``,
   ``trainer``) and fine-tunes ``flexible`` from its best checkpoint (``finetune``);
2. selects τ for the fine-tuned model on dev as the ``sweep_tau`` stage does
   (:func:`flexatt.stages.sweep_tau.search_points` and :func:`flexatt.evaluation.select_tau`:
   the grid, log S̄, bisections, the tolerance);
3. decodes test (``decode``) for the rows ``global``, ``flexible`` and ``flexible_ft`` at τ = ∞
   and ``flexible_ft_tau`` at the selected τ (τ = ∞ when none is selected), and scores BLEU,
   chrF and the window (docs/method.md, Window).

Writes ``<train.metrics_dir>/replicate.json`` (the job's folder in the sweep) and one W&B run.

Usage (after ``dvc repro tokenize``)::

    python -m flexatt.stages.replicate -m +sweep=seeds

The sweep's summary (:class:`flexatt.sweeps.SweepSummary` with ``aggregate: true``) gives
every job's figures and their mean ± sample standard deviation.
"""

from __future__ import annotations

import math
from pathlib import Path

from omegaconf import DictConfig

from flexatt import config as C
from flexatt.evaluation import EvalSet, load_model, select_tau, translate_split
from flexatt.io import write_json
from flexatt.metrics import corpus_bleu, corpus_chrf
from flexatt.stages.sweep_tau import check_taus, decode_settings, search_points
from flexatt.tracking import start_run
from flexatt.train import train

#: the variants a job trains, and the one it fine-tunes
VARIANTS = ("global", "flexible")
FINETUNED = "flexible"


def run(cfg: DictConfig) -> dict:
    seed = C.check_int(cfg, "train.seed", minimum=0)
    models_dir = Path(C.check_str(cfg, "train.out_dir"))
    job_dir = Path(C.check_str(cfg, "train.metrics_dir"))
    ft_dir = Path(C.check_str(cfg, "finetune.out_dir"))
    grid = check_taus(cfg, "sweep_tau.grid")
    tolerance = C.check_float(cfg, "sweep_tau.tolerance", ge=0.0)
    steps = C.check_int(cfg, "sweep_tau.search_steps", minimum=0)
    add_log_mean_len = C.check_bool(cfg, "sweep_tau.add_log_mean_len")
    settings = decode_settings(cfg)
    tok_dir = C.check_str(cfg, "train.data_dir")
    sets = {name: EvalSet.load(tok_dir, name) for name in ("dev", "test")}

    dev_bleu = {}
    for variant in VARIANTS:
        metrics, _ = train(cfg, variant)
        dev_bleu[variant] = metrics["dev_bleu"]
    metrics, _ = train(cfg, FINETUNED, out_dir=str(ft_dir),
                       epochs=C.check_int(cfg, "finetune.epochs", minimum=1),
                       lr=C.check_float(cfg, "finetune.lr", gt=0.0),
                       beta=C.check_float(cfg, "finetune.beta", ge=0.0),
                       init_from=models_dir / FINETUNED / "best.ckpt",
                       metrics_file=job_dir / f"{FINETUNED}_ft.json")
    dev_bleu[f"{FINETUNED}_ft"] = metrics["dev_bleu"]

    models = {"global": load_model(models_dir / "global" / "best.ckpt"),
              "flexible": load_model(models_dir / "flexible" / "best.ckpt"),
              "flexible_ft": load_model(ft_dir / FINETUNED / "best.ckpt")}

    def score(name: str, split: str, tau: float | None) -> dict:
        data = sets[split]
        out = translate_split(models[name], data.split, data.tgt_vocab, tau=tau, **settings)
        return {"tau": tau, "bleu": round(corpus_bleu(out.hypotheses, [data.references])[0], 2),
                "chrf": round(corpus_chrf(out.hypotheses, [data.references])[0], 2),
                "window": round(out.mean_window, 3)}

    log_mean = round(math.log(sets["dev"].mean_src_len), 3)
    if add_log_mean_len and log_mean not in grid:
        grid = sorted([*grid, log_mean])
    reference = score("flexible_ft", "dev", None)
    points = search_points(lambda tau: score("flexible_ft", "dev", tau), grid, reference["bleu"],
                           tolerance, steps)
    chosen = select_tau(points, reference["bleu"], tolerance)
    tau = chosen["tau"] if chosen else None

    rows = {name: score(name, "test", None) for name in models}
    rows["flexible_ft_tau"] = score("flexible_ft", "test", tau)
    for name, row in rows.items():
        row["reduction"] = round(1.0 - row["window"] / rows["global"]["window"], 4)
    result = {"seed": seed, "dev_bleu": dev_bleu, "selected_tau": tau,
              "dev_points": [reference, *points], "rows": rows}
    write_json(job_dir / "replicate.json", result)

    tracker = start_run(cfg, "replicate", f"seed{seed}", tags=["seeds", cfg.get("profile")])
    tracker.table("replicate/rows", ["row", "tau", "bleu", "chrf", "window", "reduction"],
                  [[name, r["tau"], r["bleu"], r["chrf"], r["window"], r["reduction"]] for name, r in rows.items()])
    tracker.summary({f"{name}/{k}": v for name, r in rows.items() for k, v in r.items() if v is not None})
    tracker.finish()
    print(f"replicate: seed {seed}: " + ", ".join(
        f"{name} BLEU {r['bleu']} chrF {r['chrf']} window {r['window']}" for name, r in rows.items())
        + f" (selected tau {tau})", flush=True)
    return result


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
