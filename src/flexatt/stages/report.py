"""Stage ``report`` of a long profile's pipeline (``pipelines/<profile>/dvc.yaml``): the table,
the claims and the figure from the finished units' products alone.

Usage::

    FLEXATT_PARAMS=pipelines/bible/params.yaml python -m flexatt.stages.report

Reads ``results/<profile>/units/*/`` (each unit's ``unit.json`` and decodes, checked against
their manifests by :func:`flexatt.products.load_products`), the plan ``conf/units/<profile>.yaml``
and the test references, which it makes from the committed corpus with the filter stage's own
code (:func:`references`: the filter run into a temporary folder, a few seconds), so that a fresh
clone rebuilds the report with no checkpoint, no decoding and no DVC cache. The references must be
those the units decoded: their digest is checked against every unit's record (``data``).

Writes ``results/<profile>/report.json`` (table, budget check, claims), ``report.md`` and
``figures/units.png`` (:mod:`flexatt.unit_claims`).
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path

from flexatt import config as C
from flexatt import schema
from flexatt.errors import DataError
from flexatt.io import atomic_path, file_digest, write_json
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
                 shown: str | None = None) -> tuple[list[Path], str]:
    """``<results>/../report.{json,md}`` and ``figures/units.png`` from the finished units of
    ``results``; returns the files written and the Markdown."""
    from flexatt.unit_claims import Units, figure, report

    spec = read_plan(plan_dir / f"{profile}.yaml")
    out = report(results, spec, refs, shown=shown or str(results))
    folder = results.parent
    written = [folder / "report.json", folder / "report.md", folder / "figures" / "units.png"]
    write_json(written[0], {k: v for k, v in out.items() if k != "markdown"})
    with atomic_path(written[1]) as tmp:
        tmp.write_text(out["markdown"], encoding="utf-8")
    figure(Units(results, spec), written[2])
    return written, out["markdown"]


def run(p: schema.Params) -> list[Path]:
    started = time.time()
    results = Path("results") / p.profile / "units"
    done = done_units(results)
    if not done:
        raise DataError(results, "no finished unit")
    with tempfile.TemporaryDirectory(prefix="flexatt-references-") as tmp:
        refs = read_references(references(p, Path(tmp)), done)
    written, _ = write_report(p.profile, results, refs)
    log.info("report of %d units in %.0f s: %s", len(done), time.time() - started,
             ", ".join(str(path) for path in written))
    return written


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
