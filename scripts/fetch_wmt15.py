#!/usr/bin/env python3
"""Fetch WMT'15 German -> English with mtdata and lay it out as the pipeline's input.

The corpus of [Shu & Nakayama 2017] (docs/wmt15.md): the WMT'15 constrained task's parallel
training data for German-English (Europarl v7, Common Crawl, News Commentary; about 4.5M pairs),
newstest2015 as the test set and newstest2013 as the dev set (the paper does not name its dev
set: that choice is ours). Downloading and parsing are mtdata's (``pip install 'mtdata>=0.5.1'``,
or ``pip install -e '.[wmt]'``); this script runs its command line, then converts mtdata's output
folder into the files ``conf/data/wmt15_de_en.yaml`` names::

    python scripts/fetch_wmt15.py                     # mtdata get ... -o build/wmt15_mtdata, then convert
    python scripts/fetch_wmt15.py --dry-run           # print the mtdata command and the files; run nothing
    python scripts/fetch_wmt15.py --from DIR          # convert a folder mtdata already wrote (offline)

Writes into ``--out-dir`` (default ``data/wmt15_de_en``): ``train.de``/``train.en`` (the three
training parts concatenated in the order of ``TRAIN_IDS``: a fixed order, so the filter stage
meets the same corpus on every machine, which decides which copy of a duplicate it keeps and
what SentencePiece samples; mtdata's own ``--merge`` orders the parts by a set),
``dev.de``/``dev.en`` (newstest2013) and ``test.de``/``test.en`` (newstest2015), which the data
config reads as the pipeline's fixed dev and test sets (``data.dev_src`` ... ``data.test_tgt``),
UTF-8, one sentence per line, each pair of files with the same number of lines; ``fetch_report.json`` (the dataset
IDs, the lines of every part, mtdata's signature); mtdata's ``references.bib`` (how to cite each
corpus); a ``.gitignore`` that keeps the fetched files out of git.

mtdata's output layout (mtdata 0.5.1, ``mtdata.data.Dataset``): ``train-parts/<ID>.deu`` and
``train-parts/<ID>.eng`` for each training dataset, ``tests/<ID>.deu`` and ``tests/<ID>.eng`` for
each dev and test set, each finished part marked by an empty ``.valid.<ID>`` beside it, failures
listed in ``errors.tsv``. The files are named by the dataset's own language codes whatever the
order of ``-l``. A missing or unfinished part, an ``errors.tsv`` with an entry, an empty file,
mismatched line counts or a line that is not UTF-8 is refused with one line naming the file, and
nothing is written. Standard library only; the network is used by mtdata's download alone (its
cache: ``$MTDATA``, default ``~/.mtdata``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

LANGS = "deu-eng"  # mtdata's -l: German source, English target
SIDES = (("deu", "de"), ("eng", "en"))  # mtdata's file suffix -> the pipeline's file suffix

# The WMT'15 constrained de-en training data, by mtdata ID (checked against mtdata 0.5.1's index).
# Europarl v7 and Common Crawl are the tarballs WMT'15 linked (first released for WMT'13).
# News Commentary v10 (WMT'15's release, ~216k de-en pairs) is not in mtdata's index; v13, the
# nearest release from statmt.org itself (WMT'18, ~284k pairs), stands in for it (--nc-id).
EUROPARL_ID = "Statmt-europarl_wmt13-7-deu-eng"
COMMONCRAWL_ID = "Statmt-commoncrawl_wmt13-1-deu-eng"
NEWS_COMMENTARY_ID = "Statmt-news_commentary_wmt18-13-deu-eng"
TRAIN_IDS = (EUROPARL_ID, COMMONCRAWL_ID, NEWS_COMMENTARY_ID)
DEV_ID = "Statmt-newstest-2013-eng-deu"       # newstest2013 (multi-way; mtdata lists it en-de)
TEST_ID = "Statmt-newstest_deen-2015-deu-eng"  # newstest2015, the German-original de-en test set

DEFAULT_OUT = Path("data/wmt15_de_en")
DEFAULT_WORK = Path("build/wmt15_mtdata")  # mtdata's -o (build/ is ignored by git)
SPLITS = ("train", "dev", "test")
OUTPUTS = tuple(f"{split}.{ext}" for split in SPLITS for _, ext in SIDES)


class FetchError(Exception):
    """A refusal: ``path: reason``, printed as one line."""

    def __init__(self, path: Path | str, reason: str):
        super().__init__(f"{path}: {reason}")


def mtdata_command(mtdata: list[str], work_dir: Path, train_ids=TRAIN_IDS) -> list[str]:
    """The ``mtdata get`` command line that downloads every part into ``work_dir``."""
    return [*mtdata, "get", "--langs", LANGS, "--train", *train_ids, "--dev", DEV_ID,
            "--test", TEST_ID, "--no-merge", "--fail", "--out", str(work_dir)]


def find_mtdata(given: str | None) -> list[str]:
    """The command that runs mtdata: ``given`` (split like a shell word list), else ``mtdata``
    on PATH, else ``python -m mtdata`` when this interpreter has it installed."""
    if given:
        return shlex.split(given)
    if shutil.which("mtdata"):
        return ["mtdata"]
    if importlib.util.find_spec("mtdata") is not None:
        return [sys.executable, "-m", "mtdata"]
    raise FetchError("mtdata", "not found: pip install 'mtdata>=0.5.1' (or pip install -e '.[wmt]'), "
                     "or name the command with --mtdata")


def parts(work_dir: Path, train_ids=TRAIN_IDS) -> dict[str, list[tuple[str, Path, Path]]]:
    """Per split, the ``(ID, German file, English file)`` of each part in mtdata's layout."""
    def pair(folder: str, did: str) -> tuple[str, Path, Path]:
        return did, work_dir / folder / f"{did}.deu", work_dir / folder / f"{did}.eng"
    return {"train": [pair("train-parts", did) for did in train_ids],
            "dev": [pair("tests", DEV_ID)], "test": [pair("tests", TEST_ID)]}


