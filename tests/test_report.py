"""``flexatt report``: every DVC plot of dvc.yaml and every figure under results/ in one HTML file
that draws without a network, each chart once and only where it draws something.

The page is built in a scratch copy of the repository with the results kept in git (no repro):
its charts are DVC's but for those :func:`flexatt.report.select` leaves out (the learning curves
of one model, drawn in the chart of their stage; charts of a single x value, such as a one-epoch
fine-tuning), BLEU by length holds the rows the claims compare; then the page is opened in
headless Chromium with every host unresolvable (as the ``dvc plots show`` test of
tests/test_dvc_experiments.py does, with its parser): each Vega plot must become an SVG with
axes and data marks, and each figure must be an image embedded in the page itself.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from conftest import ROOT, stage_env
from flexatt import claims, report
from test_dvc_experiments import CHROMIUM, dvc, render, results_repo, vega_ids  # noqa: F401 (a fixture)

PNG = b"\x89PNG\r\n\x1a\n"
#: the charts of the page built from the committed results, in order: one learning-curve chart
#: (training; fine-tuning and its control ran one epoch), the plots of one file each
# the long profiles' pipelines' plots (pipelines/*/dvc.yaml) come with the root's
#: the long profiles' dev BLEU curves: one plot per pipeline that declares it (those with finished units)
LONG_PLOTS = sorted((f"pipelines_{p.parent.name}_dvc_yaml__dev_bleu_by_epoch" for p in ROOT.glob("pipelines/*/dvc.yaml")
                     if "plots" in (yaml.safe_load(p.read_text(encoding="utf-8")) or {})), reverse=True)
PAGE_PLOTS = ["learning_curves_train", "results_plots_reordering_csv", *LONG_PLOTS, "results_plots_beta_csv",
              "results_plots_tradeoff_csv", "results_plots_bleu_by_length_csv", "results_plots_matched_window_csv",
              "results_plots_sigma_csv"]


def flexatt_report(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flexatt.cli", "report", *args], cwd=cwd, env=stage_env(),
                          text=True, capture_output=True, timeout=300)


def specs(html: str) -> dict[str, dict]:
    """The Vega-Lite spec of every plot of a page, by its id."""
    found = re.findall(r"var spec = (\{.*?\});\s*vegaEmbed\('#([^']+)'", html.split("<body>", 1)[1], re.S)
    return {plot_id: json.loads(spec) for spec, plot_id in found}


def images(html: str) -> list[bytes]:
    """The bytes of every ``<img>`` in the page's body (each must be a ``data:`` URI: no file
    beside it; the inlined Vega bundle in the head has ``<img`` in its strings)."""
    sources = re.findall(r'<img src="([^"]*)"', html.split("<body>", 1)[1])
    assert all(s.startswith("data:image") for s in sources), [s[:40] for s in sources if not s.startswith("data:")]
    return [base64.b64decode(s.split(",", 1)[1]) for s in sources]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_report_page_draws_every_plot_offline(results_repo, tmp_path):
    page = tmp_path / "page" / "report.html"
    result = flexatt_report(results_repo, "--output", str(page))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"wrote {page}: {len(PAGE_PLOTS)} plots" in result.stdout and "warning" not in result.stderr, \
        result.stdout + result.stderr
    assert [p.name for p in page.parent.iterdir()] == ["report.html"], "one file, nothing beside it"
    html = page.read_text(encoding="utf-8")
    assert "cdn.jsdelivr.net" not in html and "<script src=" not in html

    # DVC's own plots (dvc plots show) but for the per-model learning curves and those of one
    # epoch, and every figure of results/
    stock = tmp_path / "stock"
    dvc(results_repo, "plots", "show", "-o", str(stock))
    stock_html = (stock / "index.html").read_text(encoding="utf-8")
    ids = vega_ids(page)
    assert ids == PAGE_PLOTS
    stock_ids = vega_ids(stock / "index.html")
    left_out = [i for i in stock_ids if i not in ids]
    assert set(ids) < set(stock_ids) and len(left_out) == 12, left_out
    assert all(i.startswith(("results_train_", "results_finetune_", "learning_curves_f", "learning_curves_c"))
               for i in left_out), left_out
    declared = len(re.findall(r"<img src=", stock_html))
    figures = sorted(p for p in (results_repo / "results").rglob("*.png"))
    embedded = images(html)
    assert declared and len(embedded) == len(figures), (declared, len(embedded), len(figures))
    assert sorted(embedded) == sorted(p.read_bytes() for p in figures)
    assert all(image[:8] == PNG for image in embedded)
    assert "results/char/figures/tradeoff.png" in html  # a figure that no DVC plot declares

    found = render(page, tmp_path / "profile")
    drawn = [i for i in ids if found[i]["svg"] and found[i]["axis"] >= 2 and found[i]["data"] and not found[i]["broken"]]
    assert drawn == ids, f"plots not drawn: { {i: found[i] for i in ids if i not in drawn} }"


def test_report_page_overlays_the_learning_curves_and_keeps_the_claimed_rows(results_repo, tmp_path):
    """Without a browser: the page's specs. One chart of every model's training curve, none of a
    single model or of a single epoch; BLEU by length with the rows the claims compare."""
    page = tmp_path / "report.html"
    result = flexatt_report(results_repo, "--output", str(page))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "left out 12 plots" in result.stdout, result.stdout
    plots = specs(page.read_text(encoding="utf-8"))
    assert list(plots) == PAGE_PLOTS, list(plots)
    params = yaml.safe_load((results_repo / "params.yaml").read_text(encoding="utf-8"))
    curves = plots["learning_curves_train"]["data"]["values"]
    assert sorted({d["filename"] for d in curves}) == sorted(f"{v}.csv" for v in params["variants"])
    assert {d["epoch"] for d in curves} == {str(e) for e in range(1, params["train"]["epochs"] + 1)}
    for plot_id, spec in plots.items():  # every chart draws along its x axis
        x = spec["encoding"]["x"]["field"]
        x = spec["transform"][-1]["calculate"].split("'")[1] if x == "x_order" else x
        assert len({d[x] for d in spec["data"]["values"]}) > 1, plot_id
    by_length = {d["model"] for d in plots["results_plots_bleu_by_length_csv"]["data"]["values"]}
    assert by_length == set(claims.claim_rows()) and {"global", "flexible", "flexible_ft_tau"} <= by_length
    assert not {"local_m", "flexible_tau", "flexible_sact"} & by_length


def test_claim_rows_are_the_rows_each_claim_compares():
    from flexatt.claims import CLAIMS

    rows = claims.claim_rows()
    assert len(rows) == len(set(rows))
    assert set(rows) == {spec[side] for spec in CLAIMS for side in ("a", "b") if side in spec}
    assert rows[:2] == [CLAIMS[0]["a"], CLAIMS[0]["b"]]


def _renderer(name: str, x: str, points: list[dict]) -> SimpleNamespace:
    return SimpleNamespace(TYPE="vega", name=name, properties={"x": x}, datapoints=points)


def test_select_leaves_out_overlaid_files_and_single_points_and_unclaimed_rows():
    curve = [{"epoch": "1", "val_bleu": "3"}, {"epoch": "2", "val_bleu": "9"}]
    one_epoch = [{"epoch": "1", "val_bleu": "18"}, {"epoch": "1", "val_bleu": "17", "filename": "other.csv"}]
    by_length = [{"model": m, "bucket": b, "bleu": "1"} for m in ("global", "local_m", "flexible") for b in ("1-10", "11-20")]
    renderers = [_renderer("learning_curves_train", "epoch", curve), _renderer("results/train/global.csv", "epoch", curve),
                 _renderer("learning_curves_finetune", "epoch", one_epoch), _renderer("by_length.csv", "bucket", by_length),
                 SimpleNamespace(TYPE="image", name="figure.png", properties={}, datapoints=[{}])]
    left_out = report.select(renderers, {"results/train/global.csv"}, "by_length.csv", ["global", "flexible"])
    assert left_out == {"results/train/global.csv": "drawn in a plot of several files",
                        "learning_curves_finetune": "a single value of epoch"}
    assert [d["model"] for d in renderers[3].datapoints] == ["global", "global", "flexible", "flexible"]
    assert renderers[0].datapoints == curve  # a curve of several files stays as it is
    # the same plot of BLEU by length with only one row claimed: still a chart (several buckets)
    assert report.select([_renderer("b.csv", "bucket", list(by_length))], set(), "b.csv", ["local_m"]) == {}


def _resolve(value: str, params: dict) -> str:
    """``${a.b}`` interpolations of dvc.yaml replaced by their params.yaml values."""
    def lookup(match: re.Match) -> str:
        node = params
        for key in match.group(1).split("."):
            node = node[key]
        return str(node)

    return re.sub(r"\$\{([^}]+)\}", lookup, value)


def test_the_learning_curve_charts_draw_every_model_of_their_stage():
    """dvc.yaml's top-level learning-curve plots name a file per variant that the train stage runs
    (``variants``) and per fine-tuned variant (``finetune.variants``, fine-tuning and control):
    a variant added to conf/variants/default.yaml without its line here would be drawn on its own."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    plots = {name: spec for entry in yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["plots"]
             if isinstance(entry, dict) for name, spec in entry.items()}
    expected = {"learning_curves_train": ("train.metrics_dir", params["variants"]),
                "learning_curves_finetune": ("finetune.metrics_dir", params["finetune"]["variants"]),
                "learning_curves_control": ("finetune.control_metrics_dir", params["finetune"]["variants"])}
    for name, (folder, variants) in expected.items():
        spec = plots[name]
        files = [_resolve(f, params) for f in spec["y"]]
        assert files == [_resolve(f"${{{folder}}}/{v}.csv", params) for v in variants], (
            f"dvc.yaml's plot {name} lists {files}: a line `${{{folder}}}/<variant>.csv: val_bleu` per variant")
        assert set(spec["y"].values()) == {"val_bleu"} and spec["x"] == "epoch" and spec["template"] == "lines_by_file"


def test_report_outside_a_dvc_project_is_one_line(tmp_path):
    result = flexatt_report(tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"error: {tmp_path}: not a DVC project (no .dvc/ here or above)"]
    assert not (tmp_path / "dvc_plots").exists()
