"""Which backend decodes a model (flexatt.decoding.backends.select_backend), and the kernel's
refusal of stale equations (flexatt.decoding.digests): a model whose reference equations were
edited after the kernel was written is never decoded by the kernel — ``auto`` falls back with one
warning naming the changed class, ``backend=kernel`` stops with a one-line error — and the kernel
is used again once its digest is brought up to date."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from flexatt.attention import FlexibleAttention, attention_types
from flexatt.decoding import backends, beam_search, digests, forced_decode, kernel, provenance
from flexatt.decoding import select_backend
from flexatt.errors import ConfigError
from test_kernel import kernel_error, needs_the_kernel  # noqa: F401  (fixtures)
from test_search import sources, tiny_model

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(autouse=True)
def no_warning_given_yet(monkeypatch):
    """Every test starts with no warning given yet."""
    monkeypatch.setattr(backends, "_warned", set())


def test_auto_takes_the_kernel_where_it_covers_the_model_else_the_models_modules(needs_the_kernel):
    expected = {"global": "kernel", "flexible": "kernel", "sact": "eager", "flexible_sact": "eager",
                "local_m": "eager", "local_p": "eager"}
    for name in attention_types():
        model = tiny_model(name, seed=1) if name in expected else None
        if model is None:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a model the kernel does not cover is no cause for a warning
            assert select_backend(model).name == expected[name], name
        assert select_backend(model, "eager").name == "eager"


def test_a_named_backend_that_does_not_cover_the_model_stops_with_one_line():
    model = tiny_model("local_m", seed=1)
    with pytest.raises(ConfigError, match=r"decode.backend: kernel does not cover this model: attention "
                                          "LocalAttention") as info:
        select_backend(model, "kernel")
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="decode.backend: must be one of auto, kernel, eager"):
        select_backend(model, "grouped")


def test_a_model_in_training_mode_decodes_with_its_own_modules():
    model = tiny_model("flexible", seed=1).train()
    assert select_backend(model).name == "eager"
    with pytest.raises(ConfigError, match="kernel does not cover this model: the model is in training mode"):
        select_backend(model, "kernel")


def test_provenance_names_the_backend_the_simd_level_and_torch():
    model = tiny_model("flexible", seed=1)
    assert provenance(select_backend(model, "eager")) == {"backend": "eager", "simd": None,
                                                         "torch": torch.__version__}


def test_the_recorded_digests_are_the_reference_as_it_is():
    """The kernel in this tree was written against the reference in this tree (after an edit of
    the reference that the kernel follows, update ``kernel.RESTATED_DIGESTS``:
    ``digests.main()`` prints it)."""
    assert kernel.RESTATED_DIGESTS == digests.current()
    assert digests.stale(kernel.RESTATED_DIGESTS) is None


def test_docstrings_comments_and_layout_do_not_count_code_does():
    def a(x):
        """One."""
        return x * 2  # a comment

    def b(x):
        """Another docstring."""

        return x * 2

    def c(x):
        return x * 3

    assert digests.source_digest(a) == digests.source_digest(b) != digests.source_digest(c)


def test_an_edited_penalty_is_never_decoded_by_the_kernel(needs_the_kernel, monkeypatch):
    """A researcher edits FlexibleAttention's penalty in place (here: monkeypatched, so the class
    that runs is the edited one): ``auto`` decodes with the model's own modules — the edit is decoded —
    with one warning naming the class; ``backend=kernel`` stops. Once the digest is brought up to
    date (the kernel follows the edit), the kernel is selected again."""
    model = tiny_model("flexible", seed=1)
    src, src_len = sources()
    tgt_out = torch.randint(4, 12, (src.size(0), 5), generator=torch.Generator().manual_seed(0))
    tgt_out[:, -1] = 3  # EOS
    tgt_in = torch.cat([torch.full((tgt_out.size(0), 1), 2), tgt_out[:, :-1]], 1)
    before = forced_decode(model, src, src_len, tgt_in, tgt_out, 0.8, backend="eager")
    assert select_backend(model).name == "kernel"

    original = FlexibleAttention.penalty

    def penalty(self, positions, prev_pos, g):  # twice the strength
        return 2.0 * original(self, positions, prev_pos, g)

    monkeypatch.setattr(FlexibleAttention, "penalty", penalty)
    with pytest.warns(RuntimeWarning, match=r"FlexibleAttention changed since the kernel was written"):
        stepper = select_backend(model)
    assert stepper.name == "eager"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning, not one per call
        auto = forced_decode(model, src, src_len, tgt_in, tgt_out, 0.8)
    assert auto.backend == "eager"
    edited = forced_decode(model, src, src_len, tgt_in, tgt_out, 0.8, backend="eager")
    assert torch.equal(auto.log_probs, edited.log_probs)
    assert not torch.equal(edited.log_probs, before.log_probs)  # the edit is what decodes
    with pytest.raises(ConfigError, match="decode.backend: kernel does not cover this model: "
                                          "FlexibleAttention changed since the kernel was written"):
        select_backend(model, "kernel")

    monkeypatch.setattr(kernel, "RESTATED_DIGESTS", digests.current())  # the kernel follows
    assert select_backend(model).name == "kernel"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("attention,tau", [("global", math.inf), ("flexible", math.inf), ("flexible", 0.8),
                                           ("sact", math.inf), ("flexible_sact", 0.5), ("local_p", math.inf)])
def test_a_model_on_a_gpu_decodes_as_on_the_cpu(attention, tau):
    """On a GPU the kernel (CPU only) is not selected: ``auto`` takes the model's own modules,
    which give the CPU's hypotheses, windows and steps there too, scores within float32 rounding
    (the GPU's matrix products may round by shape, so bit-identity is not asked)."""
    cpu = tiny_model(attention, seed=1)
    model = tiny_model(attention, seed=1).cuda()
    src, src_len = sources()
    assert select_backend(model).name == "eager"
    reason = "not float32 on the CPU" if attention in ("global", "flexible") else ""
    with pytest.raises(ConfigError, match=f"kernel does not cover this model: {reason}"):
        select_backend(model, "kernel")
    for k in (1, 5, 12):
        ref = beam_search(cpu, src, src_len, 10, k, tau=tau, n_best=min(k, 3), backend="eager")
        gpu = beam_search(model, src.cuda(), src_len.cuda(), 10, k, tau=tau, n_best=min(k, 3))
        assert gpu.backend == "eager"
        assert torch.equal(gpu.nbest.cpu(), ref.nbest)
        assert torch.equal(gpu.window_sum.cpu(), ref.window_sum) and torch.equal(gpu.steps.cpu(), ref.steps)
        finite = torch.isfinite(ref.scores)
        assert torch.equal(torch.isfinite(gpu.scores.cpu()), finite)
        torch.testing.assert_close(gpu.scores.cpu()[finite], ref.scores[finite], atol=2e-5, rtol=1e-5)
    tgt_out = torch.randint(4, 12, (src.size(0), 6), generator=torch.Generator().manual_seed(0))
    tgt_out[:, -1] = 3  # EOS
    tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], 2), tgt_out[:, :-1]], 1)
    ref = forced_decode(cpu, src, src_len, tgt_in, tgt_out, tau, backend="eager")
    gpu = forced_decode(model, src.cuda(), src_len.cuda(), tgt_in.cuda(), tgt_out.cuda(), tau)
    assert torch.equal(gpu.window_sum.cpu(), ref.window_sum)
    torch.testing.assert_close(gpu.log_probs.cpu(), ref.log_probs, atol=2e-5, rtol=1e-5)