def count_lines(path: Path) -> int:
    """The lines of ``path`` (a last line without a newline counts). Refuses a missing or empty file."""
    if not path.is_file():
        raise FetchError(path, "missing (mtdata did not write it)")
    newlines, last, size = 0, b"\n", 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            newlines += block.count(b"\n")
            size += len(block)
            last = block[-1:]
    if not size:
        raise FetchError(path, "file is empty")
    return newlines + (last != b"\n")


def check(work_dir: Path, train_ids=TRAIN_IDS) -> dict[str, list[dict]]:
    """Check mtdata's folder before anything is written: every part finished and present, no
    error recorded, each German file with as many lines as its English file. Returns per split
    the line count of each part."""
    if not work_dir.is_dir():
        raise FetchError(work_dir, "not a folder (mtdata's -o output)")
    errors = work_dir / "errors.tsv"
    recorded = errors.read_text(encoding="utf-8", errors="replace").split("\n") if errors.is_file() else []
    recorded = [line.replace("\t", " ") for line in recorded if line.strip()]
    if recorded:
        raise FetchError(errors, f"mtdata failed on a dataset: {recorded[0][:200]}")
    counts: dict[str, list[dict]] = {}
    for split, items in parts(work_dir, train_ids).items():
        counts[split] = []
        for did, de, en in items:
            flag = de.parent / f".valid.{did}"
            n_de, n_en = count_lines(de), count_lines(en)
            if not flag.is_file():
                raise FetchError(de, f"unfinished: mtdata writes {flag.name} when a part is complete")
            if n_de != n_en:
                raise FetchError(en, f"has {n_en} lines but {de} has {n_de}: the files are not line-aligned")
            counts[split].append({"id": did, "lines": n_de})
    return counts


