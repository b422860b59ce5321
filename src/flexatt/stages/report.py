"""Stage ``report`` of a long profile's pipeline (``pipelines/<profile>/dvc.yaml``): the table,
the claims and the figure from the finished units' products alone.

Usage::

    FLEXATT_PARAMS=pipelines/bible/params.yaml python -m flexatt.stages.report

Reads ``results/<profile>/units/*/`` (each unit's ``unit.json`` and decodes, checked against
their manifests by :func:`flexatt.products.load_products`), the plan ``conf/units/<profile>.yaml``,
the pipeline's ``units.yaml`` (the finished units it lists as pending are to be run again) and
the test references, which it makes from the committed corpus with the filter stage's own
code (:func:`references`: the filter run into a temporary folder, a few seconds), so that a fresh
clone rebuilds the report with no checkpoint, no decoding and no DVC cache. The references must be
those the units decoded: their digest is checked against every unit's record (``data``).

Writes ``results/<profile>/report.json`` (table, budget check, claims), ``report.md`` and
``figures/units.png`` (:mod:`flexatt.unit_claims`), and logs the claims, the models and the figure
to W&B (:func:`log_report`).
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path

from flexatt import config as C
from flexatt import schema
from flexatt.errors import DataError
from flexatt.io import atomic_path, file_digest, write_json
from flexatt.architectures import base_profile
from flexatt.products import done_units, read_plan

log = logging.getLogger("flexatt.report")

#: the splits whose references the claims read
SPLITS = ("test",)


def references(p: schema.Params, folder: Path, splits: tuple[str, ...] = SPLITS) -> dict[str, Path]:
    """The references of ``splits``, made from the corpus of ``p`` by the filter stage run into
    ``folder`` (its ``<split>.tgt``: what the tokenize stage copies to ``<split>.ref``)."""
    from flexatt.stages import filter as filter_stage

    out_dir = folder / "filter"
    filter_stage.run(p.model_copy(update={"filter": p.filter.model_copy(update={
        "out_dir": str(out_dir), "metrics_file": str(folder / "filter.json")})}))
    return {split: out_dir / f"{split}.tgt" for split in splits}


def read_references(paths: dict[str, Path], done: dict[str, dict]) -> dict[str, list[str]]:
    """The lines of each reference file, refused where its digest differs from what the finished
    units recorded for ``<split>.ref`` (the message names the file)."""
    out = {}
    for split, path in paths.items():
        if not path.is_file():
            raise DataError(path, "not found")
        recorded = {m["data"].get(f"{split}.ref") for m in done.values() if "data" in m}
        if recorded and recorded != {file_digest(path)}:
            raise DataError(path, "not the references the units decoded (digest differs)")
        out[split] = path.read_text(encoding="utf-8").split("\n")[:-1]
    return out


def write_report(profile: str, results: Path, refs: dict[str, list[str]], plan_dir: Path = Path("conf/units"),
                 shown: str | None = None, listing: Path | None = None,
                 base: Path | None = None) -> tuple[list[Path], str]:
    """``<results>/../report.{json,md}`` and ``figures/units.png`` from the finished units of
    ``results``; ``listing``: the pipeline's ``units.yaml``, whose pending units with products
    the report names as to be run again; ``base``: the units folder of the RNN profile whose data
    a Transformer profile reads, compared with it (:mod:`flexatt.architectures`: a section of the
    report and ``figures/architectures.png``). Returns the files written and the Markdown."""
    from flexatt.products import listed_again
    from flexatt.unit_claims import Units, figure, report

    spec = read_plan(plan_dir / f"{profile}.yaml")
    done = done_units(results)
    again = listed_again(listing, done) if listing is not None else set()
    out = report(results, spec, refs, shown=shown or str(results), again=again)
    folder = results.parent
    written = [folder / "report.json", folder / "report.md", folder / "figures" / "units.png"]
    if base is not None:
        from flexatt import architectures

        rows = architectures.compare(results, base, done, done_units(base))
        names = (profile, base.parent.name)
        out["architectures"] = {"against": names[1], "rows": rows}
        out["markdown"] += (f"\n## {names[0]} against {names[1]}\n\nEach model and training seed finished in both "
                            f"(test BLEU at τ = ∞, each at its own budget; greedy dev BLEU after the same "
                            f"training minutes, the shorter of the two trainings):\n\n"
                            + (architectures.render(rows, *names) or "No pair finished yet.\n"))
        found = architectures.centres(done)
        out["centres"] = {"rows": found, "chosen": architectures.centre_on_dev(found)}
        out["markdown"] += ("\n## The window's centre: the query's or the layer below's\n\nFlexible trained with "
                            "each centre, per training seed (dev chooses; test beside):\n\n"
                            + (architectures.render_centres(found) or "No pair finished yet.\n"))
        layers = architectures.layer_windows(Units(results, spec))
        out["layer_windows"] = layers
        out["markdown"] += ("\n## Window per cross-attention layer\n\nTest, positions scored per step in each decoder "
                            "layer (per sentence, then the mean); the window is their mean:\n\n"
                            + (architectures.render_layers(layers) or "No unit yet.\n"))
        written.append(architectures.figure(results, base, rows, names, folder / "figures" / "architectures.png"))
    write_json(written[0], {k: v for k, v in out.items() if k != "markdown"})
    with atomic_path(written[1]) as tmp:
        tmp.write_text(out["markdown"], encoding="utf-8")
    figure(Units(results, spec), written[2])
    return written, out["markdown"]


def log_report(p: schema.Params, report: dict, figure: Path) -> None:
    """The report's claims and models (:func:`flexatt.unit_claims.claim_records`,
    :func:`~flexatt.unit_claims.model_records`), a Transformer profile's comparison with the RNN
    (:func:`flexatt.architectures.records`) and its figure, as a W&B run of job type
    ``units-report`` in the profile's units group (``<profile>-units``, beside the units'
    ``unit-decode`` runs); nothing where W&B is off."""
    from flexatt.tracking import start_run
    from flexatt.unit_claims import CLAIM_COLUMNS, MODEL_COLUMNS, claim_records, model_records

    if not p.logger.enabled:
        return
    grouped = p.model_copy(update={"logger": p.logger.model_copy(update={"group": p.logger.group or f"{p.profile}-units"})})
    with start_run(grouped, "units-report", p.profile, tags=[p.profile, "units"]) as run:
        run.records("units/claims", claim_records(p.profile, report["claims"]), CLAIM_COLUMNS)
        run.records("units/models", model_records(p.profile, report["table"]), MODEL_COLUMNS)
        if "architectures" in report:  # a Transformer profile against the RNN profile whose data it reads
            from flexatt import architectures

            found = report["architectures"]
            run.records("units/architectures", architectures.records(p.profile, found["against"], found["rows"]),
                        architectures.COLUMNS)
        run.summary({"units": len(report["units"])})
        run.image("figures/units", figure)


def run(p: schema.Params) -> list[Path]:
    started = time.time()
    results = Path("results") / p.profile / "units"
    done = done_units(results)
    if not done:
        raise DataError(results, "no finished unit")
    with tempfile.TemporaryDirectory(prefix="flexatt-references-") as tmp:
        refs = read_references(references(p, Path(tmp)), done)
    base = base_profile(p.profile, p.tokenize.out_dir)
    written, _ = write_report(p.profile, results, refs, listing=Path("pipelines") / p.profile / "units.yaml",
                              base=None if base is None else Path("results") / base / "units")
    log_report(p, json.loads(written[0].read_text(encoding="utf-8")), written[2])
    log.info("report of %d units in %.0f s: %s", len(done), time.time() - started,
             ", ".join(str(path) for path in written))
    return written


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
