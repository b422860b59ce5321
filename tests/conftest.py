"""Shared fixtures: the repository root, a scratch folder with a composed params.yaml, and the
copy-task training of the tiny decoding-test models.

``$FLEXATT_TEST_PRECISION`` (``bf16-mixed``, ``32-true``, …) sets ``trainer.precision`` in every
params file the tests compose and every profile run they start, so that the training tests run
under a precision of the caller's choice (CI runs them under both that users get); unset, the
tests train with the profile's own value, ``auto``, as a user on this machine would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent

# Under pytest-xdist every worker is one process of the machine's cores: one intra-op thread
# each, in the worker and in the stages it starts (inherited through the environment). The
# tests' models are tiny, and two workers of two threads each on two cores stall one another.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


_prebuild: list[subprocess.Popen] = []
#: set by the controller while it builds the kernel for the run (:func:`pytest_configure`)
PREBUILD_ENV = "FLEXATT_TESTS_KERNEL_PREBUILD"


def pytest_configure(config) -> None:
    """A run of the whole suite (no test paths given) starts building the decoding kernel, where
    it is not yet cached, in a process of its own before the tests are even collected: the first
    test that needs it then waits for the rest of the build instead of all of it (the build holds
    the folder's lock, ``flexatt.decoding.kernel._exclusive_build``, so nothing builds it twice).
    The controller starts it (pytest alone, or the xdist controller, not its workers); the processes
    that run tests lower their priority while it builds; a build not finished when the run ends is
    stopped, and the next ``extension()`` builds again."""
    if hasattr(config, "workerinput"):
        # a worker of a run whose controller is building the kernel yields to the build (a lower
        # priority, which any process may take), so that the build ends before the kernel's tests
        # wait for it, instead of sharing the cores three ways
        if os.environ.get(PREBUILD_ENV) == "1":
            os.nice(5)
        return
    if config.args_source != pytest.Config.ArgsSource.TESTPATHS:
        return
    from flexatt.decoding import kernel

    if any(kernel.build_directory().glob("*.so")):
        return
    code = "import warnings; warnings.simplefilter('ignore'); from flexatt.decoding import kernel; kernel.extension()"
    _prebuild.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    os.environ[PREBUILD_ENV] = "1"  # the workers, started after this, inherit it
    if not getattr(config.option, "numprocesses", None):
        os.nice(5)  # the tests run in this process, beside the build


#: the test files that decode with the compiled kernel (the kernel's own, and the backends'
#: contracts): scheduled after the others, so that a build from nothing overlaps other tests
KERNEL_TEST_FILES = ("test_kernel.py", "test_decoding_contract.py", "test_backends.py", "test_row_map.py",
                     "test_edits_decode.py")


def pytest_collection_modifyitems(config, items) -> None:
    """The kernel's test files last (a stable sort: the order within each group stays), where the
    whole suite runs and the kernel is being built in the background (:func:`pytest_configure`)."""
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        items.sort(key=lambda item: item.path.name in KERNEL_TEST_FILES)


def pytest_sessionfinish(session, exitstatus) -> None:
    for build in _prebuild:
        if build.poll() is None:
            build.terminate()
            build.wait(timeout=30)


#: the variable that sets ``trainer.precision`` for the tests' training runs
PRECISION_ENV = "FLEXATT_TEST_PRECISION"


def precision_overrides() -> list[str]:
    """``["trainer.precision=<$FLEXATT_TEST_PRECISION>"]`` where the variable is set, else ``[]``."""
    precision = os.environ.get(PRECISION_ENV, "").strip()
    return [f"trainer.precision={precision}"] if precision else []


def compose_params(dest: Path, *overrides: str, test_precision: bool = True) -> Path:
    """Write ``dest/params.yaml`` composed from the repository's ``conf/`` with ``overrides``,
    after :func:`precision_overrides` unless ``test_precision`` is false (a test of what the
    configuration itself composes to); an explicit ``trainer.precision`` in ``overrides`` wins.
    ``dest`` holds one pipeline, the root one: its outputs go to ``artifacts/`` and ``results/``
    whatever the profile (``paths``; a profile's own folders are for its pipelines/<profile>/)."""
    from flexatt.cli import write_params

    dest.mkdir(parents=True, exist_ok=True)
    extra = ["paths.artifacts=artifacts", "paths.results=results"]
    extra += precision_overrides() if test_precision else []
    write_params([*extra, *overrides], dest / "params.yaml", ROOT / "conf")
    return dest / "params.yaml"


def stage_env(threads: str | None = None) -> dict[str, str]:
    """The environment of a stage process the tests start: W&B offline, the ``params.yaml`` of
    its folder (``$FLEXATT_PARAMS`` unset), ``OMP_NUM_THREADS=threads`` where given."""
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("FLEXATT_PARAMS", None)
    if threads:
        env["OMP_NUM_THREADS"] = threads
    return env


def run_module(module: str, *args: str, cwd: Path, threads: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m module ARGS`` in ``cwd`` as a user would (:func:`stage_env`); output
    captured as text."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=stage_env(threads), text=True,
                          capture_output=True, timeout=600)


def run_inprocess(stage: str, overrides: list[str], capsys, cwd: Path | None = None) -> tuple[int, str]:
    """``python -m flexatt.stages.<stage> OVERRIDES`` in this process, through the same
    :func:`flexatt.config.run_stage` (no interpreter start-up), in ``cwd`` (default: the current
    folder) with the ``params.yaml`` there: ``(exit status, stderr)``."""
    import importlib

    from flexatt import config as C

    task = importlib.import_module(f"flexatt.stages.{stage}").run
    capsys.readouterr()
    previous, params = os.getcwd(), os.environ.pop(C.PARAMS_ENV, None)
    os.chdir(cwd or previous)
    try:
        C.run_stage(task, overrides)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(previous)
        if params is not None:
            os.environ[C.PARAMS_ENV] = params
    return code, capsys.readouterr().err


def load_script(name: str):
    """``scripts/<name>.py`` as a module (registered in ``sys.modules``, where dataclasses
    resolve their annotations)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def tokenized_smoke(path: Path) -> Path:
    """``path`` with the smoke profile's params, filtered and tokenized (stages run for real)."""
    compose_params(path, "profile=smoke")
    for stage in ("filter", "tokenize"):
        result = run_module(f"flexatt.stages.{stage}", cwd=path)
        assert result.returncode == 0, result.stderr
    return path


def shared_template(tmp_path_factory, name: str, build) -> Path:
    """The folder ``name`` made by ``build(folder)`` once per test run: under pytest-xdist the
    workers share it (the first to need it builds it under a file lock, the others wait and read
    it), so a session fixture's stage runs are not repeated in every worker."""
    from filelock import FileLock

    if "PYTEST_XDIST_WORKER" not in os.environ:
        return build(tmp_path_factory.mktemp(name))
    path = tmp_path_factory.getbasetemp().parent / name  # the run's folder, above every worker's
    with FileLock(f"{path}.lock"):
        done = path.with_name(f"{name}.built")  # beside it: the copies of the folder stay the stage outputs
        if not done.is_file():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            build(path)
            done.touch()
    return path


@pytest.fixture(scope="session")
def smoke_tokenized(tmp_path_factory) -> Path:
    """The smoke profile filtered and tokenized by its stages, once per run: a template that
    the tests copy (:func:`copy_of`) and never change."""
    return shared_template(tmp_path_factory, "smoke_tokenized", tokenized_smoke)


@pytest.fixture(scope="session")
def smoke_trained(smoke_tokenized, tmp_path_factory) -> Path:
    """:func:`smoke_tokenized` and one epoch of the flexible model by the train stage (its
    checkpoints in ``m/flexible/``, its metrics in ``r/``), once per run; a template to copy."""
    def build(path: Path) -> Path:
        copy_of(smoke_tokenized, path)
        result = run_module("flexatt.stages.train", "train.variant=flexible", "train.epochs=1", "train.out_dir=m",
                            "train.metrics_dir=r", "logger.enabled=false", cwd=path, threads="1")
        assert result.returncode == 0, result.stderr[-3000:]
        return path

    return shared_template(tmp_path_factory, "smoke_trained", build)


def copy_of(template: Path, dest: Path) -> Path:
    """``dest`` (empty or missing) made a copy of the folder ``template``; returns ``dest``."""
    shutil.copytree(template, dest, symlinks=True, dirs_exist_ok=True)
    return dest


COPY_GIT_ENV = {"GIT_AUTHOR_NAME": "flexatt", "GIT_AUTHOR_EMAIL": "flexatt@example.invalid",
                "GIT_COMMITTER_NAME": "flexatt", "GIT_COMMITTER_EMAIL": "flexatt@example.invalid"}


def tracked_files(root: Path = ROOT) -> list[str]:
    """Files git tracks or would track (untracked but not ignored) under ``root``."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p and (root / p).is_file()]


def repo_copy(dest: Path, *overrides: str) -> Path:
    """``dest`` made a copy of the working tree (its tracked files, uncommitted edits included, and
    the untracked ones git does not ignore), committed in a git repository of its own (DVC needs
    one); with ``overrides``, its root ``params.yaml`` composed with them (the root pipeline on
    another profile, e.g. ``profile=smoke``) and committed too."""
    for rel in tracked_files():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    if overrides:
        compose_params(dest, *overrides)
    env = {**os.environ, **COPY_GIT_ENV}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "working tree", "--allow-empty"]):
        subprocess.run(["git", *args], cwd=dest, check=True, env=env, capture_output=True)
    return dest


def run_dvc(repo: Path, *args: str, command: str = "dvc") -> subprocess.CompletedProcess:
    """``dvc ARGS`` (or another ``command`` of the environment, e.g. ``flexatt``) in ``repo`` with
    its stages running ``repo``'s code (``PYTHONPATH``), W&B offline; the output captured."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**stage_env(), "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(repo.resolve() / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([os.path.join(bin_dir, command), *args], cwd=repo, env=env, text=True, capture_output=True)


@pytest.fixture(scope="session")
def smoke_copy(tmp_path_factory) -> tuple[Path, str]:
    """``(copy, stdout)``: a copy of the working tree (:func:`repo_copy`) after ``flexatt repro
    pipelines/smoke/dvc.yaml`` (``make smoke``: the smoke profile's pipeline, independent stages
    side by side, its outputs under ``artifacts/smoke/`` and ``results/smoke/``), made once for
    the slow tests that read it."""
    copy = repo_copy(tmp_path_factory.mktemp("smoke") / "repo")
    if precision_overrides():  # the profile's params at the tests' precision
        from flexatt.cli import write_params

        write_params(["profile=smoke", *precision_overrides()], copy / "pipelines/smoke/params.yaml", ROOT / "conf")
    result = run_dvc(copy, "repro", "pipelines/smoke/dvc.yaml", command="flexatt")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return copy, result.stdout


@pytest.fixture
def smoke_dir(tmp_path: Path) -> Path:
    """A scratch folder holding params.yaml of the smoke profile."""
    compose_params(tmp_path, "profile=smoke")
    return tmp_path


@pytest.fixture
def single_thread():
    """Tiny tensors: intra-op threads only add barrier overhead (and stall badly on a shared
    machine), so the model-level tests run single-threaded."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train_to_copy(model, batches) -> dict:
    """Adam (lr 0.03) on the copy task, one step per ``(src, src_len)`` of ``batches`` (the
    target is the source, EOS last); returns a detached copy of the trained state dict."""
    from flexatt.data.subwords import BOS_ID, PAD_ID
    from flexatt.model import sequence_nll

    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    for src, src_len in batches:
        tgt_in = torch.cat([torch.full((src.size(0), 1), BOS_ID), src[:, :-1]], 1).masked_fill(src == PAD_ID, PAD_ID)
        logits, _ = model(src, src_len, tgt_in)
        loss = sequence_nll(logits, src, src != PAD_ID)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
