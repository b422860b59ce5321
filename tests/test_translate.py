"""``flexatt translate``'s word alignments (``--alignments``) and what ``--stats`` records about the
decoding, on the smoke profile's one-epoch flexible model."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import copy_of


@pytest.fixture(scope="module")
def trained(smoke_trained, tmp_path_factory):
    return copy_of(smoke_trained, tmp_path_factory.mktemp("translate"))


def _translate(trained, capsys, *args) -> list[str]:
    from flexatt.cli import main

    main(["translate", "--checkpoint", str(trained / "m/flexible/best.ckpt"),
          "--tok-dir", str(trained / "artifacts/tok"), "--beam", "3", *args])
    return capsys.readouterr().out.split("\n")[:-1]


def _links(line: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in link.split("-")) for link in line.split()]


def test_alignments_link_every_output_word_to_one_source_word(trained, tmp_path, capsys):
    sentences = (trained / "artifacts/filter/dev.src").read_text(encoding="utf-8").split("\n")[:6]
    text = "\n".join([sentences[0], "", *sentences[1:]]) + "\n"
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    out = _translate(trained, capsys, "--input", str(tmp_path / "in.txt"), "--alignments",
                     str(tmp_path / "links.txt"), "--stats", str(tmp_path / "stats.jsonl"))
    lines = (tmp_path / "links.txt").read_text(encoding="utf-8").split("\n")[:-1]
    sources = text.split("\n")[:-1]
    assert len(lines) == len(out) == len(sources) == 7
    assert lines[1] == "" and out[1] == ""
    linked = 0
    for src, hyp, line in zip(sources, out, lines):
        links = _links(line)
        n_src, n_out = len(src.split()), len(hyp.split())
        # Pharaoh i-j: i a source word, j an output word; one link per output word, in order
        assert [j for _, j in links] == list(range(n_out))
        assert all(0 <= i < n_src for i, _ in links)
        linked += len(links)
    assert linked > 0
    stats = [json.loads(line) for line in (tmp_path / "stats.jsonl").read_text().splitlines()]
    assert stats[1]["decoded_by"] is None  # an empty line is not decoded
    for s in stats[:1] + stats[2:]:
        assert s["decoded_by"]["backend"] in ("kernel", "eager")
        assert s["decoded_by"]["torch"] == torch.__version__
        assert s["decoded_by"]["simd"] == (torch.backends.cpu.get_cpu_capability()
                                           if s["decoded_by"]["backend"] == "kernel" else None)


def test_alignments_do_not_depend_on_the_backend(trained, tmp_path, capsys):
    sentences = (trained / "artifacts/filter/dev.src").read_text(encoding="utf-8").split("\n")[:8]
    (tmp_path / "in.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    found = {}
    for backend in ("eager", "auto"):
        out = _translate(trained, capsys, "--input", str(tmp_path / "in.txt"), "--backend", backend,
                         "--alignments", str(tmp_path / f"{backend}.txt"))
        found[backend] = (out, (tmp_path / f"{backend}.txt").read_text(encoding="utf-8"))
    assert found["eager"] == found["auto"]
