#!/usr/bin/env python3
"""Build the corpus ``nt_grc_en``: Koine Greek New Testament -> English verse pairs with human
word alignments.

The source is one wheel from PyPI, read as a zip (its code and declared dependencies are not
used)::

    pip download --no-deps bible-alignments==0.4.2 -d /tmp/wheels
    python scripts/build_nt_corpus.py --wheel /tmp/wheels/bible_alignments-0.4.2-py3-none-any.whl \\
        --out-dir data/nt_grc_en

It holds the SBL Greek New Testament (``data/sources/SBLGNT.tsv``, one word per line, ids
``nBBCCCVVVWWW``), the Berean Standard Bible (``data/eng/targets/BSB/nt_BSB.tsv``, one word or
punctuation mark per line with the Greek verse it translates in ``source_verse``) and manual
alignments between them (``data/eng/alignments/BSB/SBLGNT-BSB-manual.json``, Scripture Burrito
records of Greek word ids and English word ids). This script writes into ``--out-dir``:

``nt.grc-en.tsv.gz``
    header ``key<TAB>grc<TAB>en<TAB>split``, then one verse pair per line in canonical order;
    ``key`` is the Greek verse (``Matthew 1:1``), ``split`` is ``train``, ``dev`` or ``test``
    (:func:`split_of`).
``nt.grc-en.align.gz``
    one line per TSV data row: the manual links as Pharaoh ``i-j`` pairs between ``grc``
    whitespace token i and ``en`` whitespace token j, sorted, without repeats.
``build_report.json``
    what was read, dropped and why (with keys), the split sizes and how much the alignments
    reorder (``src/flexatt/data/reordering.py``, which the filter stage reports too); also
    printed to stderr.

Text: the Greek words joined by spaces (the SBLGNT file has no punctuation); the English words
and punctuation joined as the BSB prints them (no space after a token marked
``skip_space_after``), so that a punctuation mark sticks to its word. An English token's
whitespace token is the one its characters end up in; a record's links are every pair of its
Greek and English words. English words that translate another Greek verse than their own
(versification: Acts 19:41 holds the end of Greek 19:40) go with the Greek verse, as the BSB
file says. A verse is dropped when one side is empty or when it has no alignment record; a link
whose words lie in two verses is dropped (each is counted in the report).

Both gzip files are written with ``mtime=0``: a rebuild from the same wheel gives identical
bytes. Standard library only (with the project's ``reordering.py``, loaded from its file).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.util
import io
import json
import sys
import zipfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_reordering():
    """``flexatt/data/reordering.py`` (standard library only) loaded from its file, so that this
    script runs without the project installed."""
    path = ROOT / "src" / "flexatt" / "data" / "reordering.py"
    spec = importlib.util.spec_from_file_location("flexatt_reordering", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reordering = _load_reordering()

GREEK = "data/sources/SBLGNT.tsv"
ENGLISH = "data/eng/targets/BSB/nt_BSB.tsv"
ALIGNMENTS = "data/eng/alignments/BSB/SBLGNT-BSB-manual.json"
#: what the wheel must be (the file names and formats above are this release's)
WHEEL_NAME = "bible_alignments-0.4.2-py3-none-any.whl"

#: the New Testament's books by their number in the ids (40 = Matthew … 66 = Revelation)
BOOKS = {
    40: "Matthew", 41: "Mark", 42: "Luke", 43: "John", 44: "Acts", 45: "Romans", 46: "1 Corinthians",
    47: "2 Corinthians", 48: "Galatians", 49: "Ephesians", 50: "Philippians", 51: "Colossians",
    52: "1 Thessalonians", 53: "2 Thessalonians", 54: "1 Timothy", 55: "2 Timothy", 56: "Titus",
    57: "Philemon", 58: "Hebrews", 59: "James", 60: "1 Peter", 61: "2 Peter", 62: "1 John", 63: "2 John",
    64: "3 John", 65: "Jude", 66: "Revelation",
}
#: every ``SPLIT_EVERY``-th verse of the canonical order goes to dev, another to test: 10% each,
#: spread over every book (the shortest, 2 John, has 13 verses)
SPLIT_EVERY = 10
DEV_OFFSET, TEST_OFFSET = 3, 8


def verse_key(verse: str) -> str:
    """``BBCCCVVV`` (``40001001``) -> ``Matthew 1:1``."""
    return f"{BOOKS[int(verse[:2])]} {int(verse[2:5])}:{int(verse[5:8])}"


def split_of(position: int) -> str:
    """The split of the verse at 0-based ``position`` of the kept verses' canonical order."""
    slot = position % SPLIT_EVERY
    return "dev" if slot == DEV_OFFSET else "test" if slot == TEST_OFFSET else "train"


def read_tsv(wheel: zipfile.ZipFile, name: str) -> list[dict[str, str]]:
    text = wheel.read(name).decode("utf-8")
    return list(csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))


def greek_verses(rows: list[dict[str, str]]) -> dict[str, tuple[str, dict[str, int]]]:
    """``{verse: (text, {word id: whitespace token index})}`` of the Greek words."""
    words: dict[str, list[tuple[str, str]]] = {}
    for row in rows:
        word_id, text = row["id"], row["text"].strip()
        if not text:
            continue
        if any(ch.isspace() for ch in text):
            raise ValueError(f"{GREEK}: word {word_id} holds a space: {text!r}")
        words.setdefault(word_id[1:9], []).append((word_id, text))
    return {verse: (" ".join(t for _, t in items), {w: i for i, (w, _) in enumerate(items)})
            for verse, items in words.items()}


