"""scripts/build_nt_corpus.py on a small wheel written here in the formats of bible-alignments
0.4.2, and the committed corpus data/nt_grc_en/ it built."""

from __future__ import annotations

import gzip
import json
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, load_script

DATA = ROOT / "data" / "nt_grc_en"
nt = load_script("build_nt_corpus")

GREEK_HEADER = "id\taltId\ttext\tstrongs\tgloss\tgloss2\tlemma\tpos\tmorph\n"
ENGLISH_HEADER = "id\tsource_verse\ttext\tskip_space_after\texclude\tid_range_end\tsource_verse_range_end\n"


def _greek(word_id: str, text: str) -> str:
    return f"{word_id}\t{text}-1\t{text}\tG0001\tg\tg\t{text}\tnoun\tN-NSF\n"


def _english(word_id: str, verse: str, text: str, skip: bool = False, exclude: bool = False) -> str:
    return f"{word_id}\t{verse}\t{text}\t{'y' if skip else ''}\t{'y' if exclude else ''}\t\t\n"


def _record(verse: str, n: int, sources: list[str], targets: list[str]) -> dict:
    return {"source": sources, "target": targets, "meta": {"id": f"{verse}.{n:03d}", "process": "manual"}}


@pytest.fixture
def wheel(tmp_path) -> Path:
    """Matthew 1:1-3 and 1:5 in Greek, 1:1-4 in English (1:4's words translate Greek 1:3; 1:5 has
    no English), alignments for 1:1 and 1:3 and one link across verses; 1:2 has none."""
    greek = GREEK_HEADER + "".join([
        _greek("n40001001001", "Βίβλος"), _greek("n40001001002", "γενέσεως"), _greek("n40001001003", "Ἰησοῦ"),
        _greek("n40001002001", "Ἀβραὰμ"),
        _greek("n40001003001", "Ἰούδας"), _greek("n40001003002", "δὲ"),
        _greek("n40001005001", "Σαλμὼν"),
    ])
    english = ENGLISH_HEADER + "".join([
        _english("40001001001", "40001001", "The"), _english("40001001002", "40001001", "book"),
        _english("40001001003", "40001001", "of"), _english("40001001004", "40001001", "Jesus", skip=True),
        _english("40001001005", "40001001", ":", exclude=True),
        _english("40001002001", "40001002", "Abraham", skip=True), _english("40001002002", "40001002", ".", exclude=True),
        _english("40001003001", "40001003", "“", skip=True, exclude=True), _english("40001003002", "40001003", "Judah"),
        _english("40001004001", "40001003", "then", skip=True), _english("40001004002", "40001003", ".", exclude=True),
    ])
    records = [
        _record("40001001", 1, ["n40001001001"], ["40001001001", "40001001002"]),
        _record("40001001", 2, ["n40001001003"], ["40001001004", "40001001005"]),
        _record("40001001", 3, ["n40001001002"], ["40001001003"]),
        _record("40001003", 1, ["n40001003001"], ["40001003002"]),
        _record("40001003", 2, ["n40001003002"], ["40001004001"]),
        _record("40001003", 3, ["n40001003001"], ["40001001001"]),  # an English word of another verse
    ]
    path = tmp_path / nt.WHEEL_NAME
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(nt.GREEK, greek)
        zf.writestr(nt.ENGLISH, english)
        zf.writestr(nt.ALIGNMENTS, json.dumps({"type": "translation", "records": records}))
    return path


def _read(out: Path) -> tuple[list[list[str]], list[str], dict]:
    rows = [line.split("\t") for line in gzip.open(out / "nt.grc-en.tsv.gz", "rt", encoding="utf-8").read().splitlines()]
    align = gzip.open(out / "nt.grc-en.align.gz", "rt", encoding="utf-8").read().splitlines()
    return rows, align, json.loads((out / "build_report.json").read_text(encoding="utf-8"))


