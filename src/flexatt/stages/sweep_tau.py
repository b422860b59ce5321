"""Stage ``sweep_tau``: choose flexible attention's threshold τ on dev; the trade-off curve.

For every model of ``sweep_tau.models`` (flexible and flexible+SACT, trained and fine-tuned):
decode dev at τ = ∞ and at every τ of ``sweep_tau.grid`` (plus τ = log S̄, the 2016 paper's
sweet spot, where ``add_log_mean_len``), then search between the largest τ below the smallest
passing one that fails the tolerance and that passing one: ``search_steps`` bisections on log τ
(:func:`search_points`; window and BLEU both grow with τ). Among every evaluated point, select
τ = the smallest mean window whose dev BLEU is within ``tolerance`` of the same model at τ = ∞
(:func:`flexatt.tau_search.select_tau`; docs/method.md, τ search).
Then the trade-off curve (Flexible Attention 2017, Figure 3): ``curve_model`` at
``curve_taus`` on ``curve_splits``, with global attention as the reference point.

Writes ``sweep_tau.out`` (JSON: every point and the selected τ per model), ``curve_file``
(CSV for ``dvc plots``), ``figure`` (PNG) and ``decodes``: the curve's decodes on
``evaluate.split`` (:func:`flexatt.points.write_decodes`), which the evaluate and compare stages
read instead of decoding them again; logs all of it to W&B.

Usage::

    python -m flexatt.stages.sweep_tau
    python -m flexatt.stages.sweep_tau sweep_tau.models=[flexible] sweep_tau.tolerance=1.0
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from flexatt import config as C
from flexatt import figures, schema
from flexatt.data.evalset import EvalSet
from flexatt.io import write_csv, write_json
from flexatt.points import Decoder, checkpoint_of, write_decodes
from flexatt.tau import INF, label, to_json
from flexatt.tau_search import dev_grid, log_mean_length, search_points, select_tau
from flexatt.tracking import start_run


def run(cfg: DictConfig | schema.Params) -> dict:
    p = schema.params(cfg)
    st = p.sweep_tau
    tok_dir, models, grid, tolerance, search_steps = p.train.data_dir, st.models, st.grid, st.tolerance, st.search_steps
    curve_model, curve_taus, curve_splits = st.curve_model, st.curve_taus, st.curve_splits
    add_log_mean_len, out_file, curve_file, figure_file = st.add_log_mean_len, st.out, Path(st.curve_file), st.figure
    for i, name in enumerate(models):
        checkpoint_of(p, name, f"sweep_tau.models[{i}]")
    checkpoint_of(p, curve_model, "sweep_tau.curve_model")
    if curve_splits:
        checkpoint_of(p, "global", "evaluate.checkpoints")  # the curve's reference point

    sets = {name: EvalSet.load(tok_dir, name) for name in {"dev", *curve_splits}}
    log_mean = log_mean_length(sets["dev"].mean_src_len)
    grid = dev_grid(grid, sets["dev"].mean_src_len, add_log_mean_len)
    decoder = Decoder(p, sets)
    tracker = start_run(p, "sweep_tau", "tau", tags=["flexible", p.profile])

    print(f"sweep_tau: dev mean source length {sets['dev'].mean_src_len:.2f} (log = {log_mean}); "
          f"grid {grid}; beam {decoder.options.beam_size}", flush=True)
    selection: dict[str, dict] = {}
    for name in models:
        reference = decoder.point(name, "dev", INF)
        points = search_points(lambda tau, name=name: decoder.point(name, "dev", tau), grid,
                               reference["bleu"], tolerance, search_steps)
        chosen = select_tau(points, reference["bleu"], tolerance)
        selection[name] = {
            "inf": reference,
            "points": points,
            "selected_tau": chosen["tau"] if chosen else INF,
            "selected": chosen,
        }
        print(f"sweep_tau: {name}: selected tau = {label(selection[name]['selected_tau'])}"
              + ("" if chosen else " (none kept the dev BLEU)"), flush=True)

    curve_rows = []
    for split in curve_splits:
        for tau in curve_taus:
            point = decoder.point(curve_model, split, tau)
            curve_rows.append({"model": curve_model, "split": split, **point})
        g = decoder.point("global", split, INF)
        curve_rows.append({"model": "global", "split": split, **g})

    result = {"log_mean_src_len": log_mean, "tolerance": tolerance, "grid": grid, "search_steps": search_steps,
              "beam_size": decoder.options.beam_size, "models": selection, "curve": curve_rows,
              "decoded_by": decoder.decoded_by}
    write_json(out_file, result)
    # the curve's decodes on the evaluated split, which evaluate and compare read instead of decoding again
    write_decodes(st.decodes, decoder, [curve_model, "global"], [s for s in curve_splits if s == p.evaluate.split])
    write_csv(curve_file, curve_rows, ["model", "split", "tau", "window", "bleu", "ms_per_sentence"])
    curves = {f"{curve_model} ({split})": [(r["tau"], r["window"], r["bleu"])
                                          for r in curve_rows
                                          if r["split"] == split and r["model"] == curve_model]
              for split in curve_splits}
    reference = {f"global ({r['split']})": (r["window"], r["bleu"]) for r in curve_rows if r["model"] == "global"}
    figure = figures.tradeoff(curves, figure_file, reference)

    tracker.records("sweep_tau/points", [{"model": name, "source": "reference", **p}
                                         for name, sel in selection.items() for p in [sel["inf"], *sel["points"]]],
                    ["model", "tau", "source", "window", "bleu"])
    curve_table = tracker.records("sweep_tau/curve", curve_rows, ["model", "split", "tau", "window", "bleu"])
    tracker.line_plot("sweep_tau/tradeoff_plot", curve_table, "window", "bleu", "BLEU vs mean window")
    tracker.image("figures/tradeoff", figure, "Figure 3: BLEU against mean window")
    tracker.summary({f"selected_tau/{k}": to_json(v["selected_tau"]) for k, v in selection.items()})
    tracker.config({"decoded_by": decoder.decoded_by})
    tracker.finish()
    return result


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