def english_verses(rows: list[dict[str, str]]) -> tuple[dict[str, tuple[str, dict[str, int]]], list[str]]:
    """``({greek verse: (text, {word id: whitespace token index})}, [moved word ids])``: the
    English tokens grouped by the Greek verse they translate and printed as the BSB prints them
    (no space after a ``skip_space_after`` token); the ids of the tokens whose own verse is
    another are returned too."""
    tokens: dict[str, list[dict[str, str]]] = {}
    moved = []
    for row in rows:
        tokens.setdefault(row["source_verse"], []).append(row)
        if row["source_verse"] != row["id"][:8]:
            moved.append(row["id"])
    verses = {}
    for verse, items in tokens.items():
        parts: list[str] = []
        index: dict[str, int] = {}
        token = 0
        for k, row in enumerate(items):
            text = row["text"].strip()
            if not text:
                continue
            if parts and parts[-1] == " ":
                token += 1
            index[row["id"]] = token
            parts.append(text)
            if k < len(items) - 1 and row["skip_space_after"] != "y":
                parts.append(" ")
        line = "".join(parts).strip()
        verses[verse] = (" ".join(line.split()), index)
    return verses, moved


def reordering_of(rows: list[tuple[str, str, str, str]], alignments: list[list[tuple[int, int]]]) -> dict:
    """The reordering measures (``flexatt.data.reordering``) of the pairs ``rows`` (key, grc,
    en, split) with their links."""
    measures = reordering.Reordering()
    for (_, grc, en, _), links in zip(rows, alignments):
        measures.add(links, len(grc.split()), len(en.split()))
    summary = measures.summary()
    return {k: summary[k] for k in ("crossing_link_pairs", "sentences_with_crossing", "mean_distortion")}


def build(wheel_path: Path) -> tuple[list[tuple[str, str, str, str]], list[str], dict]:
    """``(rows (key, grc, en, split), Pharaoh lines, report)`` from the wheel."""
    with zipfile.ZipFile(wheel_path) as wheel:
        greek = greek_verses(read_tsv(wheel, GREEK))
        english, moved = english_verses(read_tsv(wheel, ENGLISH))
        records = json.loads(wheel.read(ALIGNMENTS))["records"]

    links: dict[str, set[tuple[int, int]]] = {}
    cross_verse: Counter[str] = Counter()
    for record in records:
        verse = record["meta"]["id"].split(".")[0]
        for source in record["source"]:
            for target in record["target"]:
                g_verse = source[1:9]
                e_index = english.get(g_verse, ("", {}))[1].get(target)
                g_index = greek.get(g_verse, ("", {}))[1].get(source)
                if g_verse != verse or e_index is None or g_index is None:
                    cross_verse[verse_key(verse)] += 1
                    continue
                links.setdefault(verse, set()).add((g_index, e_index))

    dropped: dict[str, list[str]] = {"no English text": [], "no Greek text": [], "no alignment": []}
    kept = []
    for verse in sorted(set(greek) | set(english)):
        if verse not in english:
            dropped["no English text"].append(verse_key(verse))
        elif verse not in greek:
            dropped["no Greek text"].append(verse_key(verse))
        elif not links.get(verse):
            dropped["no alignment"].append(verse_key(verse))
        else:
            kept.append(verse)

    rows, align_lines, alignments = [], [], []
    for position, verse in enumerate(kept):
        sentence = sorted(links[verse])
        rows.append((verse_key(verse), greek[verse][0], english[verse][0], split_of(position)))
        align_lines.append(" ".join(f"{i}-{j}" for i, j in sentence))
        alignments.append(sentence)
    report = {
        "source": {"wheel": WHEEL_NAME, "greek": GREEK, "english": ENGLISH, "alignments": ALIGNMENTS},
        "read": {"greek_verses": len(greek), "english_verses": len(english), "alignment_records": len(records)},
        "kept": len(rows),
        "dropped": {reason: {"count": len(keys), "keys": keys} for reason, keys in dropped.items()},
        "links_dropped_across_verses": {"count": sum(cross_verse.values()), "by_verse": dict(sorted(cross_verse.items()))},
        "english_words_moved_to_their_greek_verse": {
            "count": len(moved), "verses": sorted({verse_key(m[:8]) for m in moved})},
        "splits": dict(Counter(split for *_, split in rows)),
        "links": sum(len(a) for a in alignments),
        "reordering": reordering_of(rows, alignments),
    }
    return rows, align_lines, report


def write_gzip(path: Path, text: str) -> None:
    """``text`` gzipped at ``path`` with ``mtime=0`` (identical bytes on a rebuild)."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as out:
        out.write(text.encode("utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, required=True, help=f"the downloaded {WHEEL_NAME}")
    parser.add_argument("--out-dir", type=Path, default=Path("data/nt_grc_en"))
    args = parser.parse_args(argv)
    if args.wheel.name != WHEEL_NAME:
        parser.error(f"--wheel: expected {WHEEL_NAME} (the formats read are that release's), got {args.wheel.name}")
    if not args.wheel.is_file():
        parser.error(f"--wheel: file not found: {args.wheel}")
    rows, align_lines, report = build(args.wheel)
    for _, grc, en, _ in rows:
        if "\t" in grc or "\t" in en or "\n" in grc or "\n" in en:
            raise ValueError("a verse holds a tab or a newline")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    tsv = "key\tgrc\ten\tsplit\n" + "".join("\t".join(row) + "\n" for row in rows)
    write_gzip(args.out_dir / "nt.grc-en.tsv.gz", tsv)
    write_gzip(args.out_dir / "nt.grc-en.align.gz", "".join(line + "\n" for line in align_lines))
    text = json.dumps(report, indent=1, ensure_ascii=False) + "\n"
    (args.out_dir / "build_report.json").write_text(text, encoding="utf-8")
    summary = {k: report[k] for k in ("read", "kept", "splits", "links", "reordering")}
    print(json.dumps(summary, ensure_ascii=False), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
