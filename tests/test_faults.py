"""Faults: a write that fails half-way, a full disk, a folder that cannot be written, a corrupt
checkpoint, and `dvc repro` killed with `kill -9` in the middle of training.

The full disk is simulated without privileges: ``RLIMIT_FSIZE`` in a subprocess (with
``SIGXFSZ`` ignored, every write past the limit fails with ``EFBIG``, "File too large", at the
system-call level, whatever library writes), or ``/dev/full`` (a real ``ENOSPC``) substituted for
the temporary file in-process. A folder that cannot be written is a path whose parent is a
regular file (which stops root too); a read-only folder (chmod) is tested only when not root.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import flexatt.io
from conftest import copy_of, run_module
from flexatt import config as C
from flexatt.data.subwords import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from flexatt.errors import OutputError
from flexatt.io import atomic_path, write_json, write_lines

ENV = {**os.environ, "WANDB_MODE": "offline"}


def _limit_file_size(limit: int):
    """preexec_fn: writes past ``limit`` bytes fail with EFBIG instead of killing the process."""
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _temporaries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*") if p.name.endswith((".tmp", ".old")))


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


# ----------------------------------------------------------------------- atomic writes (units)


def test_failure_mid_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "out.txt"
    write_lines(target, ["old"])

    def lines():
        yield "new 1"
        yield "new 2"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_lines(target, lines())
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"], "no temporary may be left"


def test_failure_mid_write_keeps_the_old_directory(tmp_path):
    target = tmp_path / "tok"
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "a.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "a.txt").write_text("new")
        raise RuntimeError("half-way")
    assert _tree_digest(target) == {"a.txt": hashlib.sha256(b"old").hexdigest()}
    assert os.listdir(tmp_path) == ["tok"]


def test_directory_that_cannot_be_renamed_in_puts_the_old_one_back(tmp_path, monkeypatch):
    target = tmp_path / "tok"
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "a.txt").write_text("old")
    real_replace = os.replace

    def replace(src, dst):
        if Path(src).name.startswith(".tok.") and Path(src).name.endswith(".tmp"):
            raise OSError(errno.EIO, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(flexatt.io.os, "replace", replace)
    with pytest.raises(OutputError, match=r"tok: Input/output error"), atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "a.txt").write_text("new")
    assert (target / "a.txt").read_text() == "old"
    assert os.listdir(tmp_path) == ["tok"]


_WRITERS = r"""
import json, os, resource, sys
from pathlib import Path
import numpy as np
import torch
from flexatt import figures
from flexatt.data.subwords import EncodedSplit
from flexatt.data.subwords import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from flexatt.errors import OutputError
from flexatt.io import atomic_path, save_torch, write_json, write_lines

