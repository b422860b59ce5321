"""``flexatt report``: every DVC plot of dvc.yaml and every figure under results/ in one HTML file
that draws without a network.

The page is built in a scratch copy of the repository with the results kept in git (no repro),
then opened in headless Chromium with every host unresolvable (as the ``dvc plots show`` test of
tests/test_dvc_experiments.py does, with its parser): each Vega plot must become an SVG with
axes and data marks, and each figure must be an image embedded in the page itself.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import stage_env
from test_dvc_experiments import CHROMIUM, PLOTS, dvc, render, results_repo, vega_ids  # noqa: F401 (a fixture)

PNG = b"\x89PNG\r\n\x1a\n"


def flexatt_report(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flexatt.cli", "report", *args], cwd=cwd, env=stage_env(),
                          text=True, capture_output=True, timeout=300)


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
    assert f"wrote {page}" in result.stdout and "warning" not in result.stderr, result.stdout + result.stderr
    assert [p.name for p in page.parent.iterdir()] == ["report.html"], "one file, nothing beside it"
    html = page.read_text(encoding="utf-8")
    assert "cdn.jsdelivr.net" not in html and "<script src=" not in html

    # the same plots as DVC's own page (dvc plots show), and every figure of results/
    stock = tmp_path / "stock"
    dvc(results_repo, "plots", "show", "-o", str(stock))
    stock_html = (stock / "index.html").read_text(encoding="utf-8")
    ids = vega_ids(page)
    assert sorted(ids) == sorted(vega_ids(stock / "index.html"))
    for prefix, what in PLOTS.items():
        assert any(i.startswith(prefix) for i in ids), f"no plot of {what} ({prefix}) in {ids}"
    declared = len(re.findall(r"<img src=", stock_html))
    figures = sorted(p for p in (results_repo / "results").rglob("*.png"))
    embedded = images(html)
    assert declared and len(embedded) == len(figures), (declared, len(embedded), len(figures))
    assert sorted(embedded) == sorted(p.read_bytes() for p in figures)
    assert all(image[:8] == PNG for image in embedded)
    assert "results/seeds/summary.png" in html  # a figure that no DVC plot declares

    found = render(page, tmp_path / "profile")
    drawn = [i for i in ids if found[i]["svg"] and found[i]["axis"] >= 2 and found[i]["data"] and not found[i]["broken"]]
    assert drawn == ids, f"plots not drawn: { {i: found[i] for i in ids if i not in drawn} }"


def test_report_outside_a_dvc_project_is_one_line(tmp_path):
    result = flexatt_report(tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"error: {tmp_path}: not a DVC project (no .dvc/ here or above)"]
    assert not (tmp_path / "dvc_plots").exists()
