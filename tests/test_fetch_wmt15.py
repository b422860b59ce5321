"""scripts/fetch_wmt15.py and conf/data/wmt15_de_en.yaml, offline: the conversion of a small
folder laid out as mtdata 0.5.1 writes it (``mtdata get -l deu-eng ... -o DIR``), its refusals,
and the data config, which must name the files the script writes and compose with the paper
profile. Nothing is downloaded; mtdata itself is consulted only where it is installed, and then
only offline (its index and its argument parser)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from conftest import compose_params, load_script, run_inprocess

fetch = load_script("fetch_wmt15")

EUROPARL, COMMONCRAWL, NEWS = fetch.TRAIN_IDS
# mtdata's layout, as `mtdata get` 0.5.1 wrote it for these IDs (checked by running it on a cache
# seeded with small archives): files named <ID>.<iso-639-3 code of the dataset's own sides>, an
# empty .valid.<ID> beside each finished part, dev/test links to the parts at the top.
TRAIN = {EUROPARL: (["Wiederaufnahme der Sitzungsperiode",
                     "Ich erkläre die Sitzung für eröffnet."],
                    ["Resumption of the session", "I declare the session open."]),
         COMMONCRAWL: (["Grüße aus Köln", "Straße, Größe, Maß"], ["Greetings from Cologne", "street, size, measure"]),
         NEWS: (["Der Euro im Jahr 2015"], ["The euro in 2015"])}
DEV = (["Eine Nachricht aus dem Jahr 2013."], ["A piece of news from 2013."])
TEST = (["Die Prüfung von 2015.", "Zweiter Satz – mit Gedankenstrich."],
        ["The test of 2015.", "Second sentence – with a dash."])


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def mtdata_folder(root):
    """A folder in mtdata 0.5.1's output layout for the script's IDs (what -o DIR holds)."""
    (root / "train-parts").mkdir(parents=True)
    (root / "tests").mkdir()
    for did, (de, en) in TRAIN.items():
        _write(root / "train-parts" / f"{did}.deu", de)
        _write(root / "train-parts" / f"{did}.eng", en)
        (root / "train-parts" / f".valid.{did}").touch()
    for did, (de, en), link in ((fetch.DEV_ID, DEV, "dev"), (fetch.TEST_ID, TEST, "test1")):
        _write(root / "tests" / f"{did}.deu", de)
        _write(root / "tests" / f"{did}.eng", en)
        (root / "tests" / f".valid.{did}").touch()
        for code in ("deu", "eng"):
            (root / f"{link}.{code}").symlink_to(f"tests/{did}.{code}")
    (root / "references.bib").write_text("%% Statmt-europarl_wmt13-7-deu-eng\n@inproceedings{koehn2005}\n",
                                         encoding="utf-8")
    (root / "mtdata.signature.txt").write_text("mtdata get -l deu-eng ... -o <out-dir>\nmtdata version 0.5.1\n",
                                               encoding="utf-8")
    return root


@pytest.fixture
def work(tmp_path):
    return mtdata_folder(tmp_path / "mtdata")


def run(capsys, *args):
    code = fetch.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_converts_mtdata_output_into_the_pipeline_files(work, tmp_path, capsys):
    out_dir = tmp_path / "out"
    code, stdout, err = run(capsys, "--from", work, "--out-dir", out_dir)
    assert code == 0, err
    assert "train 5, dev 1, test 2 pairs" in stdout
    expect = {"train.de": [s for did in fetch.TRAIN_IDS for s in TRAIN[did][0]],
              "train.en": [s for did in fetch.TRAIN_IDS for s in TRAIN[did][1]],
              "dev.de": DEV[0], "dev.en": DEV[1], "test.de": TEST[0], "test.en": TEST[1]}
    assert set(fetch.OUTPUTS) == set(expect)
    for name, lines in expect.items():
        raw = (out_dir / name).read_bytes()
        assert raw.decode("utf-8").split("\n") == [*lines, ""], name  # UTF-8, one sentence a line, in order
    report = json.loads((out_dir / "fetch_report.json").read_text(encoding="utf-8"))
    assert [part["id"] for part in report["train"]] == list(fetch.TRAIN_IDS)
    assert [part["lines"] for part in report["train"]] == [2, 2, 1]
    assert report["dev"] == {"id": "Statmt-newstest-2013-eng-deu", "lines": 1}
    assert report["test"] == {"id": "Statmt-newstest_deen-2015-deu-eng", "lines": 2}
    assert report["lines"] == {"train.de": 5, "train.en": 5, "dev.de": 1, "dev.en": 1, "test.de": 2, "test.en": 2}
    assert report["mtdata_signature"].endswith("mtdata version 0.5.1")
    assert (out_dir / "references.bib").read_text(encoding="utf-8").startswith("%% Statmt-europarl")
    assert (out_dir / ".gitignore").read_text(encoding="utf-8").splitlines()[-1] == "*"
    assert not [p for p in out_dir.iterdir() if p.name.startswith(".fetch-")]  # no temporary folder left


def test_a_last_line_without_newline_is_kept(work, tmp_path, capsys):
    for code in ("deu", "eng"):
        path = work / "tests" / f"{fetch.TEST_ID}.{code}"
        path.write_bytes(path.read_bytes().rstrip(b"\n"))
    code, _, err = run(capsys, "--from", work, "--out-dir", tmp_path / "out")
    assert code == 0, err
    assert (tmp_path / "out" / "test.en").read_text(encoding="utf-8") == "".join(s + "\n" for s in TEST[1])


def _drop_line(work):
    path = work / "train-parts" / f"{COMMONCRAWL}.eng"
    path.write_text(path.read_text(encoding="utf-8").split("\n", 1)[1], encoding="utf-8")
    return f"train-parts/{COMMONCRAWL}.eng: has 1 lines but ", "has 2: the files are not line-aligned"


def _remove_part(work):
    (work / "train-parts" / f"{NEWS}.eng").unlink()
    return f"train-parts/{NEWS}.eng: missing (mtdata did not write it)", ""


def _unfinished(work):
    (work / "tests" / f".valid.{fetch.TEST_ID}").unlink()
    return f"tests/{fetch.TEST_ID}.deu: unfinished", f".valid.{fetch.TEST_ID}"


def _empty(work):
    (work / "tests" / f"{fetch.DEV_ID}.deu").write_bytes(b"")
    return f"tests/{fetch.DEV_ID}.deu: file is empty", ""


def _not_utf8(work):
    (work / "tests" / f"{fetch.TEST_ID}.eng").write_bytes(b"fine\n\xff broken\n")
    return f"tests/{fetch.TEST_ID}.eng:2: not valid UTF-8", ""


def _mtdata_error(work):
    (work / "errors.tsv").write_text(f"{NEWS}\tHTTPError 404\n", encoding="utf-8")
    return "errors.tsv: mtdata failed on a dataset: ", f"{NEWS} HTTPError 404"


@pytest.mark.parametrize("damage", [_drop_line, _remove_part, _unfinished, _empty, _not_utf8, _mtdata_error])
def test_a_broken_folder_is_refused_in_one_line_naming_the_file(work, tmp_path, capsys, damage):
    out_dir = tmp_path / "out"
    head, tail = damage(work)
    code, stdout, err = run(capsys, "--from", work, "--out-dir", out_dir)
    assert code == 1 and not stdout
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {work}/{head}"), err
    assert tail in err
    assert not out_dir.exists()  # nothing written, not even the folder


def test_a_refusal_leaves_the_previous_files_in_place(work, tmp_path, capsys):
    out_dir = tmp_path / "out"
    assert run(capsys, "--from", work, "--out-dir", out_dir)[0] == 0
    before = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    _not_utf8(work)  # found while copying, after the line counts passed
    assert run(capsys, "--from", work, "--out-dir", out_dir)[0] == 1
    assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == before


def test_dry_run_prints_the_mtdata_command_and_writes_nothing(work, tmp_path, capsys):
    out_dir = tmp_path / "out"
    code, stdout, _ = run(capsys, "--dry-run", "--work-dir", tmp_path / "w", "--out-dir", out_dir)
    assert code == 0
    command = stdout.splitlines()[0].split()
    assert command[:4] == ["mtdata", "get", "--langs", "deu-eng"]
    train = command[command.index("--train") + 1:command.index("--dev")]
    assert train == list(fetch.TRAIN_IDS)
    assert command[command.index("--dev") + 1] == "Statmt-newstest-2013-eng-deu"
    assert command[command.index("--test") + 1] == "Statmt-newstest_deen-2015-deu-eng"
    assert command[command.index("--out") + 1] == str(tmp_path / "w")
    assert "--merge" not in command  # mtdata's merge orders the parts by a set
    assert stdout.splitlines()[1:] == [str(out_dir / name) for name in fetch.OUTPUTS]
    code, stdout, _ = run(capsys, "--dry-run", "--from", work, "--out-dir", out_dir)
    assert code == 0 and f"train\t{EUROPARL}\t2 lines" in stdout and f"test\t{fetch.TEST_ID}\t2 lines" in stdout
    assert not out_dir.exists() and not (tmp_path / "w").exists()


def test_a_missing_mtdata_is_named_with_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fetch.shutil, "which", lambda name: None)
    monkeypatch.setattr(fetch.importlib.util, "find_spec", lambda name: None)
    code, _, err = run(capsys, "--work-dir", tmp_path / "w", "--out-dir", tmp_path / "out")
    assert code == 1 and err.startswith("error: mtdata: not found: pip install 'mtdata>=0.5.1'"), err


def test_the_config_composes_with_the_paper_profile_and_names_the_scripts_files(tmp_path):
    from flexatt import schema

    params = schema.validate(OmegaConf.load(compose_params(tmp_path, "data=wmt15_de_en", "profile=paper",
                                                           test_precision=False)))
    assert params.profile == "paper" and params.model.hidden_size == 1000 and params.decode.beam_size == 20
    data = params.data
    assert (data.name, data.src_lang, data.tgt_lang) == ("wmt15_de_en", "de", "en")
    assert (data.src, data.tgt) == (str(fetch.DEFAULT_OUT / "train.de"), str(fetch.DEFAULT_OUT / "train.en"))
    assert (data.dev_src, data.dev_tgt) == (str(fetch.DEFAULT_OUT / "dev.de"), str(fetch.DEFAULT_OUT / "dev.en"))
    assert (data.test_src, data.test_tgt) == (str(fetch.DEFAULT_OUT / "test.de"), str(fetch.DEFAULT_OUT / "test.en"))
    assert data.tsv is None and data.synthetic is None and data.align is None and data.ref2 is None
    assert {f"data/wmt15_de_en/{name}" for name in fetch.OUTPUTS} == {
        data.src, data.tgt, data.dev_src, data.dev_tgt, data.test_src, data.test_tgt}


def test_the_filter_stage_reads_what_the_script_writes(work, tmp_path, capsys):
    """The converted folder at the config's own (relative) paths is the pipeline's input:
    newstest2013 is the dev set and newstest2015 the test set, whole, whatever filter.dev_size
    and filter.test_size say."""
    run_dir = tmp_path / "run"
    compose_params(run_dir, "data=wmt15_de_en", "profile=paper", test_precision=False)
    assert run(capsys, "--from", work, "--out-dir", run_dir / fetch.DEFAULT_OUT)[0] == 0
    code, err = run_inprocess("filter", ["filter.dev_size=1", "filter.test_size=1"], capsys, cwd=run_dir)
    assert code == 0, err
    report = json.loads((run_dir / "artifacts/filter/report.json").read_text(encoding="utf-8"))
    folder = "data/wmt15_de_en"
    assert report["source"] == {"kind": "text", "src": f"{folder}/train.de", "tgt": f"{folder}/train.en",
                                "dev_src": f"{folder}/dev.de", "dev_tgt": f"{folder}/dev.en",
                                "test_src": f"{folder}/test.de", "test_tgt": f"{folder}/test.en"}
    assert report["split_by"] == "fixed (files data.dev_src, data.test_src)"
    assert report["read"] == 8 and report["kept"] == 8
    assert {split: v["pairs"] for split, v in report["splits"].items()} == {"train": 5, "dev": 1, "test": 2}
    for split, lines in (("dev", DEV), ("test", TEST)):
        for side, ext in ((0, "src"), (1, "tgt")):
            written = (run_dir / f"artifacts/filter/{split}.{ext}").read_text(encoding="utf-8").splitlines()
            assert written == lines[side], (split, ext)


def test_the_ids_and_file_names_are_mtdatas(tmp_path, monkeypatch):
    """Where mtdata is installed: its index knows every ID, its layout names the files the script
    reads, and its own argument parser takes the script's command line (all offline)."""
    pytest.importorskip("mtdata")
    from pathlib import Path

    from mtdata import main as mtdata_main
    from mtdata.data import Dataset
    from mtdata.entry import DatasetId
    from mtdata.index import INDEX
    from mtdata.iso.bcp47 import bcp47

    langs = (bcp47("deu"), bcp47("eng"))
    for split, items in fetch.parts(Path("W")).items():
        folder = "train-parts" if split == "train" else "tests"
        for did, de, en in items:
            entry = INDEX[DatasetId.parse(did)]
            assert entry.is_compatible(langs), did
            names = {p.name for p in Dataset.get_paths(Path("W") / folder, entry)[:2]}
            assert names == {de.name, en.name} and de.parent.name == en.parent.name == folder, did
    monkeypatch.setattr(sys, "argv", fetch.mtdata_command(["mtdata"], tmp_path / "w"))
    args = mtdata_main.parse_args()
    assert args.task == "get" and not args.merge_train and args.fail_on_error
    assert [str(d) for d in args.train_dids] == list(fetch.TRAIN_IDS)
    assert [str(d) for d in args.dev_dids] == [fetch.DEV_ID] and [str(d) for d in args.test_dids] == [fetch.TEST_ID]
    if shutil.which("mtdata"):
        usage = subprocess.run(["mtdata", "get", "--help"], capture_output=True, text=True, check=False).stdout
        assert "--no-merge" in usage and "--fail" in usage