def _copy(sources: list[Path], dest: Path) -> int:
    """Append the lines of ``sources`` to ``dest`` byte for byte (each line ending in a newline),
    checking that each is UTF-8. Returns the lines written."""
    written = 0
    with open(dest, "wb") as out:
        for path in sources:
            with open(path, "rb") as handle:
                for line_no, line in enumerate(handle, start=1):
                    try:
                        line.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise FetchError(f"{path}:{line_no}",
                                         f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc
                    out.write(line if line.endswith(b"\n") else line + b"\n")
                    written += 1
    return written


def convert(work_dir: Path, out_dir: Path, train_ids=TRAIN_IDS) -> dict:
    """Write ``{train,dev,test}.{de,en}`` and the report into ``out_dir`` from mtdata's
    ``work_dir``; all or nothing (a refusal leaves ``out_dir`` as it was)."""
    counts = check(work_dir, train_ids)
    layout = parts(work_dir, train_ids)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=out_dir))
    done = False
    try:
        lines = {}
        for split in SPLITS:
            for column, (_, ext) in enumerate(SIDES, start=1):
                lines[f"{split}.{ext}"] = _copy([item[column] for item in layout[split]], tmp / f"{split}.{ext}")
            if lines[f"{split}.de"] != lines[f"{split}.en"]:  # the files changed while being read
                raise FetchError(tmp / f"{split}.en", f"has {lines[f'{split}.en']} lines but {split}.de has "
                                 f"{lines[f'{split}.de']}: the files are not line-aligned")
        signature = work_dir / "mtdata.signature.txt"
        report = {
            "corpus": "WMT'15 German-English (docs/wmt15.md)",
            "langs": LANGS, "train": counts["train"], "dev": counts["dev"][0], "test": counts["test"][0],
            "lines": lines,
            "mtdata_signature": signature.read_text(encoding="utf-8").strip() if signature.is_file() else None,
        }
        (tmp / "fetch_report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        refs = work_dir / "references.bib"
        if refs.is_file():
            shutil.copyfile(refs, tmp / "references.bib")
        (tmp / ".gitignore").write_text("# fetched by scripts/fetch_wmt15.py: not kept in git\n*\n", encoding="utf-8")
        for path in sorted(tmp.iterdir()):
            os.replace(path, out_dir / path.name)
        done = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if created and not done:
            shutil.rmtree(out_dir, ignore_errors=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT,
                        help=f"where the pipeline's files go (default: {DEFAULT_OUT}, conf/data/wmt15_de_en.yaml's)")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK,
                        help=f"mtdata's output folder (-o; default: {DEFAULT_WORK})")
    parser.add_argument("--from", dest="from_dir", type=Path, default=None,
                        help="convert this folder mtdata already wrote; download nothing")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the mtdata command and the files it would give; run and write nothing "
                             "(with --from: also check that folder)")
    parser.add_argument("--mtdata", default=None, help="the command that runs mtdata (default: mtdata on PATH)")
    parser.add_argument("--nc-id", default=NEWS_COMMENTARY_ID,
                        help=f"the News Commentary dataset (default: {NEWS_COMMENTARY_ID}; v10 is not in mtdata)")
    args = parser.parse_args(argv)
    train_ids = (EUROPARL_ID, COMMONCRAWL_ID, args.nc_id)
    try:
        work_dir = args.from_dir or args.work_dir
        if args.dry_run:
            if args.from_dir is None:
                mtdata = shlex.split(args.mtdata) if args.mtdata else ["mtdata"]
                print(shlex.join(mtdata_command(mtdata, work_dir, train_ids)))
            else:
                for split, items in check(work_dir, train_ids).items():
                    for item in items:
                        print(f"{split}\t{item['id']}\t{item['lines']} lines")
            for name in OUTPUTS:
                print(args.out_dir / name)
            return 0
        if args.from_dir is None:
            command = mtdata_command(find_mtdata(args.mtdata), work_dir, train_ids)
            print("running:", shlex.join(command), file=sys.stderr)
            status = subprocess.run(command, check=False).returncode
            if status:
                raise FetchError(work_dir, f"mtdata exited with status {status} (its messages are above)")
        report = convert(work_dir, args.out_dir, train_ids)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    lines = report["lines"]
    print(f"wrote {args.out_dir}: train {lines['train.de']}, dev {lines['dev.de']}, test {lines['test.de']} "
          "pairs (dev: newstest2013, test: newstest2015)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
