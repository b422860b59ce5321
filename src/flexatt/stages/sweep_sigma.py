"""Stage ``sweep_sigma``: flexible attention's penalty width σ, chosen on dev BLEU.

The papers train one model per σ ∈ {3/2, 10/2, 15/2, 20/2}. On a CPU that would multiply the
cost of the flexible model by four, so the default profile warm-starts instead: every σ of
``sweep_sigma.grid`` — the trained one's included, so that all points get the same extra
training — continues the trained ``base_variant`` model for ``warm_start_epochs`` epochs at
learning rate ``lr`` with ``model.sigma`` set to that σ. Each is decoded on dev at τ = ∞ (its
BLEU decides) and at the reference τ (the middle of ``sweep_tau.grid``, for the window it buys).
The paper profile can set ``warm_start_epochs`` to the full training length.

The σ points train side by side (:mod:`flexatt.parallel`; ``train.threads`` each, as many at once
as ``$FLEXATT_JOBS`` or the cores allow); each point's weights are those it gets alone.

Writes ``sweep_sigma.out`` (JSON), ``curve_file`` (CSV for ``dvc plots``) and ``figure`` (PNG).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from flexatt import config as C
from flexatt import figures, parallel, schema
from flexatt.data.evalset import EvalSet
from flexatt.points import decode_options
from flexatt.checkpoints import load_model
from flexatt.decoding.translate import DecodeOptions, translate_split
from flexatt.io import write_csv, write_json
from flexatt.metrics import corpus_bleu
from flexatt.parallel import intra_op_threads, run_each
from flexatt.tracking import default_group, start_run
from flexatt.trainer import drop_resume_state, train


def _dev_point(model, dev: EvalSet, options: DecodeOptions, decoded_by: dict) -> tuple[float, float]:
    """(dev BLEU, mean window) of ``model`` decoded as ``options`` say; what decoded it goes into
    ``decoded_by``."""
    out = translate_split(model, dev.split, dev.tgt_vocab, options)
    decoded_by.update(out.decoded_by)
    bleu, _ = corpus_bleu(out.hypotheses, [dev.references])
    return round(bleu, 2), round(out.mean_window, 3)


def _point(job: tuple[dict, float]) -> tuple[dict, dict]:
    """One σ of the sweep (run by :func:`flexatt.parallel.run_each`, in a worker process or
    here): ``(params as a dict, σ)`` -> ``(point, decoded_by)``."""
    run_cfg, sigma = job
    p = schema.validate(run_cfg)
    sg = p.sweep_sigma
    base, epochs = p.flexible_variant("sweep_sigma.base_variant"), sg.warm_start_epochs
    out_dir, init = Path(sg.out_dir), Path(p.train.out_dir) / base / "best.ckpt"
    grid = p.sweep_tau.grid
    ref_tau = sorted(grid)[len(grid) // 2]
    name = f"sigma{sigma:g}"
    print(f"sweep_sigma: sigma = {sigma:g}: {epochs} epoch(s) from {init}", flush=True)
    metrics, _ = train(p, base, out_dir=str(out_dir / name), epochs=epochs, lr=sg.lr, init_from=init,
                       metrics_file=out_dir / name / "metrics.json", job_type="sweep_sigma",
                       run_name=f"{base}-{name}")
    dev, options, decoded_by = EvalSet.load(p.train.data_dir, "dev"), decode_options(p), {}
    with intra_op_threads(p.train.threads):  # as the worker beside it: one training's cores
        model = load_model(out_dir / name / base / "best.ckpt")
        point = {"sigma": sigma, "train_dev_bleu_greedy": metrics["dev_bleu"]}
        point["dev_bleu"], point["window_inf"] = _dev_point(model, dev, options, decoded_by)
        point["dev_bleu_ref"], point["window"] = _dev_point(model, dev, options.at(ref_tau), decoded_by)
    print(f"sweep_sigma: sigma = {sigma:g}: dev BLEU {point['dev_bleu']} (tau = inf), "
          f"window {point['window']} at tau = {ref_tau:g}", flush=True)
    return point, decoded_by


def run(cfg: DictConfig | schema.Params) -> dict:
    p = schema.params(cfg)
    sg = p.sweep_sigma
    base, epochs = p.flexible_variant("sweep_sigma.base_variant"), sg.warm_start_epochs
    out_file, curve_file, figure_file = sg.out, Path(sg.curve_file), sg.figure
    grid = p.sweep_tau.grid
    ref_tau = sorted(grid)[len(grid) // 2]

    jobs = []
    for sigma in sg.grid:
        run_cfg = schema.as_dict(p)
        run_cfg.setdefault("variants", {}).setdefault(base, {})["sigma"] = sigma
        # the W&B runs of the sigma points stay in the group of this pipeline run
        run_cfg.setdefault("logger", {})["group"] = p.logger.group or default_group(p)
        jobs.append((run_cfg, sigma))
    points, decoded_by = [], {}
    # the σ points side by side (flexatt.parallel): each one's weights are those it gets alone
    for point, decoded in run_each(_point, jobs, parallel.jobs(p.train.threads)):
        points.append(point)
        decoded_by.update(decoded)
    drop_resume_state(sg.out_dir)

    best = max(points, key=lambda p: (p["dev_bleu"], -p["window"]))
    result = {"base_variant": base, "warm_start_epochs": epochs, "reference_tau": ref_tau,
              "points": points, "selected_sigma": best["sigma"], "decoded_by": decoded_by}
    write_json(out_file, result)
    write_csv(curve_file, points)
    figure = figures.sigma_curve(points, figure_file)

    tracker = start_run(p, "sweep_sigma", "sigma", tags=[base, p.profile])
    table = tracker.table("sweep_sigma/points", list(points[0]), [list(p.values()) for p in points])
    tracker.line_plot("sweep_sigma/bleu_plot", table, "sigma", "dev_bleu", "dev BLEU vs sigma")
    tracker.image("figures/sigma", figure)
    tracker.summary({"selected_sigma": best["sigma"]})
    tracker.config({"decoded_by": decoded_by})
    tracker.finish()
    print(f"sweep_sigma: selected sigma = {best['sigma']:g} (dev BLEU {best['dev_bleu']})")
    return result


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