root = Path(sys.argv[1])
limit = int(sys.argv[2])
big = 4 * limit
writers = {
    "lines.txt": lambda p: write_lines(p, ["x" * 99] * (big // 100)),
    "data.json": lambda p: write_json(p, {"rows": ["y" * 99] * (big // 100)}),
    "split.npz": lambda p: EncodedSplit.from_lists([[5] * 50] * (big // 100), [[6]] * (big // 100)).save(p),
    "model.ckpt": lambda p: save_torch({"w": torch.arange(big, dtype=torch.float32)}, p),
    "figure.png": lambda p: figures.step_curves({"noise": np.random.default_rng(0).random(3000)}, p, "y", "t"),
    "folder": lambda p: _folder(p),
}

def _folder(p):
    with atomic_path(p) as tmp:
        tmp.mkdir()
        write_lines(tmp / "small.txt", ["ok"])
        write_lines(tmp / "big.txt", ["z" * 99] * (big // 100))

for name in writers:  # the old outputs: small, written before the limit
    target = root / name
    if name == "folder":
        target.mkdir()
        (target / "old.txt").write_text("old")
    else:
        target.write_bytes(b"old " + name.encode())
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
results = {}
for name, write in writers.items():
    try:
        write(root / name)
        results[name] = "written"
    except OutputError as exc:
        results[name] = str(exc)
    except BaseException as exc:
        results[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(results))
"""


def test_every_writer_fails_cleanly_on_a_full_disk(tmp_path):
    """Each kind of output (text, JSON, .npz, checkpoint, PNG, a folder) under a file size
    limit: one OutputError naming the file, the old output intact, no temporary left."""
    limit = 20_000
    result = subprocess.run([sys.executable, "-c", _WRITERS, str(tmp_path), str(limit)], capture_output=True,
                            text=True, env=ENV, preexec_fn=_limit_file_size(10**9), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    for name, message in outcome.items():
        where = tmp_path / name / "big.txt" if name == "folder" else tmp_path / name
        assert message == f"{where}: File too large", (name, message)
    for name in outcome:
        if name == "folder":
            assert _tree_digest(tmp_path / name) == {"old.txt": hashlib.sha256(b"old").hexdigest()}
        else:
            assert (tmp_path / name).read_bytes() == b"old " + name.encode(), name
    assert sorted(os.listdir(tmp_path)) == sorted(outcome), "temporaries left behind"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_no_space_left_on_device_names_the_file(tmp_path, monkeypatch):
    """A real ENOSPC (writes to /dev/full) while writing: the message names the output."""
    target = tmp_path / "metrics.json"
    write_json(target, {"old": 1})
    real_open = open

    def full_open(file, mode="r", *args, **kwargs):
        return real_open("/dev/full", mode, *args, **kwargs) if "w" in mode else real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(flexatt.io, "open", full_open, raising=False)
    with pytest.raises(OutputError) as info:
        write_json(target, {"new": 2})
    assert str(info.value) == f"{target}: No space left on device"
    assert json.loads(target.read_text()) == {"old": 1}
    assert os.listdir(tmp_path) == ["metrics.json"]


def test_json_outputs_hold_no_nan_or_infinity(tmp_path):
    """τ = ∞ under a τ key (the fine-tuning effect's ``tau_control`` too) is written ``null`` and
    read back as ∞; any other NaN or infinity is refused, naming the file, and nothing is written."""
    import math

    from flexatt.tau import from_json

    target = tmp_path / "metrics.json"
    record = {"flexible_ft": {"control": "flexible_ctl", "tau": math.inf, "tau_control": math.inf, "bleu": 0.1}}
    write_json(target, record)
    assert "Infinity" not in target.read_text() and json.loads(target.read_text())["flexible_ft"]["tau_control"] is None
    assert from_json(json.loads(target.read_text())) == record
    for bad in (math.nan, math.inf):
        with pytest.raises(OutputError, match=r"metrics2\.json: not written: .*NaN or an infinity"):
            write_json(tmp_path / "metrics2.json", {"bleu": bad})
    assert not (tmp_path / "metrics2.json").exists()


def test_kill_during_a_write_leaves_the_old_file_and_only_a_hidden_temporary(tmp_path):
    target = tmp_path / "translations.txt"
    write_lines(target, ["old"])
    script = ("import sys, time\nfrom flexatt.io import write_lines\n"
              "def lines():\n"
              "    for i in range(100000):\n"
              "        if i == 5000:\n"
              "            print('half', flush=True)\n"
              "            time.sleep(120)\n"
              "        yield 'x' * 80\n"
              "write_lines(sys.argv[1], lines())\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert proc.stdout.readline().strip() == "half"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert target.read_text() == "old\n"
    left = sorted(set(os.listdir(tmp_path)) - {"translations.txt"})
    assert all(re.fullmatch(r"\.translations\.txt\..+\.tmp", name) for name in left), left


def test_only_atomic_writers_in_the_package(root):
    """Audit: every place in src/flexatt that opens a file for writing or saves one (open 'w',
    write_text/write_bytes, torch.save, np.save*, savefig, copyfile/move) does it on a temporary
    path of flexatt.io.atomic_path (or is listed here with the reason it is safe)."""
    pattern = re.compile(r"open\([^)]*['\"][wax]b?['\"]|\.write_(text|bytes)\(|torch\.save\(|np\.save|"
                         r"\.savefig\(|shutil\.(copy|copyfile|move)\(")
    allowed = {
        # the SentencePiece model is rewritten inside the tokenize stage's temporary folder
        ("data/subwords.py", "model_path.write_bytes("),
        # the tokenize stage fills its temporary folder
        ("stages/tokenize.py", "shutil.copyfile(tmp"), ("stages/tokenize.py", "shutil.move(tmp"),
        ("stages/tokenize.py", "shutil.copyfile(in_dir"),
        # the tokenize stage's scratch files (the SentencePiece sample, the token ids) and the
        # streamed .npz members, all inside its temporary output folder
        ("stages/tokenize.py", "open(samples[0]"), ("stages/tokenize.py", "open(samples[1]"),
        ("stages/tokenize.py", "open(ids_file, \"wb\")"), ("stages/tokenize.py", "npz.open("),
        # the filter stage's split files, opened inside its temporary output folder
        ("stages/filter.py", "open(path, \"w\""),
        # flexatt repro's log of a stage, written as the stage runs (a log, not a product)
        ("schedule.py", "open(log, \"wb\")"),
        # a unit's products: written into write_products' temporary folder, or into memory
        # buffers whose bytes write_products writes
        ("products.py", "(tmp / name).write_bytes("), ("products.py", "(tmp / \"unit.json\").write_text("),
        ("units.py", "np.savez_compressed(buffer"), ("units.py", "torch.save({\"state_dict\": state"),
        # the report's Markdown, written to atomic_path's temporary file
        ("stages/report.py", "tmp.write_text(out[\"markdown\"]"),
        # flexatt.io itself: the temporary file of write_lines / write_json / save_torch
        ("io.py", "open(tmp"), ("io.py", "torch.save(obj, out)"),
    }
    offenders = []
    for path in sorted((root / "src/flexatt").rglob("*.py")):
        rel = path.relative_to(root / "src/flexatt").as_posix()
        lines = path.read_text().splitlines()
        for no, line in enumerate(lines, 1):
            if not pattern.search(line) or line.lstrip().startswith("#"):
                continue
            context = "\n".join(lines[max(0, no - 3):no])
            if "atomic_path(" in context or any(rel == f and s in line for f, s in allowed) or '``' in line:
                continue  # in an atomic_path block, allowed, or a docstring
            offenders.append(f"{rel}:{no}: {line.strip()}")
    assert not offenders, "non-atomic writes:\n" + "\n".join(offenders)


def test_checkpoints_and_translate_stats_are_written_atomically(root):
    """The two known exceptions of the audit above are gone (flexatt.io.save_torch, atomic_path)."""
    text = (root / "src/flexatt/task.py").read_text() + (root / "src/flexatt/cli.py").read_text()
    assert "torch.save(checkpoint, tmp)" not in text and 'open(args.stats, "w"' not in text


# ----------------------------------------------------------------------- run_stage and OS errors


def test_run_stage_reports_an_os_error_in_one_line(smoke_dir, monkeypatch, capsys):
    monkeypatch.chdir(smoke_dir)

    def task(cfg):
        raise OSError(errno.ENOSPC, "No space left on device", "results/metrics.json")

    with pytest.raises(SystemExit) as info:
        C.run_stage(task, [])
    assert info.value.code == 2
    assert _error_lines(capsys.readouterr().err) == ["error: results/metrics.json: No space left on device"]


@pytest.fixture
def filtered(smoke_dir):
    """The smoke profile's filter stage, run once: the earlier output a failed run must keep."""
    result = run_module("flexatt.stages.filter", cwd=smoke_dir)
    assert result.returncode == 0, result.stderr
    return smoke_dir


def test_full_disk_during_a_stage_is_one_line_and_keeps_the_earlier_output(filtered):
    before = _tree_digest(filtered / "artifacts")
    metrics = (filtered / "results/filter.json").read_bytes()
    result = subprocess.run([sys.executable, "-m", "flexatt.stages.filter", "filter.seed=7"], cwd=filtered, env=ENV,
                            capture_output=True, text=True, preexec_fn=_limit_file_size(8_000), timeout=600)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    errors = _error_lines(result.stderr)
    assert len(errors) == 1 and re.fullmatch(r"error: artifacts/filter/\w+\.\w+: File too large", errors[0]), errors
    assert _tree_digest(filtered / "artifacts") == before
    assert (filtered / "results/filter.json").read_bytes() == metrics
    assert _temporaries(filtered) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_no_space_left_during_a_stage(filtered, monkeypatch, capsys):
    """In-process, with every output file opened on /dev/full: a real ENOSPC."""
    from flexatt.stages import filter as filter_stage

    monkeypatch.chdir(filtered)
    before = _tree_digest(filtered / "artifacts")
    real_open = open
    full_open = lambda f, mode="r", *a, **k: real_open("/dev/full" if "w" in mode else f, mode, *a, **k)  # noqa: E731
    monkeypatch.setattr(flexatt.io, "open", full_open, raising=False)
    monkeypatch.setattr(filter_stage, "open", full_open, raising=False)  # it streams its split files
    with pytest.raises(SystemExit) as info:
        C.run_stage(filter_stage.run, ["filter.seed=7"])
    assert info.value.code == 2
    errors = _error_lines(capsys.readouterr().err)
    # the split files are written together, pair by pair: the first to fill its buffer fails
    assert len(errors) == 1 and re.fullmatch(r"error: artifacts/filter/(train|dev|test)\.\w+: No space left on device",
                                             errors[0]), errors
    assert _tree_digest(filtered / "artifacts") == before and _temporaries(filtered) == []


def test_output_folder_behind_a_file_is_one_line(filtered):
    (filtered / "blocker").write_text("a file where a folder should be\n")
    result = run_module("flexatt.stages.filter", "filter.out_dir=blocker/filter", "filter.metrics_file=r.json",
                        cwd=filtered)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert _error_lines(result.stderr) == ["error: blocker/filter: Not a directory: blocker (a file is in the way)"]
    assert not (filtered / "r.json").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders: covered by the file-in-the-way test")
def test_read_only_output_folder_is_one_line(filtered):
    results = filtered / "results"
    metrics = (results / "filter.json").read_bytes()
    results.chmod(0o555)
    try:
        result = run_module("flexatt.stages.filter", "filter.out_dir=elsewhere", cwd=filtered)
    finally:
        results.chmod(0o755)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert _error_lines(result.stderr) == ["error: results/filter.json: Permission denied"]
    assert (results / "filter.json").read_bytes() == metrics


# ----------------------------------------------------------------------- training: disk, folders, checkpoints


@pytest.fixture(scope="module")
def tokenized(smoke_tokenized, tmp_path_factory):
    return copy_of(smoke_tokenized, tmp_path_factory.mktemp("faults"))


def _train(cwd: Path, *overrides: str, preexec=None) -> subprocess.CompletedProcess:
    env = {**ENV, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "flexatt.stages.train", "train.variant=flexible", "train.epochs=1",
                           *overrides], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          preexec_fn=preexec)


@pytest.fixture(scope="module")
def trained(smoke_trained, tmp_path_factory):
    """One epoch of the flexible model: checkpoints in m/, metrics in r/."""
    return copy_of(smoke_trained, tmp_path_factory.mktemp("faults_trained"))


@pytest.mark.slow  # a training stage of its own
def test_unwritable_metrics_folder_keeps_the_checkpoints(trained):
    (trained / "blocker").write_text("")
    result = _train(trained, "train.out_dir=m2", "train.metrics_dir=blocker/metrics", "logger.enabled=false")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert _error_lines(result.stderr) == [
        "error: blocker/metrics/flexible.json: Not a directory: blocker (a file is in the way)"]
    from flexatt.checkpoints import load_checkpoint_state

    assert load_checkpoint_state(trained / "m2/flexible/best.ckpt")  # trained and saved before the failure


@pytest.mark.slow  # a training stage of its own
def test_full_disk_while_saving_a_checkpoint_is_one_line(trained):
    metrics = _tree_digest(trained / "r")
    result = _train(trained, "train.out_dir=m4", "train.metrics_dir=r", "logger.enabled=false",
                    preexec=_limit_file_size(100_000))  # the checkpoint (about 650 kB) cannot be written
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = _error_lines(result.stderr)
    assert len(errors) == 1 and re.fullmatch(r"error: (/.*/)?m4/flexible/(best|last)\.ckpt: File too large", errors[0])
    assert _tree_digest(trained / "r") == metrics, "the earlier metrics must stay"
    assert _temporaries(trained / "m4") == []


def _truncate(path: Path, dest: Path) -> Path:
    data = path.read_bytes()
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data[: len(data) // 2])
    return dest


def test_truncated_checkpoint_through_finetune_and_translate(trained):
    bad = _truncate(trained / "m/flexible/best.ckpt", trained / "bad/flexible/best.ckpt")
    result = run_module("flexatt.stages.finetune", "finetune.init_dir=bad", "finetune.out_dir=ft",
                        "finetune.metrics_dir=ftr", cwd=trained)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert _error_lines(result.stderr)[0].startswith(
        "error: bad/flexible/best.ckpt: not a readable checkpoint (corrupt or truncated?)")
    assert not (trained / "ft").exists() and not (trained / "ftr").exists()

    from flexatt.cli import main

    with pytest.raises(SystemExit) as info:
        main(["translate", "--checkpoint", str(bad), "--tok-dir", str(trained / "artifacts/tok"),
              "--input", str(trained / "artifacts/filter/dev.src")])
    assert str(info.value.code).startswith(f"error: {bad}: not a readable checkpoint")


def test_truncated_checkpoint_through_evaluate(trained):
    bad = _truncate(trained / "m/flexible/best.ckpt", trained / "bad_eval/global.ckpt")
    (trained / "tau.json").write_text(json.dumps({"models": {}}))
    for name in ("local_m", "local_p", "flexible", "sact", "flexible_sact"):  # present, never reached
        shutil.copyfile(trained / "m/flexible/best.ckpt", trained / f"bad_eval/{name}.ckpt")
    overrides = [f"evaluate.checkpoints.{n}=bad_eval/{n}.ckpt" for n in
                 ("global", "local_m", "local_p", "flexible", "sact", "flexible_sact")]
    result = run_module("flexatt.stages.evaluate", *overrides, "~evaluate.checkpoints.flexible_ft",
                        "~evaluate.checkpoints.flexible_sact_ft", "~evaluate.checkpoints.flexible_ctl",
                        "~evaluate.checkpoints.flexible_sact_ctl", "evaluate.tau_rows=[]", "sweep_tau.out=tau.json",
                        "evaluate.out=ev/metrics.json", "evaluate.translations_dir=ev/tr", "logger.enabled=false",
                        cwd=trained)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert _error_lines(result.stderr)[0].startswith(
        "error: bad_eval/global.ckpt: not a readable checkpoint (corrupt or truncated?)")
    assert not (trained / "ev").exists()


def test_truncated_encoded_data_through_train(trained):
    shutil.copytree(trained / "artifacts/tok", trained / "tok_bad")
    _truncate(trained / "tok_bad/train.npz", trained / "tok_bad/train.npz")
    result = _train(trained, "train.data_dir=tok_bad", "train.out_dir=m3", "train.metrics_dir=r3")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert _error_lines(result.stderr)[0].startswith("error: tok_bad/train.npz: not a valid encoded split")
    assert not (trained / "m3").exists() and not (trained / "r3").exists()


def test_truncated_last_checkpoint_is_not_resumed(trained):
    """A last.ckpt that its run.json says to resume, but truncated: refused by name."""
    shutil.copytree(trained / "m", trained / "m_trunc")
    _truncate(trained / "m_trunc/flexible/best.ckpt", trained / ".resume/m_trunc/flexible/last.ckpt")
    result = _train(trained, "train.out_dir=m_trunc", "train.metrics_dir=r_trunc")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert _error_lines(result.stderr)[0].startswith(
        "error: .resume/m_trunc/flexible/last.ckpt: cannot resume: not a readable checkpoint (corrupt or truncated?)")
    assert not (trained / "r_trunc").exists()


# ----------------------------------------------------------------------- kill -9 of `dvc repro`


def _dvc(copy: Path, *args: str, **kwargs):
    bin_dir = str(Path(sys.executable).parent)
    env = {**ENV, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1"}
    return subprocess.run([os.path.join(bin_dir, "dvc"), *args], cwd=copy, env=env, text=True, capture_output=True,
                          **kwargs)


def _live_group_members(pgid: int, wait: float = 10.0) -> list[int]:
    """Processes of group ``pgid`` still alive (zombies waiting for their reaper do not count)."""
    import psutil

    deadline = time.time() + wait
    while True:
        alive = []
        for proc in psutil.process_iter(["pid", "status"]):
            try:
                if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                    alive.append(proc.pid)
            except (ProcessLookupError, psutil.Error):
                continue
        if not alive or time.time() > deadline:
            return alive
        time.sleep(0.2)


@pytest.mark.slow  # a dvc repro killed and run again
def test_dvc_repro_killed_mid_training_resumes_to_the_same_result(root, tmp_path):
    """`dvc repro train@flexible` killed with SIGKILL (the whole process group: dvc and the stage)
    after an epoch's checkpoint, then `dvc repro` again: DVC drops the dead process from its
    stale rwlock (with a warning), the stage resumes from its last.ckpt in .resume/ (persist: true keeps best.ckpt and run.json), and
    the metrics equal those of an uninterrupted run of the same stage."""
    from conftest import repo_copy

    copy = repo_copy(tmp_path / "repo", "profile=smoke")  # the root pipeline on the smoke profile
    assert _dvc(copy, "repro", "tokenize").returncode == 0
    whole = subprocess.run([sys.executable, "-m", "flexatt.stages.train", "train.variant=flexible",
                            "train.out_dir=whole", "train.metrics_dir=whole_metrics"], cwd=copy,
                           env={**ENV, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr[-3000:]

    bin_dir = str(Path(sys.executable).parent)
    env = {**ENV, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([os.path.join(bin_dir, "dvc"), "repro", "train@flexible"], cwd=copy, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    last = copy / ".resume/artifacts/models/flexible/last.ckpt"
    deadline = time.time() + 600
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the stage ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _live_group_members(proc.pid) == [], "the stage must die with dvc"
    assert not (copy / "results/train/flexible.json").exists()
    rwlock = json.loads((copy / ".dvc/tmp/rwlock").read_text())
    assert any(info["pid"] == proc.pid for infos in rwlock.get("read", {}).values() for info in infos), \
        "the killed dvc leaves its entries in .dvc/tmp/rwlock"

    again = _dvc(copy, "repro", "train@flexible")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "had been killed. Auto removed it from the lock file" in again.stderr
    assert "resuming from .resume/artifacts/models/flexible/last.ckpt" in again.stdout + again.stderr
    assert not last.parent.exists()  # dropped once the stage had trained
    a = json.loads((copy / "whole_metrics/flexible.json").read_text())
    b = json.loads((copy / "results/train/flexible.json").read_text())
    assert 1 <= b["resumed_from_epoch"] < b["epochs"]
    for key in ("dev_bleu", "best_epoch", "final_train_loss", "epochs", "parameters"):
        assert a[key] == b[key], key
    assert (copy / "results/train/flexible.csv").read_text().splitlines()[0].startswith("epoch,")
    status = _dvc(copy, "status", "train@flexible")
    assert status.returncode == 0 and "changed" not in status.stdout, status.stdout


def _translate(trained, *args):
    from flexatt.cli import main

    main(["translate", "--checkpoint", str(trained / "m/flexible/best.ckpt"),
          "--tok-dir", str(trained / "artifacts/tok"), "--beam", "1", *args])


def test_translate_keeps_empty_lines_empty_and_in_place(trained, tmp_path, capsys):
    sentences = (trained / "artifacts/filter/dev.src").read_text(encoding="utf-8").split("\n")[:2]
    (tmp_path / "alone.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    (tmp_path / "gaps.txt").write_text(f"\n{sentences[0]}\n \n{sentences[1]}\n\n", encoding="utf-8")
    _translate(trained, "--input", str(tmp_path / "alone.txt"))
    alone = capsys.readouterr().out.split("\n")[:-1]
    _translate(trained, "--input", str(tmp_path / "gaps.txt"), "--stats", str(tmp_path / "stats.jsonl"))
    gaps = capsys.readouterr().out.split("\n")[:-1]
    assert gaps == ["", alone[0], "", alone[1], ""]
    stats = [json.loads(line) for line in (tmp_path / "stats.jsonl").read_text().splitlines()]
    assert [s["steps"] == 0 for s in stats] == [True, False, True, False, True]


def test_translate_refuses_a_file_that_is_not_a_checkpoint_in_one_line(trained, tmp_path):
    from flexatt.cli import main

    text = tmp_path / "notes.ckpt"
    text.write_text("not a model\n")
    with pytest.raises(SystemExit) as info:
        main(["translate", "--checkpoint", str(text), "--input", str(text)])
    assert str(info.value.code).startswith(f"error: {text}: not a readable checkpoint")
    assert "\n" not in str(info.value.code)


def test_checkpoint_folder_is_self_contained(trained, tmp_path, capsys):
    """Training copies the SentencePiece models beside its checkpoints: translate needs no --tok-dir,
    and a vocabulary of the right size that is not the checkpoint's is refused by its digest."""
    import shutil

    from flexatt.checkpoints import check_vocabulary, checkpoint_hparams
    from flexatt.cli import main
    from flexatt.errors import DataError

    ckpt_dir = trained / "m/flexible"
    for side in ("src", "tgt"):
        assert (ckpt_dir / f"{side}.model").read_bytes() == (trained / f"artifacts/tok/{side}.model").read_bytes()
    moved = tmp_path / "moved"
    shutil.copytree(ckpt_dir, moved)
    (tmp_path / "in.txt").write_text((trained / "artifacts/filter/dev.src").read_text(encoding="utf-8")
                                     .split("\n")[0] + "\n", encoding="utf-8")
    main(["translate", "--checkpoint", str(moved / "best.ckpt"), "--beam", "1", "--input", str(tmp_path / "in.txt")])
    alone = capsys.readouterr().out
    _translate(trained, "--input", str(tmp_path / "in.txt"))
    assert alone == capsys.readouterr().out and alone.strip()
    hparams = checkpoint_hparams(moved / "best.ckpt")
    assert set(hparams["vocab_digests"]) == {"src", "tgt"}
    other = {**hparams, "vocab_digests": {**hparams["vocab_digests"], "src": "0" * 16}}
    with pytest.raises(DataError, match="src.model: is not the src SentencePiece model .* was trained with"):
        check_vocabulary(moved / "best.ckpt", other, "src", moved / "src.model", hparams["src_vocab"])
    check_vocabulary(moved / "best.ckpt", hparams, "src", moved / "src.model", hparams["src_vocab"])
    (moved / "src.model").unlink()
    with pytest.raises(SystemExit) as info:
        main(["translate", "--checkpoint", str(moved / "best.ckpt"), "--input", str(tmp_path / "in.txt")])
    assert str(info.value.code).startswith(f"error: {moved / 'src.model'}: not found")


def test_translate_refuses_another_models_vocabulary(trained, tmp_path):
    import sentencepiece as spm

    from flexatt.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"w{i} w{i + 1} w{i + 2}" for i in range(40)) + "\n")
    other = tmp_path / "tok"
    other.mkdir()
    for side in ("src", "tgt"):
        spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(other / side), vocab_size=30,
                                       model_type="word", minloglevel=2, pad_id=PAD_ID, unk_id=UNK_ID,
                                       bos_id=BOS_ID, eos_id=EOS_ID)
    with pytest.raises(SystemExit) as info:
        main(["translate", "--checkpoint", str(trained / "m/flexible/best.ckpt"), "--tok-dir", str(other),
              "--input", str(corpus)])
    assert str(info.value.code).startswith(f"error: {other / 'src.model'}: has 30 pieces but")
