"""One training seed of the headline comparison: Global against Flexible (and fine-tuned
Flexible), from training to test BLEU — the job of the named sweep ``+sweep=seeds``.

Table 1's confidence intervals measure test-set noise; this measures training noise. Each job,
with its ``train.seed``:

1. trains ``global`` and ``flexible`` (the pipeline's settings: ``train``, ``model``,
   ``trainer``), and the local variant named by the sweep's ``seeds_local`` key when it names
   one (e.g. the local-m whose D lands nearest flexible's selected window); fine-tunes
   ``flexible`` from its best checkpoint (``finetune``) and trains its control (β = 0, the same
   parent, as many epochs as the fine-tuning ran: :mod:`flexatt.stages.control`);
2. selects τ for the fine-tuned model and, apart, for its control on dev as the ``sweep_tau``
   stage does
   (:func:`flexatt.tau_search.search_points` and :func:`flexatt.tau_search.select_tau`:
   the grid, log S̄, bisections, the tolerance);
3. decodes test (``decode``) for the rows ``global``, ``flexible``, ``flexible_ft``,
   ``flexible_ctl`` (and ``local``) at τ = ∞, ``flexible_ft_tau`` at the selected τ and
   ``flexible_ctl_tau`` at the control's own τ, selected on dev by the same rule (τ = ∞ where
   none is selected), and scores BLEU, chrF and the window (docs/method.md, Window).

Writes ``<train.metrics_dir>/replicate.json`` (the job's folder in the sweep): ``seed``,
``dev_bleu`` (greedy, best epoch, per trained model), ``selected_tau`` (``null``: none within the
tolerance, ``flexible_ft_tau`` then decoded at τ = ∞, and ``tau_selected`` false) and the
control's ``selected_tau_control`` (and ``control_tau_selected``), the dev points of each τ
search (``dev_points``, ``dev_points_control``), and ``rows``: per row ``tau``, ``bleu``
(sacrebleu, 13a), ``chrf``, ``window``, ``reduction`` (1 − window / Global's window) and ``ms_per_sentence``. Logs one W&B run of job
type ``replicate`` (and the trainings' own runs, ``train-global-seed<seed>`` etc.).

Its outputs must not be the pipeline's (``train.out_dir``, ``train.metrics_dir`` and
``finetune.out_dir`` as in the params file are refused): the sweep puts them in each job's dir.

Usage (after ``dvc repro tokenize``)::

    python -m flexatt.stages.replicate -m +sweep=seeds

The sweep's summary (:class:`flexatt.sweeps.SweepSummary` with ``aggregate: true``) gives
every job's figures and their mean ± sample standard deviation.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from flexatt import config as C
from flexatt import schema
from flexatt.errors import ConfigError
from flexatt.data.evalset import EvalSet
from flexatt.points import decode_options
from flexatt.checkpoints import load_model
from flexatt.tau import INF, label, to_json
from flexatt.tau_search import dev_grid, search_points, select_tau
from flexatt.decoding.translate import translate_split
from flexatt.io import write_json
from flexatt.metrics import corpus_bleu, corpus_chrf
from flexatt.tracking import start_run
from flexatt.stages.control import budget, control_params
from flexatt.trainer import drop_resume_state, train

#: the variants a job trains, and the one it fine-tunes
VARIANTS = ("global", "flexible")
FINETUNED = "flexible"
#: the keys naming where a job writes: never the pipeline's own outputs
OUTPUT_KEYS = ("train.out_dir", "train.metrics_dir", "finetune.out_dir", "finetune.control_out_dir")
#: the sweep's key naming a local variant to replicate too (optional; a key of ``variants``)
LOCAL_KEY = "seeds_local"


def local_variant(p: schema.Params) -> str | None:
    """The variant of the sweep's ``seeds_local`` key (``None`` when it is absent or null).

    Raises:
        ConfigError: it names no variant, or one whose attention is not a local window.
    """
    name = (p.model_extra or {}).get(LOCAL_KEY)
    if name is None:
        return None
    if not isinstance(name, str) or name not in p.variants:
        raise ConfigError(LOCAL_KEY, f"must be one of {', '.join(p.variants)} (got {name!r})")
    if p.model_of(name, LOCAL_KEY).attention not in ("local_m", "local_p"):
        raise ConfigError(LOCAL_KEY, f"must name a local-m or local-p variant, not {name!r}")
    return name


def check_outputs(cfg: DictConfig | schema.Params) -> None:
    """Refuse output dirs that are the pipeline's (the params file's values): a replicate would
    overwrite the pipeline's checkpoints and metrics with another seed's."""
    params = Path(os.environ.get(C.PARAMS_ENV, "params.yaml"))
    if not params.is_file():
        return
    pipeline = OmegaConf.load(params)
    for key in OUTPUT_KEYS:
        ours, theirs = OmegaConf.select(OmegaConf.create(schema.as_dict(cfg)), key), OmegaConf.select(pipeline, key)
        if theirs is not None and Path(ours).resolve() == Path(str(theirs)).resolve():
            raise ConfigError(key, f"is the pipeline's own output dir ({ours}): a replicate would overwrite "
                              "it; run the named sweep (python -m flexatt.stages.replicate -m +sweep=seeds) "
                              f"or set {', '.join(OUTPUT_KEYS)} elsewhere")


def run(cfg: DictConfig | schema.Params) -> dict:
    check_outputs(cfg)
    p = schema.params(cfg)
    seed, models_dir, job_dir, ft_dir = p.train.seed, Path(p.train.out_dir), Path(p.train.metrics_dir), Path(p.finetune.out_dir)
    grid, tolerance, steps = p.sweep_tau.grid, p.sweep_tau.tolerance, p.sweep_tau.search_steps
    add_log_mean_len, tok_dir = p.sweep_tau.add_log_mean_len, p.train.data_dir
    options = decode_options(p)
    sets = {name: EvalSet.load(tok_dir, name) for name in ("dev", "test")}

    local = local_variant(p)
    ctl_dir = Path(p.finetune.control_out_dir)
    dev_bleu = {}
    for variant in (*VARIANTS, *([local] if local else [])):
        metrics, objects = train(p, variant, run_name=f"{variant}-seed{seed}")
        dev_bleu[variant] = metrics["dev_bleu"]
    metrics, objects = train(p, FINETUNED, out_dir=str(ft_dir),
                             epochs=p.finetune.epochs, lr=p.finetune.lr, beta=p.finetune.beta,
                             init_from=models_dir / FINETUNED / "best.ckpt",
                             metrics_file=job_dir / f"{FINETUNED}_ft.json",
                             run_name=f"{FINETUNED}_ft-seed{seed}")
    dev_bleu[f"{FINETUNED}_ft"] = metrics["dev_bleu"]
    rates = budget(job_dir / f"{FINETUNED}_ft.csv")  # the fine-tuning's epochs and learning rates
    metrics, objects = train(control_params(p), FINETUNED, out_dir=str(ctl_dir), epochs=len(rates),
                             lr=rates[0], beta=0.0, init_from=models_dir / FINETUNED / "best.ckpt",
                             metrics_file=job_dir / f"{FINETUNED}_ctl.json", job_type="control",
                             run_name=f"{FINETUNED}_ctl-seed{seed}", lr_epochs=rates)
    dev_bleu[f"{FINETUNED}_ctl"] = metrics["dev_bleu"]
    if not objects["is_global_zero"]:  # under DDP, rank 0 alone decodes and reports
        return {}
    for trained in (models_dir, ft_dir, ctl_dir):
        drop_resume_state(trained)

    models = {"global": load_model(models_dir / "global" / "best.ckpt"),
              "flexible": load_model(models_dir / "flexible" / "best.ckpt"),
              "flexible_ft": load_model(ft_dir / FINETUNED / "best.ckpt"),
              "flexible_ctl": load_model(ctl_dir / FINETUNED / "best.ckpt")}
    if local:
        models["local"] = load_model(models_dir / local / "best.ckpt")

    def score(name: str, split: str, tau: float) -> dict:
        data = sets[split]
        out = translate_split(models[name], data.split, data.tgt_vocab, options.at(tau))
        return {"tau": tau, "bleu": round(corpus_bleu(out.hypotheses, [data.references])[0], 2),
                "chrf": round(corpus_chrf(out.hypotheses, [data.references])[0], 2),
                "window": round(out.mean_window, 3), "ms_per_sentence": round(out.ms_per_sentence, 2)}

    grid = dev_grid(grid, sets["dev"].mean_src_len, add_log_mean_len)

    def select(name: str) -> tuple[float, list[dict]]:
        """``name``'s τ selected on dev by sweep_tau's rule (τ = ∞ where none is within the
        tolerance) and the dev points of its search, τ = ∞ first."""
        reference = score(name, "dev", INF)
        points = search_points(lambda tau: score(name, "dev", tau), grid, reference["bleu"], tolerance, steps)
        chosen = select_tau(points, reference["bleu"], tolerance)
        if chosen is None:
            print(f"replicate: seed {seed}: no tau within {tolerance} dev BLEU of tau = inf for {name} "
                  f"({reference['bleu']}): its tau row is decoded at tau = inf", flush=True)
        return (chosen["tau"] if chosen else INF), [reference, *points]

    # the fine-tuned model and its control each at its own dev-selected tau: a larger g_t narrows
    # the window at one shared tau by construction, so only their own operating points compare
    tau, dev_points = select("flexible_ft")
    tau_control, dev_points_control = select("flexible_ctl")
    rows = {name: score(name, "test", INF) for name in models}
    rows["flexible_ft_tau"] = score("flexible_ft", "test", tau)
    rows["flexible_ctl_tau"] = score("flexible_ctl", "test", tau_control)
    for name, row in rows.items():
        row["reduction"] = round(1.0 - row["window"] / rows["global"]["window"], 4)
    result = {"seed": seed, "local_variant": local, "dev_bleu": dev_bleu, "selected_tau": tau,
              "tau_selected": tau != INF, "selected_tau_control": tau_control,
              "control_tau_selected": tau_control != INF,
              "dev_points": dev_points, "dev_points_control": dev_points_control, "rows": rows}
    write_json(job_dir / "replicate.json", result)

    tracker = start_run(p, "replicate", f"seed{seed}", tags=["seeds", p.profile])
    tracker.records("replicate/rows", [{"row": name, **r} for name, r in rows.items()],
                    ["row", "tau", "bleu", "chrf", "window", "reduction"])
    summary = {"seed": seed, "selected_tau": to_json(tau), "selected_tau_control": to_json(tau_control),
               **{f"dev_bleu/{k}": v for k, v in dev_bleu.items()},
               **{f"{name}/{k}": v for name, r in to_json(rows).items() for k, v in r.items()}}
    tracker.summary({k: v for k, v in summary.items() if v is not None})
    tracker.finish()
    print(f"replicate: seed {seed}: " + ", ".join(
        f"{name} BLEU {r['bleu']} chrF {r['chrf']} window {r['window']}" for name, r in rows.items())
        + f" (selected tau {label(tau)}, the control's {label(tau_control)})", flush=True)
    return result


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
