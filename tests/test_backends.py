"""Which backend decodes a model (flexatt.decoding.backends.select_backend), and the kernel's
refusal of stale equations (flexatt.decoding.reference): a model whose reference equations were
edited after the kernel was written is never decoded by the kernel — ``auto`` falls back with one
warning naming the changed class, ``backend=kernel`` stops with a one-line error — and the kernel
is used again once its digest is brought up to date."""

from __future__ import annotations

import warnings

import pytest
import torch

from flexatt.attention import FlexibleAttention, attention_types
from flexatt.decoding import backends, beam_search, forced_decode, greedy, kernel, provenance, reference
from flexatt.decoding import select_backend
from flexatt.errors import ConfigError
from test_fused import kernel_error, needs_the_kernel  # noqa: F401  (fixtures)
from test_search import sources, tiny_model

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(autouse=True)
def fast_backends_on(monkeypatch):
    """On even where the environment turns them off (CI runs some decoding tests with
    ``FLEXATT_FUSED=0``); every test starts with no warning given yet."""
    monkeypatch.delenv(backends.ENV, raising=False)
    monkeypatch.setattr(backends, "_warned", set())


def test_auto_takes_the_fastest_backend_that_covers_each_variant(needs_the_kernel):
    expected = {"global": "kernel", "flexible": "kernel", "sact": "grouped", "flexible_sact": "grouped",
                "local_m": "eager", "local_p": "eager"}
    for name in attention_types():
        model = tiny_model(name, seed=1) if name in expected else None
        if model is None:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert select_backend(model).name == expected[name], name
        assert select_backend(model, "eager").name == "eager"


def test_a_named_backend_that_does_not_cover_the_model_stops_with_one_line():
    model = tiny_model("local_m", seed=1)
    for name in ("grouped", "kernel"):
        with pytest.raises(ConfigError, match=rf"decode.backend: {name} does not cover this model: attention "
                                              "LocalAttention") as info:
            select_backend(model, name)
        assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="decode.backend: must be one of auto, kernel, grouped, eager"):
        select_backend(model, "compiled")


@pytest.mark.parametrize("attention", ["local_m", "local_p"])
def test_the_eager_fallback_warns_once(attention):
    model = tiny_model(attention, seed=1)
    src, src_len = sources()
    with pytest.warns(RuntimeWarning, match="decoding runs on the eager backend"):
        result = beam_search(model, src, src_len, 10, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        greedy(model, src, src_len, 10)
    assert result.backend == "eager"
    assert torch.equal(beam_search(model, src, src_len, 10, 5, backend="eager").tokens, result.tokens)


def test_training_mode_and_the_environment_switch(monkeypatch):
    model = tiny_model("flexible", seed=1)
    monkeypatch.setenv(backends.ENV, "0")
    src, src_len = sources()
    assert beam_search(model, src, src_len, 5, 3).backend == "eager"
    monkeypatch.delenv(backends.ENV)
    model.train()
    with pytest.warns(RuntimeWarning, match="training mode: decoding runs on the eager backend"):
        assert select_backend(model).name == "eager"
    with pytest.raises(ConfigError, match="grouped does not cover this model: the model is in training mode"):
        select_backend(model, "grouped")
    model.eval()


def test_provenance_names_the_backend_the_simd_level_and_torch():
    model = tiny_model("flexible", seed=1)
    assert provenance(select_backend(model, "grouped")) == {"backend": "grouped", "simd": None,
                                                           "torch": torch.__version__}


def test_the_recorded_digests_are_the_reference_as_it_is():
    """The kernel in this tree was written against the reference in this tree (after an edit of
    the reference that the kernel follows, update ``kernel.REFERENCE_DIGESTS``:
    ``reference.main()`` prints it)."""
    assert kernel.REFERENCE_DIGESTS == reference.digests()
    assert reference.stale(kernel.REFERENCE_DIGESTS) is None


def test_docstrings_comments_and_layout_do_not_count_code_does():
    def a(x):
        """One."""
        return x * 2  # a comment

    def b(x):
        """Another docstring."""

        return x * 2

    def c(x):
        return x * 3

    assert reference.source_digest(a) == reference.source_digest(b) != reference.source_digest(c)


def test_an_edited_penalty_is_never_decoded_by_the_kernel(needs_the_kernel, monkeypatch):
    """A researcher edits FlexibleAttention's penalty in place (here: monkeypatched, so the class
    that runs is the edited one): ``auto`` decodes on the grouped backend — the edit is decoded —
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
    assert stepper.name == "grouped"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning, not one per call
        auto = forced_decode(model, src, src_len, tgt_in, tgt_out, 0.8)
    assert auto.backend == "grouped"
    edited = forced_decode(model, src, src_len, tgt_in, tgt_out, 0.8, backend="eager")
    assert torch.equal(auto.log_probs, edited.log_probs)
    assert not torch.equal(edited.log_probs, before.log_probs)  # the edit is what decodes
    with pytest.raises(ConfigError, match="decode.backend: kernel does not cover this model: "
                                          "FlexibleAttention changed since the kernel was written"):
        select_backend(model, "kernel")

    monkeypatch.setattr(kernel, "REFERENCE_DIGESTS", reference.digests())  # the kernel follows
    assert select_backend(model).name == "kernel"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("attention,tau", [("global", None), ("flexible", None), ("flexible", 0.8),
                                           ("sact", None), ("flexible_sact", 0.5)])
def test_a_model_on_a_gpu_decodes_on_the_grouped_backend_as_on_the_eager_one(attention, tau):
    """On a GPU the kernel (CPU only) is not selected: ``auto`` takes the grouped backend, which
    gives the eager backend's hypotheses, windows and steps there too, scores within float32
    rounding (the GPU's matrix products may round by shape, so bit-identity is not asked)."""
    model = tiny_model(attention, seed=1).cuda()
    src, src_len = (t.cuda() for t in sources())
    assert select_backend(model).name == "grouped"
    reason = "not float32 on the CPU" if attention in ("global", "flexible") else ""
    with pytest.raises(ConfigError, match=f"kernel does not cover this model: {reason}"):
        select_backend(model, "kernel")
    for k in (1, 5, 12):
        eager = beam_search(model, src, src_len, 10, k, tau=tau, n_best=min(k, 3), backend="eager")
        grouped = beam_search(model, src, src_len, 10, k, tau=tau, n_best=min(k, 3))
        assert grouped.backend == "grouped"
        assert torch.equal(grouped.nbest, eager.nbest)
        assert torch.equal(grouped.window_sum, eager.window_sum) and torch.equal(grouped.steps, eager.steps)
        finite = torch.isfinite(eager.scores)
        assert torch.equal(torch.isfinite(grouped.scores), finite)
        torch.testing.assert_close(grouped.scores[finite], eager.scores[finite], atol=2e-5, rtol=1e-5)
    tgt_out = torch.randint(4, 12, (src.size(0), 6), generator=torch.Generator().manual_seed(0)).cuda()
    tgt_out[:, -1] = 3  # EOS
    tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], 2), tgt_out[:, :-1]], 1)
    eager = forced_decode(model, src, src_len, tgt_in, tgt_out, tau, backend="eager")
    grouped = forced_decode(model, src, src_len, tgt_in, tgt_out, tau)
    assert torch.equal(grouped.window_sum, eager.window_sum)
    torch.testing.assert_close(grouped.log_probs, eager.log_probs, atol=2e-5, rtol=1e-5)
