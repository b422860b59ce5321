"""A Transformer profile's units against the RNN profile whose data they read (``grc_tf`` against
``grc``): per model and training seed, the test BLEU each architecture reaches at its own budget
and the dev BLEU each had reached after the same training minutes, from the units' products alone
(``unit.json`` and the learning curve ``curve.csv``: each epoch's training seconds and greedy dev
BLEU; no checkpoint).

Equal minutes: for a pair of units (same model, same training seed), ``M`` is the shorter of the
two trainings (the sum of its epochs' training seconds; the dev decoding after each epoch is not
counted), and each side's dev BLEU at ``M`` is that of its last epoch finished within ``M``
minutes (:func:`bleu_at`). Minutes compare only where both units trained on one kind of machine
(:func:`trained_on`: the same CPU model, precision and threads, each unit's ``unit.json``): units
run in different places (the CPU model, its native bf16 and so the precision change between them)
are shown with their own minutes and without the equal-minutes figures; the speed of the two
architectures on one machine is ``benchmarks/transformer_speed.py``'s.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any, Optional

from flexatt.products import Unit

#: the models compared across the two architectures, where both profiles have them
MODELS = ("global", "flexible")


def base_profile(profile: str, tok_dir: str | os.PathLike) -> str | None:
    """The long profile whose tokenised data ``profile`` reads (``tok_dir`` is
    ``artifacts/<base>/tok`` with ``<base>`` another profile: a Transformer profile's RNN profile),
    else None."""
    parts = Path(tok_dir).parts
    if len(parts) == 3 and parts[0] == "artifacts" and parts[2] == "tok" and parts[1] != profile:
        return parts[1]
    return None


def minutes_curve(folder: str | Path) -> list[tuple[float, float]]:
    """``(minutes trained by the end of the epoch, dev BLEU after it)`` per epoch of the unit in
    ``folder`` (its ``curve.csv``)."""
    with open(Path(folder) / "curve.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out, total = [], 0.0
    for row in rows:
        total += float(row["train_seconds"]) / 60
        out.append((total, float(row["val_bleu"])))
    return out


def bleu_at(curve: list[tuple[float, float]], minutes: float) -> Optional[float]:
    """The dev BLEU of the last epoch finished within ``minutes`` (None: none was)."""
    done = [bleu for at, bleu in curve if at <= minutes + 1e-9]
    return done[-1] if done else None


def trained_on(manifest: dict) -> Optional[dict]:
    """Where a unit's model was trained: CPU model, whether it has native bf16 (None where the unit
    does not record it), precision and threads; None where the unit did not train its model (it
    only decoded one an earlier run trained: its curve's minutes come from elsewhere)."""
    if not manifest.get("minutes", {}).get("train"):
        return None
    machine, training = manifest.get("machine", {}), manifest.get("training", {})
    return {"cpu": machine.get("cpu"), "bf16": machine.get("bf16_native"), "precision": training.get("precision"),
            "threads": training.get("threads")}


def same_machine(a: Optional[dict], b: Optional[dict]) -> bool:
    """Whether two units trained on one kind of machine (:func:`trained_on`): the same CPU model,
    precision and threads, and native bf16 alike where both record it."""
    if a is None or b is None:
        return False
    same = all(a[k] == b[k] for k in ("cpu", "precision", "threads"))
    return same and (a["bf16"] == b["bf16"] or None in (a["bf16"], b["bf16"]))


def describe(where: Optional[dict]) -> str:
    """:func:`trained_on` in words."""
    if where is None:
        return "elsewhere (it only decoded)"
    bf16 = "" if where["bf16"] is None else (", native bf16" if where["bf16"] else ", no native bf16")
    return f"{where['cpu']}{bf16}, {where['precision']}, {where['threads']} threads"


def compare(ours: str | Path, theirs: str | Path, ours_manifests: dict[str, dict],
            theirs_manifests: dict[str, dict], models: tuple[str, ...] = MODELS) -> list[dict[str, Any]]:
    """Per model of ``models`` and training seed finished in both units folders (``ours``: the
    Transformer's, ``theirs``: the RNN's; their manifests by unit name, as
    :func:`flexatt.products.done_units` reads them): epochs, training minutes, test BLEU at τ = ∞
    (each at its own budget), where each trained (:func:`trained_on`) and, where that is one kind
    of machine, the equal minutes and each side's dev BLEU at them (else None)."""
    rows = []
    for model in models:
        seeds = sorted({m["seed"] for n, m in ours_manifests.items() if n == Unit(model, m["seed"]).name}
                       & {m["seed"] for n, m in theirs_manifests.items() if n == Unit(model, m["seed"]).name})
        for seed in seeds:
            name = Unit(model, seed).name
            a, b = ours_manifests[name], theirs_manifests[name]
            ca, cb = minutes_curve(Path(ours) / name), minutes_curve(Path(theirs) / name)
            where = [trained_on(a), trained_on(b)]
            equal = min(ca[-1][0], cb[-1][0]) if same_machine(*where) else None
            rows.append({"model": model, "seed": seed, "epochs": [len(ca), len(cb)],
                         "minutes": [round(ca[-1][0], 1), round(cb[-1][0], 1)],
                         "test_bleu": [a["summary"]["test"]["inf"]["bleu"], b["summary"]["test"]["inf"]["bleu"]],
                         "machines": [describe(w) for w in where], "equal_minutes": None if equal is None else round(equal, 1),
                         "dev_bleu_at_equal": [None, None] if equal is None else [bleu_at(ca, equal), bleu_at(cb, equal)]})
    return rows


#: the columns of the comparison as a W&B table (:func:`records`)
COLUMNS = ["profile", "against", "model", "seed", "epochs", "epochs_against", "minutes", "minutes_against",
           "test_bleu", "test_bleu_against", "machine", "machine_against", "equal_minutes", "dev_bleu_at_equal",
           "dev_bleu_at_equal_against"]


def records(profile: str, against: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The comparison's rows (:func:`compare`) as flat table rows (:data:`COLUMNS`): each pair's
    figures for ``profile`` and, suffixed ``_against``, for the profile it is compared with."""
    out = []
    for r in rows:
        flat = {"profile": profile, "against": against, "model": r["model"], "seed": r["seed"],
                "equal_minutes": r["equal_minutes"]}
        for key in ("epochs", "minutes", "test_bleu", "dev_bleu_at_equal"):
            flat[key], flat[f"{key}_against"] = r[key]
        flat["machine"], flat["machine_against"] = r["machines"]
        out.append(flat)
    return out


def centres(manifests: dict[str, dict]) -> list[dict[str, Any]]:
    """The two centres of flexible cross-attention side by side (the query's, local-p style, and
    the layer below's expected position; docs/method.md, Transformer), per training seed at which
    a flexible unit of each trained for the budget: dev BLEU at τ = ∞, the dev-selected τ with its
    window and BLEU on dev, and test BLEU at τ = ∞ and at that τ with its window. The centre is
    chosen on dev: :func:`centre_on_dev`."""
    by_seed: dict[int, dict[str, str]] = {}
    for name, m in manifests.items():
        model = m.get("model", {})
        if model.get("attention") != "flexible" or m.get("kind", "train") != "train" or m.get("budget", 1.0) != 1.0:
            continue
        by_seed.setdefault(m["seed"], {})[model.get("centre", "query")] = name
    rows = []
    for seed in sorted(by_seed):
        if not {"query", "below"} <= set(by_seed[seed]):
            continue
        row: dict[str, Any] = {"seed": seed}
        for centre in ("query", "below"):
            name = by_seed[seed][centre]
            dev, test = manifests[name]["summary"]["dev"], manifests[name]["summary"]["test"]
            row[centre] = {"unit": name, "dev_bleu_inf": dev["inf"]["bleu"], "tau": dev["selected"]["tau"],
                           "dev_window": dev["selected"]["window"], "dev_bleu": dev["selected"]["bleu"],
                           "test_bleu_inf": test["inf"]["bleu"], "test_window": test["selected"]["window"],
                           "test_bleu": test["selected"]["bleu"]}
        rows.append(row)
    return rows


def centre_on_dev(rows: list[dict[str, Any]]) -> Optional[str]:
    """The centre the dev set chooses: the higher mean dev BLEU at the selected τ over the seeds
    compared (each model's τ is already its smallest window within the tolerance of its τ = ∞);
    at equal BLEU (to 0.01), the smaller mean dev window. None without a pair."""
    if not rows:
        return None
    def mean(centre: str, key: str) -> float:
        return sum(r[centre][key] for r in rows) / len(rows)

    bleu = {c: round(mean(c, "dev_bleu"), 2) for c in ("query", "below")}
    if bleu["query"] != bleu["below"]:
        return max(bleu, key=bleu.get)
    return min(("query", "below"), key=lambda c: mean(c, "dev_window"))


def render_centres(rows: list[dict[str, Any]]) -> str:
    """The centres side by side as a Markdown table, with the dev set's choice (empty without rows)."""
    if not rows:
        return ""
    lines = ["| seed | centre | unit | dev BLEU τ = ∞ | selected τ | dev window | dev BLEU | test BLEU τ = ∞ | "
             "test window | test BLEU |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for centre in ("query", "below"):
            c = r[centre]
            tau = "∞" if c["tau"] is None or math.isinf(float(c["tau"])) else f"{float(c['tau']):g}"
            lines.append(f"| {r['seed']} | {centre} | {c['unit']} | {c['dev_bleu_inf']:.2f} | {tau} | "
                         f"{c['dev_window']:.2f} | {c['dev_bleu']:.2f} | {c['test_bleu_inf']:.2f} | "
                         f"{c['test_window']:.2f} | {c['test_bleu']:.2f} |")
    chosen = centre_on_dev(rows)
    return ("\n".join(lines) + f"\n\nOn dev ({len(rows)} seed{'s' if len(rows) > 1 else ''}): the **{chosen}** "
            "centre (higher dev BLEU at the selected τ; at equal BLEU, the smaller window).\n")


def layer_windows(units) -> list[dict[str, Any]]:
    """Per unit trained for the budget whose decodes record each cross-attention layer's window (a
    Transformer's; :class:`flexatt.unit_claims.Units`), its test window per layer (per sentence,
    then the mean) beside their mean, the window: at τ = ∞ and, for a flexible model, at its
    dev-selected τ."""
    from flexatt.tau import INF

    rows = []
    for name in sorted(units.manifests):
        m = units.manifests[name]
        if m.get("kind", "train") != "train" or m.get("budget", 1.0) != 1.0:
            continue
        selected = m["summary"]["dev"].get("selected_tau")
        for tau in [INF] + ([float(selected)] if selected is not None and not math.isinf(float(selected)) else []):
            record = units.record(name, tau)
            if record.get("layer_windows"):
                rows.append({"unit": name, "tau": tau, "window": record["window"],
                             "layers": [round(float(w), 2) for w in record["layer_windows"]]})
    return rows


def render_layers(rows: list[dict[str, Any]]) -> str:
    """The windows per layer as a Markdown table (empty without rows)."""
    if not rows:
        return ""
    n = max(len(r["layers"]) for r in rows)
    lines = ["| unit | τ | window | " + " | ".join(f"layer {i + 1}" for i in range(n)) + " |",
             "|---|---|---|" + "---|" * n]
    for r in rows:
        tau = "∞" if math.isinf(r["tau"]) else f"{r['tau']:g}"
        lines.append(f"| {r['unit']} | {tau} | {r['window']:.2f} | "
                     + " | ".join(f"{w:.2f}" for w in r["layers"]) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Optional[float]) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def render(rows: list[dict[str, Any]], ours: str, theirs: str) -> str:
    """The comparison as a Markdown table (empty where no pair is finished); a pair trained on two
    kinds of machine shows where each trained instead of the equal-minutes figures."""
    if not rows:
        return ""
    lines = [f"| model | seed | epochs ({ours} / {theirs}) | training minutes | test BLEU τ = ∞ | "
             f"equal minutes | dev BLEU at them |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["equal_minutes"] is None:
            equal = f"not comparable: trained on {r['machines'][0]} / {r['machines'][1]} | –"
        else:
            equal = (f"{r['equal_minutes']:.1f} | "
                     f"{_cell(r['dev_bleu_at_equal'][0])} / {_cell(r['dev_bleu_at_equal'][1])}")
        lines.append(f"| {r['model']} | {r['seed']} | {r['epochs'][0]} / {r['epochs'][1]} | "
                     f"{r['minutes'][0]:.1f} / {r['minutes'][1]:.1f} | "
                     f"{_cell(r['test_bleu'][0])} / {_cell(r['test_bleu'][1])} | {equal} |")
    return "\n".join(lines) + "\n"


def figure(ours: str | Path, theirs: str | Path, rows: list[dict[str, Any]], labels: tuple[str, str], path: str | Path,
           ) -> Path:
    """Dev BLEU against training minutes, every pair of units of both architectures trained on one
    kind of machine (one colour per architecture, one line per model and seed)."""
    from flexatt.figures import _save, plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    styles, labelled = {"global": "-", "flexible": "--"}, set()
    for folder, label, colour in ((ours, labels[0], "tab:blue"), (theirs, labels[1], "tab:orange")):
        for r in (r for r in rows if r["equal_minutes"] is not None):
            curve = minutes_curve(Path(folder) / Unit(r["model"], r["seed"]).name)
            name = f"{label} {r['model']}"
            ax.plot([m for m, _ in curve], [b for _, b in curve], styles.get(r["model"], ":"), color=colour,
                    linewidth=1, label=None if name in labelled else name)
            labelled.add(name)
    ax.set_xlabel("training minutes")
    ax.set_ylabel("dev BLEU (greedy)")
    if labelled:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no pair trained on one kind of machine yet", ha="center", va="center",
                transform=ax.transAxes)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)