def test_verses_texts_links_and_what_was_dropped(wheel, tmp_path):
    assert nt.main(["--wheel", str(wheel), "--out-dir", str(tmp_path / "out")]) == 0
    rows, align, report = _read(tmp_path / "out")
    assert rows[0] == ["key", "grc", "en", "split"]
    assert rows[1][:3] == ["Matthew 1:1", "Βίβλος γενέσεως Ἰησοῦ", "The book of Jesus:"]
    # "Jesus" and ":" are one whitespace token; Acts-19:41-like words go with the Greek verse
    assert rows[2][:3] == ["Matthew 1:3", "Ἰούδας δὲ", "“Judah then."]
    assert align == ["0-0 0-1 1-2 2-3", "0-0 1-1"]
    assert report["kept"] == 2
    assert report["dropped"]["no alignment"] == {"count": 1, "keys": ["Matthew 1:2"]}
    assert report["dropped"]["no English text"] == {"count": 1, "keys": ["Matthew 1:5"]}
    assert report["links_dropped_across_verses"] == {"count": 1, "by_verse": {"Matthew 1:3": 1}}
    assert report["english_words_moved_to_their_greek_verse"] == {"count": 2, "verses": ["Matthew 1:4"]}


def test_a_rebuild_writes_identical_bytes(wheel, tmp_path):
    for out in ("a", "b"):
        assert nt.main(["--wheel", str(wheel), "--out-dir", str(tmp_path / out)]) == 0
    for name in ("nt.grc-en.tsv.gz", "nt.grc-en.align.gz", "build_report.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_another_release_of_the_wheel_is_refused(tmp_path, capsys):
    other = tmp_path / "bible_alignments-0.5.0-py3-none-any.whl"
    other.write_bytes(b"")
    with pytest.raises(SystemExit):
        nt.main(["--wheel", str(other), "--out-dir", str(tmp_path / "out")])
    assert f"expected {nt.WHEEL_NAME}" in capsys.readouterr().err


def test_splits_every_tenth_verse_to_dev_and_test():
    assert [nt.split_of(p) for p in range(10)] == ["train"] * 3 + ["dev"] + ["train"] * 4 + ["test", "train"]


# ----------------------------------------------------------------------------- the committed corpus


@pytest.fixture(scope="module")
def corpus():
    rows, align, report = _read(DATA)
    return rows[0], rows[1:], align, report


def test_committed_corpus_rows_keys_and_links(corpus):
    header, rows, align, report = corpus
    assert header == ["key", "grc", "en", "split"]
    assert len(rows) == len(align) == report["kept"] == 7919
    keys = [row[0] for row in rows]
    assert len(set(keys)) == len(keys)
    for (key, grc, en, _), line in zip(rows, align):
        S, T = len(grc.split(" ")), len(en.split(" "))
        links = [tuple(map(int, link.split("-"))) for link in line.split(" ")]
        assert links and all(0 <= i < S and 0 <= j < T for i, j in links), key  # inside its verse
        assert links == sorted(set(links)), key


def test_committed_corpus_splits_cover_every_book(corpus):
    _, rows, _, report = corpus
    books = {row[0].rsplit(" ", 1)[0] for row in rows}
    assert len(books) == 27
    for split in ("dev", "test"):
        assert {row[0].rsplit(" ", 1)[0] for row in rows if row[3] == split} == books, split
    assert report["splits"] == {"train": 6335, "dev": 792, "test": 792}


def test_committed_report_reordering_is_that_of_the_committed_alignments(corpus):
    _, rows, align, report = corpus
    alignments = [[tuple(map(int, link.split("-"))) for link in line.split(" ")] for line in align]
    stats = nt.reordering_of([tuple(row) for row in rows], alignments)
    assert stats == report["reordering"]
    assert stats["crossing_link_pairs"] == pytest.approx(0.068, abs=0.001)


def test_licence_notes_name_the_sources():
    for path in (ROOT / "data/README.md", ROOT / "README.md"):
        text = " ".join(path.read_text(encoding="utf-8").split())  # lines wrapped anywhere
        for phrase in ("SBLGNT", "Society of Biblical Literature", "Logos Bible Software", "CC BY 4.0",
                       "Berean Standard Bible", "Clear Bible"):
            assert phrase in text, (path.name, phrase)
