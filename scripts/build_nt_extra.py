#!/usr/bin/env python3
"""Build ``nt_grc_en_x3``: the ``nt_grc_en`` corpus with two more English translations of its
training verses, the King James Version and the World English Bible, as extra training pairs.

    python scripts/build_nt_extra.py                 # writes data/nt_grc_en/nt.grc-en.x3.{tsv,align}.gz

It reads two files the repository ships: ``data/nt_grc_en/nt.grc-en.tsv.gz`` (SBLGNT -> BSB,
its splits) with its alignments, and ``data/bible/bible.es-en.tsv.gz``, whose ``en`` (KJV) and
``en_web`` (WEB) columns hold the same New Testament verses (all three English texts are in the
public domain: data/README.md). It writes, in the same formats:

``nt.grc-en.x3.tsv.gz``
    every row of ``nt.grc-en.tsv.gz`` unchanged (dev and test too: the fixed test set is scored
    against the BSB, whose words the gold links index), then, for every **training** verse that
    the Bible corpus holds as one verse under the same reference, the pair (Greek, KJV) and the
    pair (Greek, WEB), keys ``<key> (KJV)`` and ``<key> (WEB)``, split ``train``. The Bible
    corpus names some books otherwise (``I John``, ``Revelation of John``: :data:`BOOKS`);
    merged ranges (``Acts 19:40-41``) and empty WEB verses are left out and counted.
``nt.grc-en.x3.align.gz``
    the alignment lines of ``nt.grc-en.align.gz``, then an empty line per extra pair (no gold:
    the links are only ever read on dev and test).

A model trained on it sees each Greek training verse with three English renderings: three times
the target text to learn the Greek words from, for a corpus of 6,310 training verses. Both files
are gzip-compressed with ``mtime=0``: a rebuild gives identical bytes. Standard library only.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the Bible corpus's (SWORD's) name of a New Testament book, where it differs from nt_grc_en's
BOOKS = {"1 Corinthians": "I Corinthians", "2 Corinthians": "II Corinthians",
         "1 Thessalonians": "I Thessalonians", "2 Thessalonians": "II Thessalonians",
         "1 Timothy": "I Timothy", "2 Timothy": "II Timothy", "1 Peter": "I Peter", "2 Peter": "II Peter",
         "1 John": "I John", "2 John": "II John", "3 John": "III John", "Revelation": "Revelation of John"}
#: the extra translations: the Bible corpus's column and the key suffix of their pairs
EXTRA = (("en", "KJV"), ("en_web", "WEB"))


def bible_key(key: str) -> str:
    """``nt_grc_en``'s verse key as the Bible corpus writes it (``1 John 1:1`` -> ``I John 1:1``)."""
    book, _, verse = key.rpartition(" ")
    return f"{BOOKS.get(book, book)} {verse}"


def read_tsv(path: Path) -> tuple[list[str], list[list[str]]]:
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines[0].split("\t"), [line.split("\t") for line in lines[1:]]


def build(nt_tsv: Path, nt_align: Path, bible_tsv: Path) -> tuple[str, str, dict]:
    """The two files' text and the report of what was added and left out."""
    header, rows = read_tsv(nt_tsv)
    col = {name: i for i, name in enumerate(header)}
    with gzip.open(nt_align, "rt", encoding="utf-8", newline="\n") as f:
        align = f.read().split("\n")
    if align and align[-1] == "":
        align.pop()
    if len(align) != len(rows):
        sys.exit(f"error: {nt_align}: {len(align)} lines for {len(rows)} rows of {nt_tsv}")
    bible_header, bible_rows = read_tsv(bible_tsv)
    bcol = {name: i for i, name in enumerate(bible_header)}
    bible = {r[bcol["key"]]: r for r in bible_rows}
    extra, report = [], {"train_verses": 0, "added": {}, "not_in_bible": [], "empty": {}}
    for row in rows:
        if row[col["split"]] != "train":
            continue
        report["train_verses"] += 1
        found = bible.get(bible_key(row[col["key"]]))
        if found is None:
            report["not_in_bible"].append(row[col["key"]])
            continue
        for column, name in EXTRA:
            text = found[bcol[column]].strip()
            if not text:
                report["empty"].setdefault(name, []).append(row[col["key"]])
                continue
            out = list(row)
            out[col["key"]], out[col["en"]] = f"{row[col['key']]} ({name})", text
            extra.append(out)
            report["added"][name] = report["added"].get(name, 0) + 1
    tsv = "\n".join(["\t".join(header), *("\t".join(r) for r in rows), *("\t".join(r) for r in extra)]) + "\n"
    links = "\n".join([*align, *([""] * len(extra))]) + "\n"
    report["rows"] = len(rows) + len(extra)
    return tsv, links, report


def write_gzip(path: Path, text: str) -> None:
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=buffer, mode="wb", mtime=0) as gz:
        gz.write(text.encode("utf-8"))
    path.write_bytes(buffer.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nt", type=Path, default=ROOT / "data/nt_grc_en/nt.grc-en.tsv.gz")
    parser.add_argument("--bible", type=Path, default=ROOT / "data/bible/bible.es-en.tsv.gz")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "data/nt_grc_en")
    args = parser.parse_args(argv)
    tsv, links, report = build(args.nt, args.nt.with_name(args.nt.name.replace(".tsv.gz", ".align.gz")), args.bible)
    write_gzip(args.out_dir / "nt.grc-en.x3.tsv.gz", tsv)
    write_gzip(args.out_dir / "nt.grc-en.x3.align.gz", links)
    summary = {**report, "not_in_bible": len(report["not_in_bible"]), "not_in_bible_keys": report["not_in_bible"],
               "empty": {k: len(v) for k, v in report["empty"].items()}}
    print(json.dumps(summary, indent=1, ensure_ascii=False), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
