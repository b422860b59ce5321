"""Stage ``sweep_beta``: the weight β of fine-tuning's g-term, swept upward.

Flexible Attention (2017) eq. 9 fine-tunes with J = CE − β·mean g_t. The cross-entropy is summed
over a sentence (tens to hundreds of nats) while β·mean g_t is at most β, so at the paper's
β = 0.1 the g-term is about a thousandth of the loss. Whether a larger β narrows the window, and
what it costs, is measured here:

1. the **β = 0 run**, the reference every β is compared with: the fine-tuning's control
   (``control@<variant>``: the fine-tuning's epochs and learning rates with plain cross-entropy,
   from ``<finetune.init_dir>/<variant>/best.ckpt``), read from its stage's model folder and
   metrics file, not trained again;
2. every β of ``sweep_beta.grid`` in ascending order: the fine-tuning's recipe (``finetune.lr``,
   ``finetune.epochs`` as the cap, the training's stopping rule ``train.early_stopping_patience``)
   with J, from the same checkpoint; the β that ``finetune.beta`` names is the fine-tuning itself
   (``finetune@<variant>``, the same call), read as the control is. The sweep stops after the first
   β whose dev BLEU falls more than ``max_drop`` below the β = 0 run's;
3. each run's best checkpoint on dev: BLEU at τ = ∞ (beam search, ``decode``), mean g_t (teacher
   forced over the reference tokens), the mean window and BLEU at the fixed ``sweep_beta.tau``
   (how g_t moves the window, τ held), and the run's own τ, selected on dev by the rule and
   search every model's τ is selected by (``sweep_tau.grid``, ``add_log_mean_len``,
   ``tolerance``, ``search_steps``; :func:`flexatt.tau_search.select_tau`), with its window and
   BLEU (``selected_tau``, ``selected_window``, ``selected_bleu``; the searched points in
   ``tau_points``).

``sweep_beta.variant`` must be one of ``finetune.variants``, whose stages train those two. With a
single fine-tuning epoch (``finetune.epochs`` 1, the default) the control is the run the plain
recipe gives at β = 0 bit for bit (one epoch at ``finetune.lr``: no stopping rule or schedule acts
within it); with more it replays the fine-tuning's epochs and rates, the budget claim c compares at.

The runs train side by side (:mod:`flexatt.parallel`; ``train.threads`` each, as many at once as
``$FLEXATT_JOBS`` or the cores allow), taken in order; a run started beside the one that stops the
sweep is dropped with its checkpoints. Each run's weights are those it gets alone.

Selected (:func:`flexatt.tau_search.select_beta`, the rule the long profiles' units use): the β
with the smallest dev window at its own selected τ whose dev BLEU (τ = ∞) is within ``tolerance``
of the β = 0 run's (``null`` when none is). Every run keeps its own epochs under the stopping rule;
``epochs`` and ``best_epoch`` are recorded per point.

Writes ``sweep_beta.out`` (JSON), ``curve_file`` (CSV for ``dvc plots``) and ``figure`` (PNG);
the runs' model folders go to ``<out_dir>/beta<β>/<variant>/`` (an interrupted sweep resumes from
their state in ``.resume/``, deleted when the sweep ends); the two read from other stages stay in
theirs.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import torch
from omegaconf import DictConfig

from flexatt import config as C
from flexatt import figures, parallel, schema
from flexatt.data.batching import LengthGroupedBatches, ParallelData, collate
from flexatt.data.subwords import PAD_ID
from flexatt.data.evalset import EvalSet
from flexatt.points import Decoder
from flexatt.checkpoints import load_model
from flexatt.tau import INF, label
from flexatt.tau_search import dev_grid, search_points, select_beta, select_tau, within_tolerance
from flexatt.errors import ConfigError
from flexatt.io import write_csv, write_json
from flexatt.parallel import intra_op_threads, run_each
from flexatt.tracking import default_group, start_run
from flexatt.trainer import drop_resume_state, train


def mean_g(model, data: EvalSet, batch_size: int) -> float:
    """Mean penalty strength g_t over every reference token of ``data``, teacher forced (the
    quantity eq. 9's g-term averages).  # g: batch x T"""
    sampler = LengthGroupedBatches(data.split.src_lengths, data.split.tgt_lengths, batch_size, shuffle=False)
    items = ParallelData(data.split)
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for indices in sampler:
            batch = collate([items[i] for i in indices])
            _, aux = model(batch.src, batch.src_len, batch.tgt_in)
            mask = batch.tgt_out != PAD_ID
            total += float((aux["g"] * mask).sum())
            count += int(mask.sum())
    return total / count


def trained_by(p: schema.Params, beta: float) -> tuple[str, dict[str, Path]] | None:
    """The stage whose model is the sweep's run at ``beta``, and that model's checkpoint and
    metrics file by the setting that places each: β = 0 is the control (``control@<variant>``),
    β = ``finetune.beta`` the fine-tuning (``finetune@<variant>``); ``None`` for a β the sweep
    trains itself."""
    ft, variant = p.finetune, p.sweep_beta.variant
    if beta == 0.0:
        return f"control@{variant}", {"finetune.control_out_dir": Path(ft.control_out_dir) / variant / "best.ckpt",
                                      "finetune.control_metrics_dir": Path(ft.control_metrics_dir) / f"{variant}.json"}
    if beta == ft.beta:
        return f"finetune@{variant}", {"finetune.out_dir": Path(ft.out_dir) / variant / "best.ckpt",
                                       "finetune.metrics_dir": Path(ft.metrics_dir) / f"{variant}.json"}
    return None


def read_elsewhere(p: schema.Params, beta: float) -> tuple[Path, Path]:
    """The checkpoint and metrics file of the run at ``beta`` that another stage trained
    (:func:`trained_by`), existing files.

    Raises:
        ConfigError: one is missing (names its setting, the file and the stage to run first).
    """
    stage, files = trained_by(p, beta)
    hint = f"the sweep's run at beta = {beta:g} is {stage}'s model: run that stage first (dvc repro {stage})"
    checkpoint, metrics_file = (C.require_file(key, str(path), hint=hint) for key, path in files.items())
    return checkpoint, metrics_file


def _run(p: schema.Params, beta: float) -> tuple[dict, Path]:
    """The sweep's run at ``beta``: its metrics (``epochs``, ``best_epoch``) and its best checkpoint,
    trained here or read from the stage that trained it (:func:`trained_by`)."""
    sb, ft, variant = p.sweep_beta, p.finetune, p.sweep_beta.variant
    init, name = Path(ft.init_dir) / variant / "best.ckpt", f"beta{beta:g}"
    elsewhere = trained_by(p, beta)
    if elsewhere:
        stage, _ = elsewhere
        checkpoint, metrics_file = read_elsewhere(p, beta)
        metrics = json.loads(metrics_file.read_text(encoding="utf-8"))
        print(f"sweep_beta: beta = {beta:g}: {stage}'s model ({checkpoint})", flush=True)
        return metrics, checkpoint
    out_dir = Path(sb.out_dir) / name
    print(f"sweep_beta: beta = {beta:g}: fine-tuning {variant} from {init}", flush=True)
    metrics, _ = train(p, variant, out_dir=str(out_dir), epochs=ft.epochs, lr=ft.lr, beta=beta,
                       init_from=init, metrics_file=out_dir / "metrics.json",
                       job_type="sweep_beta", run_name=f"{variant}-{name}")
    return metrics, out_dir / variant / "best.ckpt"


def _point(job: tuple[dict, float]) -> tuple[dict, dict]:
    """One β of the sweep (run by :func:`flexatt.parallel.run_each`, in a worker process or here):
    its run (:func:`_run`), then dev decoded at τ = ∞, at ``sweep_beta.tau`` and along the τ search.
    ``(params as a dict, β)`` -> ``(point, decoded_by)``."""
    run_cfg, beta = job
    p = schema.validate(run_cfg)
    sb, st = p.sweep_beta, p.sweep_tau
    name = f"beta{beta:g}"
    metrics, checkpoint = _run(p, beta)
    dev = EvalSet.load(p.train.data_dir, "dev")
    decoder = Decoder(p, {"dev": dev})
    with intra_op_threads(p.train.threads):  # as the worker beside it: one training's cores
        model = load_model(checkpoint)
        decoder.use(name, model)
        full, fixed = decoder.point(name, "dev", INF), decoder.point(name, "dev", sb.tau)
        grid = dev_grid(st.grid, dev.mean_src_len, st.add_log_mean_len)
        tau_points = search_points(lambda tau: decoder.point(name, "dev", tau), grid, full["bleu"],
                                   st.tolerance, st.search_steps)
        chosen = select_tau(tau_points, full["bleu"], st.tolerance) or full
        result = {
            "beta": beta, "epochs": metrics["epochs"], "best_epoch": metrics["best_epoch"],
            "dev_bleu": full["bleu"], "g_mean": round(mean_g(model, dev, decoder.options.batch_size), 4),
            "window": fixed["window"], "dev_bleu_tau": fixed["bleu"],
            "selected_tau": chosen["tau"], "selected_window": chosen["window"], "selected_bleu": chosen["bleu"],
            "tau_points": tau_points,
        }
    print(f"sweep_beta: beta = {beta:g}: dev BLEU {result['dev_bleu']}, mean g {result['g_mean']}, window "
          f"{result['window']} at tau = {label(sb.tau)}, {result['selected_window']} at its tau = "
          f"{label(result['selected_tau'])} ({result['epochs']} epochs, best {result['best_epoch']})", flush=True)
    return result, dict(decoder.decoded_by[name])


def chosen_beta(points: list[dict], reference: dict, tolerance: float) -> dict | None:
    """The sweep's point :func:`flexatt.tau_search.select_beta` chooses: the smallest dev window at
    its own selected τ among the βs within ``tolerance`` dev BLEU (τ = ∞) of the β = 0 run."""
    chosen = select_beta([{"beta": q["beta"], "bleu": q["dev_bleu"], "window": q["selected_window"]}
                          for q in points], reference["dev_bleu"], tolerance)
    return next(q for q in points if q["beta"] == chosen["beta"]) if chosen else None


def run(cfg: DictConfig | schema.Params) -> dict:
    p = schema.params(cfg)
    sb = p.sweep_beta
    variant = p.flexible_variant("sweep_beta.variant")
    if variant not in p.finetune.variants:
        raise ConfigError("sweep_beta.variant", f"must be one of finetune.variants ({', '.join(p.finetune.variants)}): "
                          f"the sweep's β = 0 run is that variant's control@ stage (got {variant!r})")
    out_dir = Path(sb.out_dir)
    betas = [0.0, *sb.grid]  # the β = 0 reference first, then upward
    for beta in betas:
        if trained_by(p, beta):  # read from its stage (checked here, before any run starts): no folder here
            read_elsewhere(p, beta)
            shutil.rmtree(out_dir / f"beta{beta:g}", ignore_errors=True)
    run_cfg = schema.as_dict(p)
    run_cfg.setdefault("logger", {})["group"] = p.logger.group or default_group(p)
    decoded_by: dict = {}
    reference: dict = {}
    points: list[dict] = []
    # the points side by side (flexatt.parallel), taken in order: a point started beside the one
    # that stops the sweep is dropped, and its checkpoints removed, as if never trained
    results = run_each(_point, [(run_cfg, beta) for beta in betas], parallel.jobs(p.train.threads))
    with contextlib.closing(results):
        for beta, (result, decoded) in zip(betas, results):
            decoded_by.update(decoded)
            if beta == 0.0:
                reference = result
                continue
            points.append(result)
            if not within_tolerance(result["dev_bleu"], reference["dev_bleu"], sb.max_drop):
                print(f"sweep_beta: dev BLEU fell more than {sb.max_drop:g} below beta = 0: the sweep stops",
                      flush=True)
                break
    for beta in betas[1 + len(points):]:
        shutil.rmtree(out_dir / f"beta{beta:g}", ignore_errors=True)
    drop_resume_state(out_dir)
    selected = chosen_beta(points, reference, sb.tolerance)
    st = p.sweep_tau
    result = {"variant": variant, "tau": sb.tau, "max_drop": sb.max_drop, "tolerance": sb.tolerance,
              "tau_search": {"grid": list(st.grid), "add_log_mean_len": st.add_log_mean_len,
                             "tolerance": st.tolerance, "search_steps": st.search_steps},
              "reference": reference, "points": points,
              "selected_beta": selected["beta"] if selected else None, "decoded_by": decoded_by}
    write_json(sb.out, result)
    rows = [{k: v for k, v in q.items() if k != "tau_points"} for q in (reference, *points)]
    write_csv(sb.curve_file, rows)
    figure = figures.beta_curve(points, reference, sb.tau, sb.figure, result["selected_beta"])

    tracker = start_run(p, "sweep_beta", "beta", tags=[variant, p.profile])
    table = tracker.table("sweep_beta/points", list(rows[0]), [list(r.values()) for r in rows])
    tracker.line_plot("sweep_beta/window_plot", table, "beta", "window", f"mean dev window at tau = {label(sb.tau)}")
    tracker.line_plot("sweep_beta/selected_window_plot", table, "beta", "selected_window",
                      "mean dev window at each beta's selected tau")
    tracker.image("figures/beta", figure)
    tracker.summary({"selected_beta": result["selected_beta"], "reference_dev_bleu": reference["dev_bleu"]})
    tracker.config({"decoded_by": decoded_by})
    tracker.finish()
    print(f"sweep_beta: selected beta = {result['selected_beta']} (beta = 0: dev BLEU {reference['dev_bleu']}, "
          f"window {reference['selected_window']} at its tau = {label(reference['selected_tau'])})")
    return result


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
