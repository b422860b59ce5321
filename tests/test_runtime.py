"""Tests of the process-wide runtime settings (``flexatt.runtime``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

SCRIPT = """
import json
from flexatt import runtime
first = runtime.tune_allocator()
print(json.dumps({"first": first, "again": runtime.tune_allocator()}))
"""


def run(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "FLEXATT_ALLOCATOR"}
    if env_value is not None:
        env["FLEXATT_ALLOCATOR"] = env_value
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                    reason="the allocator settings are glibc's")
def test_allocator_tuned_once_and_switched_off_by_the_environment():
    assert run(None) == '{"first": true, "again": true}'
    assert run("default") == '{"first": false, "again": false}'


def test_stage_entry_tunes_the_allocator(monkeypatch):
    """Every stage goes through ``run_stage``, which tunes the allocator before the task runs."""
    from flexatt import config, runtime

    calls = []
    monkeypatch.setattr(runtime, "tune_allocator", lambda: calls.append(1) or True)
    monkeypatch.setenv("FLEXATT_PARAMS", "/nonexistent/params.yaml")
    with pytest.raises(SystemExit):  # a missing params file is refused, after the tuning
        config.run_stage(lambda cfg: None, [])
    assert calls == [1]


# ----------------------------------------------------------------------------- trainer.precision

X86_WITH_BF16 = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile\n\nprocessor\t: 1\nflags\t\t: fpu avx512f avx512_bf16\n"
X86_WITHOUT_BF16 = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw avx512_vnni\n"
ARM = "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.fixture
def cpu(tmp_path, monkeypatch):
    """``cpu(cpuinfo, onednn_bf16=True, speedup=None)``: a CPU as resolve_precision sees it: the
    text of /proc/cpuinfo (None: no such file), what oneDNN reports, and what the timing probe
    measures (None: the probe must not run)."""
    from flexatt import runtime

    def make(cpuinfo: str | None, onednn_bf16: bool = True, speedup: float | None = None) -> list[int]:
        path = tmp_path / "cpuinfo"
        path.unlink(missing_ok=True)
        if cpuinfo is not None:
            path.write_text(cpuinfo)
        probes: list[int] = []

        def probe(*args, **kwargs) -> float:
            assert speedup is not None, "the timing probe ran although the flags decide"
            probes.append(1)
            return speedup

        monkeypatch.setattr(runtime, "CPUINFO", str(path))
        monkeypatch.setattr(runtime, "bf16_speedup", probe)
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: onednn_bf16)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        return probes

    return make


@pytest.mark.parametrize("accelerator", ["cpu", "auto"])
def test_auto_precision_on_a_cpu_with_native_bf16_flags_is_bf16(cpu, accelerator):
    from flexatt.runtime import resolve_precision

    probes = cpu(X86_WITH_BF16)
    precision, reason = resolve_precision("auto", accelerator)
    assert precision == "bf16-mixed" and "avx512_bf16" in reason and not probes


def test_auto_precision_on_avx512_without_bf16_is_float32_though_onednn_says_bf16(cpu):
    """The AVX-512 Xeon without AVX512-BF16 / AMX: oneDNN reports bf16 support (it emulates the
    products), the flags say otherwise, and float32 is chosen without a probe."""
    from flexatt.runtime import native_cpu_bf16, resolve_precision

    probes = cpu(X86_WITHOUT_BF16, onednn_bf16=True)
    assert native_cpu_bf16() is False
    precision, reason = resolve_precision("auto", "cpu")
    assert precision == "32-true" and "neither avx512_bf16 nor amx_bf16" in reason and not probes
    cpu(X86_WITH_BF16, onednn_bf16=False)  # no bf16 in oneDNN at all: the flags do not matter
    assert resolve_precision("auto", "cpu") == ("32-true", "auto: oneDNN has no bf16 support on this CPU")


@pytest.mark.parametrize("cpuinfo", [ARM, None], ids=["arm", "no-cpuinfo"])
@pytest.mark.parametrize("speedup,expected", [(2.4, "bf16-mixed"), (1.2, "32-true"), (0.35, "32-true")])
def test_auto_precision_without_x86_flags_is_decided_by_the_timing_probe(cpu, cpuinfo, speedup, expected):
    from flexatt.runtime import BF16_MIN_SPEEDUP, native_cpu_bf16, resolve_precision

    probes = cpu(cpuinfo, speedup=speedup)
    assert native_cpu_bf16() is None
    precision, reason = resolve_precision("auto", "cpu")
    assert precision == expected and probes == [1]
    assert reason.startswith("auto: timing probe:") and f"{speedup:.2f}x" in reason
    assert (">=" if speedup >= BF16_MIN_SPEEDUP else "<") + f" {BF16_MIN_SPEEDUP}" in reason


@pytest.mark.parametrize("named", ["bf16-mixed", "32-true", "16-mixed", 32, "bf16"])
@pytest.mark.parametrize("accelerator", ["cpu", "gpu", "auto"])
def test_named_precisions_pass_through_unchanged(cpu, named, accelerator):
    from flexatt.runtime import resolve_precision

    probes = cpu(X86_WITHOUT_BF16)  # the speedup probe must not run either
    assert resolve_precision(named, accelerator) == (named, "set in trainer.precision") and not probes


@pytest.mark.parametrize("native,expected", [(True, "bf16-mixed"), (False, "32-true")])
def test_auto_precision_on_cuda_follows_native_bf16(cpu, monkeypatch, native, expected):
    from flexatt import runtime

    cpu(X86_WITH_BF16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    monkeypatch.setattr(runtime, "_cuda_bf16", lambda: native)
    for accelerator in ("gpu", "cuda", "auto"):
        precision, reason = runtime.resolve_precision("auto", accelerator)
        assert precision == expected and "Test GPU" in reason
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runtime.resolve_precision("auto", "gpu")[0] == "32-true"  # Lightning then refuses the GPU


def test_invalid_precision_is_refused_naming_the_key(root, tmp_path, monkeypatch, capsys):
    """One line, ``error: trainer.precision: must be one of ...auto (got 'x')``, exit status 2."""
    from conftest import compose_params
    from flexatt import config as C
    from flexatt import schema

    monkeypatch.setenv(C.PARAMS_ENV, str(compose_params(tmp_path, "profile=smoke")))
    monkeypatch.chdir(root)  # writes nothing there (hydra.output_subdir=null)
    with pytest.raises(SystemExit) as exit_:
        C.run_stage(schema.validate, ["trainer.precision=x"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: trainer.precision: must be one of 32-true, 16-mixed, bf16-mixed, ")
    assert ", auto (got 'x')" in err
    C.run_stage(schema.validate, ["trainer.precision=auto"])  # accepted


def test_explicit_bf16_on_a_cpu_without_native_bf16_still_warns(cpu, tmp_path):
    import warnings

    from omegaconf import OmegaConf

    from flexatt.trainer import build_trainer, warn_slow_bf16

    cpu(X86_WITHOUT_BF16, onednn_bf16=True)
    with pytest.warns(UserWarning, match=r"trainer\.precision=bf16-mixed: .*32-true"):
        warn_slow_bf16({"accelerator": "cpu", "precision": "bf16-mixed"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_slow_bf16({"accelerator": "cpu", "precision": "32-true"})
        cpu(X86_WITH_BF16)
        warn_slow_bf16({"accelerator": "cpu", "precision": "bf16-mixed"})
        cpu(ARM, speedup=2.0)  # flags cannot tell: no warning
        warn_slow_bf16({"accelerator": "cpu", "precision": "bf16-mixed"})
    # auto builds a Trainer with the resolved precision, and never a warned-about one

    cpu(X86_WITHOUT_BF16, onednn_bf16=True)
    cfg = OmegaConf.create({"trainer": {"accelerator": "cpu", "devices": 1, "precision": "auto"},
                            "train": {"early_stopping_patience": None}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        trainer = build_trainer(cfg, tmp_path / "ckpt", 1, [])
    assert type(trainer.precision_plugin).__name__ == "Precision"  # float32, not bf16 autocast


def test_the_timing_probe_measures_a_ratio_and_leaves_the_global_seed_alone():
    from flexatt.runtime import bf16_speedup

    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    speedup = bf16_speedup(seconds=0.05, shape=(64, 32, 100))
    assert 0 < speedup < float("inf")
    assert torch.equal(torch.rand(3), expected)


def test_auto_precision_is_decided_once_per_run(cpu, monkeypatch):
    """A resumed run keeps the precision of its run.json; ranks started by rank 0 take rank 0's
    decision from the environment; rank 0 puts it there."""
    from flexatt import trainer as T

    monkeypatch.delenv(T.PRECISION_ENV, raising=False)
    for key in ("RANK", "LOCAL_RANK", "NODE_RANK"):
        monkeypatch.delenv(key, raising=False)
    auto = {"accelerator": "cpu", "precision": "auto"}
    cpu(X86_WITH_BF16)
    precision, reason = T._run_precision(auto, {})
    assert precision == "bf16-mixed" and T.os.environ[T.PRECISION_ENV] == f"bf16-mixed\t{reason}"
    kept = T._run_precision(auto, {"precision": "32-true", "precision_reason": "auto: probe said so"})
    assert kept == ("32-true", "auto: probe said so (kept on resume)")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv(T.PRECISION_ENV, "32-true\tauto: rank 0's probe")
    assert T._run_precision(auto, {}) == ("32-true", "auto: rank 0's probe")
    assert T._run_precision({**auto, "precision": "bf16-mixed"}, {}) == ("bf16-mixed", "set in trainer.precision")
