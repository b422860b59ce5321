"""scripts/build_nt_extra.py: the Greek corpus with the KJV and WEB of its training verses."""

from __future__ import annotations

import gzip

from conftest import ROOT, load_script

extra = load_script("build_nt_extra")


def _gz(path, text: str) -> None:
    path.write_bytes(gzip.compress(text.encode("utf-8")))


def test_training_verses_get_the_kjv_and_web_and_nothing_else_changes(tmp_path):
    _gz(tmp_path / "nt.tsv.gz", "key\tgrc\ten\tsplit\n"
        "1 John 1:1\tὃ ἦν\tThat which was\ttrain\n"
        "Acts 19:40\tκαὶ γὰρ\tFor we\ttrain\n"
        "Jude 1:2\tἔλεος ὑμῖν\tMercy to you\tdev\n"
        "Revelation 1:1\tἈποκάλυψις\tThe revelation\ttrain\n")
    _gz(tmp_path / "nt.align.gz", "0-0 1-1\n0-0\n1-1\n0-1\n")
    _gz(tmp_path / "bible.tsv.gz", "key\tes\ten\ten_web\n"
        "I John 1:1\tLo que era\tThat which was from the beginning\tThat which was from the beginning,\n"
        "Acts 19:40-41\tPorque\tFor we are in danger\tFor indeed\n"
        "Jude 1:2\tMisericordia\tMercy unto you\tMercy to you\n"
        "Revelation of John 1:1\tLa revelación\tThe Revelation of Jesus Christ\t\n")
    tsv, links, report = extra.build(tmp_path / "nt.tsv.gz", tmp_path / "nt.align.gz", tmp_path / "bible.tsv.gz")
    rows = [line.split("\t") for line in tsv.splitlines()]
    assert rows[:5] == [line.split("\t") for line in gzip.decompress((tmp_path / "nt.tsv.gz").read_bytes())
                        .decode().splitlines()]  # the corpus itself unchanged, dev included
    assert rows[5:] == [["1 John 1:1 (KJV)", "ὃ ἦν", "That which was from the beginning", "train"],
                        ["1 John 1:1 (WEB)", "ὃ ἦν", "That which was from the beginning,", "train"],
                        ["Revelation 1:1 (KJV)", "Ἀποκάλυψις", "The Revelation of Jesus Christ", "train"]]
    assert links.split("\n")[:-1] == ["0-0 1-1", "0-0", "1-1", "0-1", "", "", ""]  # one line per row
    assert report["not_in_bible"] == ["Acts 19:40"] and report["empty"] == {"WEB": ["Revelation 1:1"]}
    assert report["added"] == {"KJV": 2, "WEB": 1} and report["train_verses"] == 3


def test_the_shipped_files_are_what_the_script_builds(tmp_path):
    assert extra.main(["--out-dir", str(tmp_path)]) == 0
    for name in ("nt.grc-en.x3.tsv.gz", "nt.grc-en.x3.align.gz"):
        assert (tmp_path / name).read_bytes() == (ROOT / "data/nt_grc_en" / name).read_bytes(), name
