"""The offline results page: every DVC plot of ``dvc.yaml`` and every figure under ``results/``
in one self-contained HTML file (``flexatt report``, ``make report``).

``dvc plots show`` writes a page that loads Vega, Vega-Lite and Vega-Embed from a CDN, so it is
blank without a network, and it keeps its images in files beside the page. This page is built
from the same plot definitions and the same renderers (DVC's ``plots.show`` and
``match_defs_renderers``, ``dvc_render.render_html``), but

* the Vega libraries are inlined from the ``vl-convert-python`` wheel (:func:`offline_template`):
  nothing is fetched when the page opens;
* the images are embedded as ``data:`` URIs: the page is one file to send or attach;
* the figures under ``results/`` that no plot of ``dvc.yaml`` declares (the char profile's
  figures, the long profiles' earlier budgets) are added after the declared ones;
* a chart is shown once and only where it draws something (:func:`select`): a file drawn in a
  plot of several files (``dvc.yaml``'s top-level learning curves, every model of a stage in one
  chart) is not drawn again on its own; a chart whose data take a single x value (the learning
  curve of a one-epoch fine-tuning) is left out; BLEU by source length (``evaluate.by_length_file``)
  shows the Table 1 rows that a claim compares (:func:`flexatt.claims.claim_rows`), not all of them.
"""

from __future__ import annotations

import base64
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from flexatt import claims
from flexatt.errors import DataError
from flexatt.io import atomic_path

#: where ``flexatt report`` writes by default (beside ``dvc plots show``'s ``dvc_plots/index.html``)
DEFAULT_OUTPUT = Path("dvc_plots/report.html")
#: the figures looked for under ``results/`` beside the declared plots
FIGURE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".gif")


def vega_bundle() -> str:
    """Vega, Vega-Lite and Vega-Embed as one script, from ``vl-convert-python`` (no download):
    Vega-Lite 5, the version DVC's plot templates are written for, where the wheel has it."""
    import vl_convert

    v5 = [v for v in vl_convert.get_vegalite_versions() if v.startswith("5.")]
    bundle = vl_convert.javascript_bundle(vl_version=v5[-1]) if v5 else vl_convert.javascript_bundle()
    if "</script" in bundle or "{plot_divs}" in bundle:  # would end the inline script / be filled in
        raise RuntimeError("the vl-convert Vega bundle cannot be inlined into an HTML page")
    return bundle


def offline_template(title: str = "DVC Plot") -> str:
    """DVC's page layout (``dvc plots show --html-template``) with Vega, Vega-Lite and
    Vega-Embed inlined: a page that draws its plots without a network. Every plot is drawn as
    SVG and without Vega-Embed's actions menu (whose links point to online editors)."""
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n{refresh_tag}\n<meta charset=\"utf-8\">\n"
        f"<title>{title}</title>\n"
        f"<script>{vega_bundle()}</script>\n"
        "<script>/* every plot as SVG, without the actions menu */ (function () {\n"
        "  const embed = window.vegaEmbed;\n"
        "  window.vegaEmbed = (el, spec, opts) =>\n"
        "    embed(el, spec, Object.assign({renderer: 'svg', actions: false}, opts || {}));\n"
        "})();</script>\n<style>table { border-spacing: 15px; } body { font-family: sans-serif; }"
        " img { max-width: 100%; }</style>\n</head>\n"
        "<body>\n{plot_divs}\n</body>\n</html>\n"
    )


@dataclass
class ReportPage:
    """What :func:`build` wrote: the page, the ids of its Vega plots, the declared images and
    the extra figures it embedded, the plots it left out (id: why, :func:`select`) and the
    plots DVC could not load (id: reason)."""

    path: Path
    vega: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def overlaid_files(definitions: dict) -> set[str]:
    """The data files that a plot of several files draws (a ``y`` mapping file → field with more
    than one file), from the plot definitions of ``repo.plots.show()`` (every revision)."""
    files: set[str] = set()
    for per_rev in definitions.values():
        for config in per_rev.get("definitions", {}).get("data", {}).values():
            for props in config.get("data", {}).values():
                y = (props or {}).get("y")
                if isinstance(y, dict) and len(y) > 1:
                    files.update(y)
    return files


