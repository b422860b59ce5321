"""The typed rows of Table 1 (flexatt.rows): what a row id says is read once, and the relations
the evaluation and the claims use — the reference of a row's p-value, the τ a row decodes at,
the siblings of a fine-tuning — follow from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexatt.rows import Row
from flexatt.stages.evaluate import tau_of


@pytest.mark.parametrize("row_id,model,base,kind,at_tau", [
    ("global", "global", "global", "trained", False),
    ("local_m_d5", "local_m_d5", "local_m_d5", "trained", False),
    ("flexible_tau", "flexible", "flexible", "trained", True),
    ("flexible_ft", "flexible_ft", "flexible", "finetuned", False),
    ("flexible_sact_ctl_tau", "flexible_sact_ctl", "flexible_sact", "control", True),
])
def test_an_id_names_its_model_kind_and_tau(row_id, model, base, kind, at_tau):
    row = Row.of(row_id)
    assert (row.id, row.model, row.base, row.kind, row.at_tau) == (row_id, model, base, kind, at_tau)


def test_every_row_decodes_at_its_own_models_tau_and_siblings_keep_their_tau():
    selected = {"flexible": 1.5, "flexible_ft": 2.5, "flexible_ctl": 3.5, "flexible_sact_ctl": 4.5}
    for model, tau in selected.items():  # a control decodes at its own τ, not its fine-tuning's
        assert tau_of(model, selected, Path("sweep_tau.json")) == tau
    assert Row.of("flexible_ft").sibling("control").id == "flexible_ctl"
    assert Row.of("flexible_ft").sibling("control", True).id == "flexible_ctl_tau"
    assert Row.of("flexible_ctl_tau").sibling("trained", False).id == "flexible"


def test_the_reference_of_each_row():
    every = {"global", "flexible", "flexible_tau", "flexible_ft", "flexible_ft_tau", "flexible_ctl", "sact"}
    want = {"global": None, "flexible": "global", "flexible_tau": "flexible", "flexible_ft": "flexible_ctl",
            "flexible_ft_tau": "flexible_ft", "flexible_ctl": "flexible", "sact": "global"}
    assert {r: Row.of(r).reference(every) for r in every} == want
    assert Row.of("flexible_ft").reference({"global", "flexible", "flexible_ft"}) == "flexible"  # no control
    assert Row.of("flexible_ft").reference({"global", "flexible_ft"}) == "global"  # no base either
