"""Stage ``evaluate``: every model on the test set — Table 1, the metrics, the figures.

Rows: one per checkpoint of ``evaluate.checkpoints`` at τ = ∞, plus ``<row>_tau`` for each of
``evaluate.tau_rows`` at the τ that ``sweep_tau`` selected on dev. Per row: mean window (counted
in the scoring path; per sentence, then the mean over sentences, and the step-weighted mean),
reduction against global, BLEU (sacrebleu, KJV reference) with its 95% confidence interval and
the p-value against the row's reference row (sacrebleu's paired bootstrap resampling, Koehn
2004), multi-reference BLEU (with the second reference, where the corpus has one), chrF
(sacrebleu), tokenised BLEU (Moses tokenizer, then multi-bleu.perl semantics), RIBES (on the
same Moses tokens), AER of the attention's one-to-one word alignments under forced decoding of
the reference (Luong et al. 2015 §5.4; only target words that the gold covers count), decoding
time, BLEU by source length.

Reference rows of the significance test (:func:`reference_row`): every variant against global;
``<x>_tau`` against ``<x>`` (the same model at τ = ∞); a fine-tuned ``<x>_ft`` against ``<x>``
(global when that row is absent); global has none. Resampling: 1000 resamples
``evaluate.bootstrap_samples`` resamples (1000), seeded with ``evaluate.bootstrap_seed``.

Writes ``evaluate.out`` (``{"models": {ROW: {...}}, "selected_tau": {...}, "significance": {...}}``;
per row ``bleu_ci`` [low, high], ``p_value``, ``p_value_against``), ``evaluate.table``
(markdown in the layout of the 2017 paper's Table 1), ``by_length_file`` (CSV for ``dvc plots``)
and the figures (vision span per step, g_t per step, SACT temperature per step, attention
heatmaps with the window, BLEU by length) under ``figures_dir``; logs everything to W&B.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Collection
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from flexatt import config as C
from flexatt import figures, schema
from flexatt.data.subwords import EOS_ID
from flexatt.errors import DataError
from flexatt.checkpoints import load_model
from flexatt.data.evalset import EvalSet
from flexatt.decoding.translate import Translation
from flexatt.io import atomic_path, read_lines, write_csv, write_json, write_lines
from flexatt.points import (Decoder, checkpoint_of, decode_options, load_decodes, sample_traces, translation_of,
                             write_decodes)
from flexatt.rows import Row
from flexatt.tau import INF, from_json
from flexatt.tau import label as tau_label
from flexatt.metrics import (
    aer,
    bleu_by_length,
    bleu_significance,
    corpus_bleu,
    corpus_chrf,
    corpus_ribes,
    moses_tokenize,
    tokenized_bleu,
)
from flexatt.decoding.alignments import forced_alignments, read_gold
from flexatt.claims import claim_rows, holm, not_selected, repeats_inf
from flexatt.stopping import BUDGET, CAP, run_summary
from flexatt.tracking import start_run

TABLE_ORDER = ["global", "local_m", "local_p", "flexible", "flexible_tau", "flexible_ft",
               "flexible_ft_tau", "flexible_ctl", "flexible_ctl_tau", "sact", "flexible_sact",
               "flexible_sact_tau", "flexible_sact_ft", "flexible_sact_ft_tau", "flexible_sact_ctl",
               "flexible_sact_ctl_tau"]
TABLE_LABELS = {
    "global": "Global", "flexible": "Flexible τ=∞", "flexible_tau": "Flexible τ={tau}",
    "flexible_ft": "Flexible + fine-tuning τ=∞", "flexible_ft_tau": "Flexible + fine-tuning τ={tau}",
    "flexible_ctl": "Flexible + control (β=0) τ=∞", "flexible_ctl_tau": "Flexible + control (β=0) τ={tau}",
    "sact": "SACT (λ={lam})", "flexible_sact": "Flexible+SACT τ=∞",
    "flexible_sact_tau": "Flexible+SACT τ={tau}", "flexible_sact_ft": "Flexible+SACT + fine-tuning τ=∞",
    "flexible_sact_ft_tau": "Flexible+SACT + fine-tuning τ={tau}",
    "flexible_sact_ctl": "Flexible+SACT + control (β=0) τ=∞",
    "flexible_sact_ctl_tau": "Flexible+SACT + control (β=0) τ={tau}",
}
#: the label of a row of a local variant (any D): its attention names it
LOCAL_LABELS = {"local_m": "Local-m (D={D})", "local_p": "Local-p (D={D})"}


#: p-values below this are marked in Table 1.
SIGNIFICANCE_LEVEL = 0.05


def score_row(out: Translation, data: EvalSet, lang: str, ref_tok: list[str] | None = None) -> dict:
    """The text metrics of one row: window, BLEU, chrF, tokenised BLEU, RIBES, decoding time.

    ``bleu`` / ``chrf``: sacrebleu on the detokenised text (Post 2018), KJV reference.
    ``bleu_tok``: the papers' tokenised BLEU (Luong et al. 2015; Shu & Nakayama) — both sides
    Moses-tokenised for the target language ``lang`` (:func:`flexatt.metrics.moses_tokenize`),
    then multi-bleu.perl semantics on those tokens (:func:`flexatt.metrics.tokenized_bleu`).
    ``ribes``: RIBES.py on the same Moses tokens. ``window``: positions scored per decoding step,
    per sentence then averaged over sentences; ``window_step_weighted``: the mean over all
    (step, hypothesis) pairs of the split (docs/method.md, Window). ``ref_tok``: the references
    already Moses-tokenised (the same for every row), computed here when not given.
    """
    bleu, signature = corpus_bleu(out.hypotheses, [data.references])
    chrf, chrf_signature = corpus_chrf(out.hypotheses, [data.references])
    hyp_tok = moses_tokenize(out.hypotheses, lang)
    if ref_tok is None:
        ref_tok = moses_tokenize(data.references, lang)
    row = {
        "window": round(out.mean_window, 3),
        "window_step_weighted": round(out.step_weighted_window, 3),
        "bleu": round(bleu, 2),
        "chrf": round(chrf, 2),
        "bleu_tok": round(tokenized_bleu(hyp_tok, [ref_tok])[0], 2),
        "ribes": round(corpus_ribes(hyp_tok, ref_tok), 4),
        "decode_ms": round(out.ms_per_sentence, 2),
        "bleu_signature": signature,
        "chrf_signature": chrf_signature,
    }
    if data.second_references is not None:
        row["bleu_multi"] = round(corpus_bleu(out.hypotheses, [data.references, data.second_references])[0], 2)
    return row


def reference_row(row: str, rows: Collection[str]) -> str | None:
    """The row whose BLEU ``row`` is tested against (the p-value of Table 1):
    :meth:`flexatt.rows.Row.reference`."""
    return Row.of(row).reference(rows)


def tau_of(row: str, selected: dict[str, float], sweep_file: Path) -> float:
    """The τ of the row ``<row>_tau``: the one ``sweep_tau`` selected for its own model
    (:attr:`flexatt.rows.Row.model`), a control's too: a fine-tuning and its control are
    compared each at its own selected τ.

    Raises:
        DataError: ``sweep_file`` has no selected τ for that model.
    """
    source = Row.of(row).model
    if source not in selected:
        raise DataError(sweep_file, f"has no selected tau for {source} (add it to sweep_tau.models)")
    return selected[source]


def finetuning_effect(results: dict[str, dict], hypotheses: dict[str, list[str]], references: list[str],
                      n_samples: int, seed: int) -> dict[str, dict]:
    """Fine-tuned minus control, per fine-tuned model ``<x>_ft`` whose control ``<x>_ctl`` is
    evaluated: at τ = ∞ and, where both have a ``_tau`` row, each at its own selected τ
    (:func:`tau_of`; a model without one at τ = ∞; where neither has one, the ``_tau`` rows are
    the τ = ∞ rows again and are not compared twice, :func:`flexatt.claims.repeats_inf`). Per
    comparison: ``tau`` and ``tau_control`` (each model's τ), ``bleu``, ``g_mean`` and ``window``
    differences and the paired bootstrap p-value of the BLEU difference
    (:func:`flexatt.metrics.bleu_significance`, the resamples of Table 1)."""
    pairs = {}
    for row in map(Row.of, results):
        control = row.sibling("control")
        if row.kind != "finetuned" or row.at_tau or control.id not in results:
            continue
        pairs[row.id] = control.id
        at_tau, control_at_tau = row.sibling("finetuned", True), control.sibling("control", True)
        if {at_tau.id, control_at_tau.id} <= set(results) and not repeats_inf(at_tau.id, control_at_tau.id, results):
            pairs[at_tau.id] = control_at_tau.id
    if not pairs:
        return {}
    names = [*pairs, *pairs.values()]
    tests = bleu_significance({n: hypotheses[n] for n in names}, [references],
                              {**{ft: ctl for ft, ctl in pairs.items()}, **{ctl: None for ctl in pairs.values()}},
                              n_samples=n_samples, seed=seed)
    effect = {}
    for ft, ctl in pairs.items():
        a, b = results[ft], results[ctl]
        diff = lambda k: None if a.get(k) is None or b.get(k) is None else round(a[k] - b[k], 4)  # noqa: E731
        effect[ft] = {"control": ctl, "tau": a["tau"], "tau_control": b["tau"], "bleu": diff("bleu"),
                      "g_mean": diff("g_mean"), "window": diff("window"), "p_value": tests[ft]["p_value"]}
    return effect


def run(cfg: DictConfig | schema.Params) -> dict:
    """The stage: every row decoded and scored (:func:`decode_rows`), tested
    (:func:`add_significance`), then written (:func:`publish`); returns the report."""
    p = schema.params(cfg)
    ev = p.evaluate
    tok_dir, filter_dir, split = Path(p.train.data_dir), Path(p.tokenize.in_dir), ev.split
    checkpoints = {name: checkpoint_of(p, name, "evaluate.checkpoints") for name in ev.checkpoints}
    sweep_file = Path(p.sweep_tau.out)
    if not sweep_file.is_file():
        raise DataError(sweep_file, "not found (run the sweep_tau stage first)")
    selected = {name: info["selected_tau"]
                for name, info in from_json(json.loads(sweep_file.read_text()))["models"].items()}
    rows = [(name, name, INF) for name in ev.checkpoints]
    rows += [(f"{name}_tau", name, tau_of(name, selected, sweep_file)) for name in ev.tau_rows]
    data = EvalSet.load(tok_dir, split)
    tracker = start_run(p, "evaluate", split, tags=[p.profile])
    results, outputs, histograms = decode_rows(p, rows, checkpoints, data, filter_dir)
    bootstrap = add_significance(results, outputs, data, ev.bootstrap_samples, ev.bootstrap_seed)
    effect = finetuning_effect(results, {row: out.hypotheses for row, out in outputs.items()}, data.references,
                               ev.bootstrap_samples, ev.bootstrap_seed)
    report = {"split": split, "beam_size": p.decode.beam_size, "selected_tau": selected,
              "significance": bootstrap, "finetuning_effect": effect,
              "models": {row: {k: v for k, v in m.items() if k != "bleu_by_length"} for row, m in results.items()}}
    table = render_table(results, p, split, p.decode.beam_size, bootstrap, effect)
    publish(p, report, table, results, outputs, histograms, data, read_lines(filter_dir / f"{split}.src"), tracker)
    print(table)
    return report


def decode_rows(p: schema.Params, rows: list[tuple[str, str, float]], checkpoints: dict[str, Path], data: EvalSet,
                filter_dir: Path) -> tuple[dict[str, dict], dict[str, Translation], dict[str, np.ndarray]]:
    """Each row ``(row, checkpoint row, τ)`` on the split (``checkpoints``: row -> file) scored
    (BLEU, chrF, tok. BLEU, RIBES, AER where there are gold links, BLEU by source length, g_t and
    SACT temperature means), its translations written to ``evaluate.translations_dir``, every
    decode to ``evaluate.decodes`` (for compare). A decode that ``sweep_tau`` made (its curve,
    ``sweep_tau.decodes``) is read, not made again; the traces of ``evaluate.samples`` come from
    decoding those sentences on their own (:func:`flexatt.points.sample_traces`). Returns the
    rows' metrics, their translations and the g_t / temperature values (``<row>/g``) for the
    histograms."""
    ev, options = p.evaluate, decode_options(p)
    runs = {name: run_summary(path) for name, path in checkpoints.items()}
    src_words = [len(s.split(" ")) for s in read_lines(filter_dir / f"{ev.split}.src")]
    gold = read_gold(filter_dir / f"{ev.split}.align", len(data.split))
    samples = {s for s in ev.samples if 0 <= s < len(data.split)}
    ref_tok = moses_tokenize(data.references, p.data.tgt_lang)  # tok. BLEU and RIBES, every row
    decoder = Decoder(p, {ev.split: data}, key="evaluate.checkpoints")
    load_decodes(decoder, p.sweep_tau.decodes, "evaluate")
    results: dict[str, dict] = {}
    outputs: dict[str, Translation] = {}
    histograms: dict[str, np.ndarray] = {}
    for row, name, tau in rows:
        if name not in decoder.models:
            decoder.use(name, load_model(checkpoints[name]))
        model = decoder.models[name]
        out = translation_of(decoder.record(name, ev.split, tau))
        out.traces = sample_traces(model, data, options.at(tau), samples, out.hypotheses)
        outputs[row] = out
        metrics = {"tau": tau, **score_row(out, data, p.data.tgt_lang, ref_tok), "decoded_by": out.decoded_by,
                   "training": runs[name]}
        if gold is not None:
            links, g_values, temperatures = forced_alignments(model, data, tau, options.batch_size, options.backend)
            metrics["aer"] = round(aer(links, gold, restrict_to_covered=True), 4)
        else:
            g_values = temperatures = None
            metrics["aer"] = None
        for key, values in (("g", g_values), ("temperature", temperatures)):
            if values is not None:
                histograms[f"{row}/{key}"] = values
                metrics[f"{key}_mean"] = round(float(values.mean()), 4)
        metrics["bleu_by_length"] = bleu_by_length(out.hypotheses, [data.references], src_words,
                                                   tuple(ev.length_buckets))
        results[row] = metrics
        write_lines(Path(ev.translations_dir) / f"{row}.{ev.split}.txt", out.hypotheses)
        print(f"evaluate: {row:22s} window {metrics['window']:7.2f}  BLEU {metrics['bleu']:6.2f}  "
              f"chrF {metrics['chrf']:6.2f}  RIBES {metrics['ribes']:.4f}  AER {metrics['aer']}  "
              f"{metrics['decode_ms']:.1f} ms/sentence", flush=True)
    write_decodes(ev.decodes, decoder, sorted({name for _, name, _ in rows}), [ev.split])
    global_window = results["global"]["window"]
    for metrics in results.values():
        metrics["reduction"] = round(1.0 - metrics["window"] / global_window, 4)
    return results, outputs, histograms


def add_significance(results: dict[str, dict], outputs: dict[str, Translation], data: EvalSet, n_samples: int,
                     seed: int) -> dict:
    """Each row's 95% BLEU interval and, against its reference row (:func:`reference_row`), the
    paired bootstrap p-value, Holm-adjusted over the table (added to ``results``); returns what
    the test was. A τ row decoded at τ = ∞ (no τ selected) is its reference row again: no test,
    no place in the Holm family, only its interval."""
    started = time.perf_counter()
    against = {row: None if not_selected(row, results) else reference_row(row, outputs) for row in outputs}
    significance = bleu_significance({row: out.hypotheses for row, out in outputs.items()},
                                     [data.references], against, n_samples=n_samples, seed=seed)
    for row, fields in significance.items():
        results[row].update(fields)
    for row, p_holm in holm({r: m["p_value"] for r, m in results.items() if m.get("p_value") is not None}).items():
        results[row]["p_value_holm"] = round(p_holm, 4)
    print(f"evaluate: BLEU confidence intervals and p-values ({len(outputs)} rows, {n_samples} "
          f"resamples) in {time.perf_counter() - started:.1f} s", flush=True)
    return {"test": "paired bootstrap resampling (sacrebleu.significance.PairedTest, test_type='bs')",
            "metric": "bleu", "n_samples": n_samples, "seed": seed, "level": SIGNIFICANCE_LEVEL}


def publish(p: schema.Params, report: dict, table: str, results: dict[str, dict], outputs: dict[str, Translation],
            histograms: dict[str, np.ndarray], data: EvalSet, src_text: list[str], tracker) -> None:
    """The report as files (``evaluate.out``, Table 1, BLEU by length, the figures) and on the
    run's dashboard (Table 1, BLEU by length of the rows the claims compare, samples, histograms,
    figures)."""
    ev = p.evaluate
    write_json(ev.out, report)
    with atomic_path(ev.table) as tmp:
        Path(tmp).write_text(table, encoding="utf-8")
    by_length = [{"model": row, **b} for row, m in results.items() for b in m["bleu_by_length"]]
    write_csv(ev.by_length_file, by_length, ["model", "bucket", "sentences", "bleu"])
    samples = [s for s in ev.samples if 0 <= s < len(data.split)]
    paths = draw_figures(p, results, outputs, data, samples)
    tracker.config({"decoded_by": {row: m["decoded_by"] for row, m in results.items()}})
    tracker.records("evaluate/table1", [{"row": r, **m, "bleu_ci_low": m["bleu_ci"][0], "bleu_ci_high": m["bleu_ci"][1],
                                         "backend": m["decoded_by"]["backend"]} for r, m in results.items()],
                    ["row", "tau", "window", "window_step_weighted", "reduction", "bleu", "bleu_ci_low",
                     "bleu_ci_high", "p_value", "p_value_against", "chrf", "bleu_tok", "ribes", "aer", "decode_ms",
                     "backend"])
    claimed = set(claim_rows())
    tracker.records("evaluate/bleu_by_length", [b for b in by_length if b["model"] in claimed],
                    ["model", "bucket", "sentences", "bleu"])
    best_tau_row = next((r for r in ("flexible_ft_tau", "flexible_tau") if r in outputs), None)
    if best_tau_row:
        out = outputs[best_tau_row]
        tracker.table("evaluate/samples", ["index", "source", "hypothesis", "reference", "windows"],
                      [[i, src_text[i], out.hypotheses[i], data.references[i],
                        json.dumps(out.traces[i].window.tolist())] for i in samples if i in out.traces])
    for key, values in histograms.items():
        tracker.histogram(f"histograms/{key}", values)
    for key, path in paths.items():
        tracker.image(f"figures/{key}", path)
    tracker.summary({f"{row}/{k}": v for row, m in report["models"].items() for k, v in m.items()
                     if isinstance(v, (int, float))})
    tracker.finish()


def _timing(m: dict) -> str:
    """The timing cell: ms per sentence and the backend that decoded the row."""
    by = m.get("decoded_by") or {}
    return f"{m['decode_ms']:.1f} ({by['backend']})" if by.get("backend") else f"{m['decode_ms']:.1f}"


def _row_models(cfg: DictConfig | schema.Params) -> tuple[schema.Model, dict[str, schema.Model]]:
    """``model`` and the whole model of every variant (``variants`` may be absent from ``cfg``)."""
    model = schema.group(cfg, "model")
    has_variants = isinstance(cfg, schema.Params) or (OmegaConf.select(cfg, "variants") if OmegaConf.is_config(cfg)
                                                      else cfg.get("variants"))
    variants = schema.group(cfg, "variants") if has_variants else {}
    return model, {name: schema.Model.model_validate({**model.model_dump(), **o.model_dump(exclude_unset=True)})
                   for name, o in variants.items()}


def _row_label(row: str, m: dict, model: schema.Model, variants: dict[str, schema.Model]) -> str:
    """The row's label; a variant's own model settings fill it in (D of a local window, λ)."""
    own = variants.get(row, model)
    label = TABLE_LABELS.get(row) or LOCAL_LABELS.get(own.attention if row in variants else row, row)
    return label.format(D=own.local_D, lam=own.sact_lambda,
                        tau="∞ (none selected*)" if math.isinf(m["tau"]) else tau_label(m["tau"]))


def _training(m: dict) -> str:
    """The training cell: epochs run (best epoch), ‡ where the run stopped at its cap."""
    t = m.get("training")
    if not t:
        return "–"
    return f"{t['epochs']} ({t['best_epoch']})" + ("‡" if t["stopped"] == CAP else "")


def render_table(results: dict[str, dict], cfg: DictConfig | schema.Params, split: str, beam: int,
                 significance: dict | None = None, effect: dict | None = None) -> str:
    """Markdown in the layout of the 2017 paper's Table 1, with our extra rows.

    BLEU reads ``12.34 ± 0.56``: the score and the half-width of its 95% bootstrap confidence
    interval (``bleu_ci``), with † when its p-value against the row's reference row
    (``p_value_against``) is below :data:`SIGNIFICANCE_LEVEL`; a footnote names the references.
    ``significance`` describes the test (``n_samples``, ``seed``) for that footnote. Rows
    without ``bleu_ci`` show the plain score. The column "epochs (best)" tells how each model's
    training ended (:func:`flexatt.stopping.run_summary`), ‡ where it stopped at its cap.
    ``effect`` (:func:`finetuning_effect`) adds the table of fine-tuned minus control.
    """
    model, variants = _row_models(cfg)
    has_multi = any("bleu_multi" in m for m in results.values())
    head = "| model | window | reduction | BLEU | " + ("multi-ref BLEU | " if has_multi else "") + \
        "chrF | tok. BLEU | RIBES | AER | epochs (best) | ms/sentence (backend) |"
    lines = [f"# Table 1 — {split} set, beam {beam}", "",
             "Window: source positions scored per decoding step, per sentence then averaged over sentences "
             "(docs/method.md, Window); reduction against Global.", "",
             head, "|" + "---|" * (head.count("|") - 1)]
    order = [r for r in TABLE_ORDER if r in results] + [r for r in results if r not in TABLE_ORDER]
    labels = {row: _row_label(row, results[row], model, variants) for row in order}
    marked: dict[str, list[str]] = {}  # reference row -> rows significantly different from it
    adjusted = holm({r: results[r]["p_value"] for r in order if results[r].get("p_value") is not None})
    for row in order:
        m = results[row]
        bleu = f"{m['bleu']:.2f}"
        if m.get("bleu_ci") is not None:
            low, high = m["bleu_ci"]
            bleu += f" ± {(high - low) / 2:.2f}"
        if row in adjusted and adjusted[row] < SIGNIFICANCE_LEVEL:
            bleu += "†"
            marked.setdefault(m["p_value_against"], []).append(row)
        cells = [labels[row], f"{m['window']:.1f}", f"{int(round(100 * m['reduction'])) + 0}%", bleu]
        if has_multi:
            cells.append(f"{m.get('bleu_multi', float('nan')):.2f}")
        cells += [f"{m['chrf']:.2f}" if "chrf" in m else "–", f"{m['bleu_tok']:.2f}", f"{m['ribes']:.3f}",
                  "–" if m["aer"] is None else f"{m['aer']:.3f}", _training(m), _timing(m)]
        lines.append("| " + " | ".join(cells) + " |")
    first = next(iter(results.values()))
    capped = [m for m in results.values() if (m.get("training") or {}).get("stopped") != BUDGET]
    lines += ["", "Rows `…τ=x` use the τ that `sweep_tau` selected on dev: the smallest mean window whose "
              "dev BLEU stays within the tolerance of the same model at τ = ∞. *None selected: no τ of "
              "the grid kept dev BLEU within the tolerance, so the row decodes at τ = ∞. A control "
              "(β=0: the fine-tuning's parent, epochs and learning rate without the g-term) decodes at its "
              "own selected τ, as every model does.",
              "Epochs (best): epochs trained (the epoch of the best dev BLEU, the checkpoint evaluated); for a "
              "fine-tuned model or a control, the extra epochs. ‡ stopped at the cap on epochs, not by the "
              "stopping rule: the model may still have been improving. A control trains as many epochs as "
              "its fine-tuning, by design (no ‡)."
              + (" Every row trained by the stopping rule reached its cap."
                 if capped and all(_training(m).endswith("‡") for m in capped) else ""),
              f"BLEU: sacrebleu ({first['bleu_signature']})"
              + (f"; chrF: sacrebleu ({first['chrf_signature']})" if "chrf_signature" in first else "")
              + "; tok. BLEU: Moses tokenizer (sacremoses, target language, no escaping), then "
              "multi-bleu.perl semantics; RIBES: NTT RIBES.py definition on the same Moses tokens; AER: "
              "one-to-one word links (attention summed over each word's subword pieces, argmax source word "
              "per target word) under forced decoding, only target words the gold covers."]
    if any(m.get("bleu_ci") is not None for m in results.values()):
        test = "sacrebleu's paired bootstrap resampling"
        if significance:
            test += f" ({significance['n_samples']} resamples, seed {significance['seed']})"
        refs = "; ".join(f"{labels.get(ref, ref)} for {', '.join(labels[r] for r in rows)}"
                         for ref, rows in marked.items())
        lines.append(f"BLEU ± half-width of its 95% confidence interval, {test}. † Holm-adjusted p < "
                     f"{SIGNIFICANCE_LEVEL:g} (Holm–Bonferroni over the table's {len(adjusted)} comparisons) "
                     "against the row's reference: Global for the "
                     "variants, the same model at τ = ∞ for the τ rows, the control for the fine-tuned ones "
                     "(the base model where no control is evaluated), the base model for the controls. "
                     + (f"Marked: {refs}." if refs else "No row is marked."))
    if effect:
        lines += ["", "## Fine-tuning against its control", "",
                  "Fine-tuned minus control (the same parent, extra epochs and learning rate, β = 0), at τ = ∞ "
                  "and each at its own selected τ: what the g-term of eq. 9 does beyond the extra training. p: "
                  "paired bootstrap p of the BLEU difference, not adjusted for the number of tests "
                  "(results/compare.md gives it Holm-adjusted).", "",
                  "| fine-tuned row | τ (fine-tuned / control) | Δ BLEU | p (unadjusted) | Δ mean g_t | Δ window |",
                  "|---|---|---|---|---|---|"]
        fmt = lambda v, spec: "–" if v is None else format(v, spec)  # noqa: E731
        for row, e in effect.items():
            taus = f"{tau_label(e['tau'])} / {tau_label(e['tau_control'])}"
            lines.append(f"| {labels.get(row, row)} | {taus} | {fmt(e['bleu'], '+.2f')} | {fmt(e['p_value'], '.3f')} "
                         f"| {fmt(e['g_mean'], '+.4f')} | {fmt(e['window'], '+.2f')} |")
    return "\n".join(lines) + "\n"


def draw_figures(cfg: DictConfig | schema.Params, results: dict, outputs: dict[str, Translation], data: EvalSet,
                 samples: list[int]) -> dict[str, Path]:
    """The per-step figures of the sample sentences, and BLEU by length."""
    fig_dir = Path(schema.group(cfg, "evaluate").figures_dir)
    paths = {"bleu_by_length": figures.bleu_by_length(
        {r: m["bleu_by_length"] for r, m in results.items()}, fig_dir / "bleu_by_length.png")}
    span_row = next((r for r in ("flexible_ft_tau", "flexible_tau", "flexible_sact_ft_tau", "flexible_sact_tau")
                     if r in outputs and not math.isinf(results[r]["tau"])),
                    next((r for r in ("flexible_ft", "flexible") if r in outputs), None))
    if span_row and samples:
        traces = []
        for i in samples:
            tr = outputs[span_row].traces[i]
            traces.append({"span_lo": tr.span_lo.numpy(), "span_hi": tr.span_hi.numpy(),
                           "position": tr.position.numpy(), "src_len": int(data.split.src_lengths[i]) + 1,
                           "title": f"{span_row}, test sentence {i}: mean window {tr.window.float().mean():.1f}"})
        paths["vision_span"] = figures.vision_span(traces, fig_dir / "vision_span.png")
        i = samples[0]
        tr = outputs[span_row].traces[i]
        src_tokens = [data.src_vocab.sp.id_to_piece(int(t)) for t in data.split.src(i)] + ["</s>"]
        tgt_tokens = [data.tgt_vocab.sp.id_to_piece(int(t)) if int(t) != EOS_ID else "</s>" for t in tr.tokens]
        paths["attention"] = figures.attention_heatmap(
            tr.attention.numpy(), src_tokens, tgt_tokens, tr.span_lo.numpy(), tr.span_hi.numpy(),
            fig_dir / "attention.png", f"{span_row}: attention, scored window outlined (sentence {i})")
        if "global" in outputs and i in outputs["global"].traces:
            g = outputs["global"].traces[i]
            paths["attention_global"] = figures.attention_heatmap(
                g.attention.numpy(), src_tokens,
                [data.tgt_vocab.sp.id_to_piece(int(t)) if int(t) != EOS_ID else "</s>" for t in g.tokens],
                g.span_lo.numpy(), g.span_hi.numpy(), fig_dir / "attention_global.png",
                f"global: attention (sentence {i})")
    if samples:
        i = samples[0]
        g_series = {r: outputs[r].traces[i].g.numpy() for r in outputs
                    if i in outputs[r].traces and outputs[r].traces[i].g is not None}
        if g_series:
            paths["g"] = figures.step_curves(g_series, fig_dir / "g_per_step.png", "g_t",
                                             f"Penalty strength g_t per step (test sentence {i})")
        t_series = {r: outputs[r].traces[i].temperature.numpy() for r in outputs
                    if i in outputs[r].traces and outputs[r].traces[i].temperature is not None}
        if t_series:
            lam = schema.group(cfg, "model").sact_lambda
            paths["temperature"] = figures.step_curves(
                t_series, fig_dir / "temperature_per_step.png", "temperature",
                f"SACT temperature per step (test sentence {i}; bounds 1/λ, λ)", hlines=(1 / lam, 1.0, lam))
    return paths


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