def select(renderers: Iterable, overlaid: set[str], by_length: str | None, rows: Iterable[str]) -> dict[str, str]:
    """Leave out what the page should not draw, in place on the Vega ``renderers`` (DVC's, with
    ``name``, ``datapoints`` and ``properties``); returns the names left out with the reason.

    * a plot of one file that a plot of several files draws too (``overlaid``);
    * BLEU by length (the plot named ``by_length``) keeps the datapoints of ``rows`` (``model``);
    * a plot whose datapoints take at most one value of its x field: a point per line, no curve."""
    rows, left_out = set(rows), {}
    for renderer in renderers:
        if renderer.TYPE != "vega":
            continue
        if renderer.name in overlaid:
            left_out[renderer.name] = "drawn in a plot of several files"
            continue
        if renderer.name == by_length:
            renderer.datapoints = [d for d in renderer.datapoints if d.get("model") in rows]
        x = renderer.properties.get("x")
        if len({d.get(x) for d in renderer.datapoints}) <= 1:
            left_out[renderer.name] = f"a single value of {x}"
    return left_out


def by_length_file(root: Path) -> str | None:
    """``evaluate.by_length_file`` of ``root/params.yaml`` (what dvc.yaml's BLEU-by-length plot
    reads), or None."""
    import yaml

    params = root / "params.yaml"
    if not params.is_file():
        return None
    return ((yaml.safe_load(params.read_text(encoding="utf-8")) or {}).get("evaluate") or {}).get("by_length_file")


def _data_uri(path: Path) -> str:
    kind = {".svg": "svg+xml", ".jpg": "jpeg"}.get(path.suffix.lower(), path.suffix.lower().lstrip("."))
    return f"data:image/{kind};base64,{base64.b64encode(path.read_bytes()).decode()}"


def extra_figures(root: Path, shown: set[str]) -> list[Path]:
    """The figures under ``root/results`` that are not among ``shown`` (paths relative to
    ``root``), sorted."""
    results = root / "results"
    found = sorted(p for p in results.rglob("*") if p.suffix.lower() in FIGURE_SUFFIXES and p.is_file())
    return [p for p in found if p.relative_to(root).as_posix() not in shown]


def build(root: Path = Path("."), output: Path | None = None) -> ReportPage:
    """Render every plot that ``root/dvc.yaml`` declares (as ``dvc plots show`` does, from the
    working tree) and the other figures under ``results/`` into ``output`` (default
    :data:`DEFAULT_OUTPUT` under ``root``), one HTML file that opens without a network.

    Raises:
        DataError: ``root`` is not a DVC project, or it declares no plot and holds no figure.
    """
    from dvc.exceptions import NotDvcRepoError
    from dvc.render.match import match_defs_renderers
    from dvc.repo import Repo
    from dvc_render import ImageRenderer, render_html

    root = Path(root).resolve()
    output = Path(output) if output is not None else root / DEFAULT_OUTPUT
    try:
        repo = Repo(str(root))
    except NotDvcRepoError:
        raise DataError(root, "not a DVC project (no .dvc/ here or above)") from None
    with repo:
        data = repo.plots.show()
        # out=None: DVC embeds each image as a data: URI instead of writing it beside the page
        matched = match_defs_renderers(data=data, out=None, templates_dir=repo.plots.templates_dir)
    page = ReportPage(path=output)
    page.left_out = select([r for r, _, _ in matched], overlaid_files(data), by_length_file(root), claims.claim_rows())
    renderers = []
    for renderer, source_errors, definition_errors in matched:
        problems = [str(e) for per_rev in source_errors.values() for e in per_rev.values()]
        problems += [str(e) for e in definition_errors.values()]
        if problems:
            page.errors[renderer.name] = "; ".join(problems)
        if not renderer.datapoints or renderer.name in page.left_out:
            continue
        renderers.append(renderer)
        if renderer.TYPE == "vega":
            page.vega.append(renderer.name)
        else:
            page.images.append(renderer.name)
    for figure in extra_figures(root, set(page.images)):
        name = figure.relative_to(root).as_posix()
        renderers.append(ImageRenderer([{"rev": "figure (not a DVC plot)", "src": _data_uri(figure)}], name))
        page.figures.append(name)
    if not renderers:
        raise DataError(root / "dvc.yaml", "no plot to render: run the pipeline (dvc repro) first")
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:  # render_html takes a template file's path
        template = Path(tmp) / "template.html"
        with atomic_path(template) as partial_template:
            Path(partial_template).write_text(offline_template("flexatt results"), encoding="utf-8")
        with atomic_path(output) as partial:
            render_html(renderers=renderers, output_file=partial, html_template=template)
    return page


def main(output: Path | None = None) -> int:
    """``flexatt report``: build the page in the current folder and say where it is; an error
    is one line (exit status 1)."""
    from flexatt.errors import FlexattError

    try:
        page = build(Path("."), output)
    except FlexattError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    for name, reason in page.errors.items():
        print(f"warning: {name}: {reason.splitlines()[0]}", file=sys.stderr)
    print(f"wrote {page.path}: {len(page.vega)} plots, {len(page.images) + len(page.figures)} figures "
          f"(opens without a network); left out {len(page.left_out)} plots drawn elsewhere or of one point")
    return 0
