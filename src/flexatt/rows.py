"""The rows of Table 1, typed: a :class:`Row` is a trained model (a row of
``evaluate.checkpoints``) decoded at τ = ∞ or at its selected τ. Results keep the rows' string
ids (``flexible_ft_tau``) in JSON; what an id says — which model, whether fine-tuned or a control,
whether at a selected τ — is read once, here (:meth:`Row.of`), and the rest of the code asks the
row.

Naming (``conf/evaluate/checkpoints``): ``<x>`` a trained variant, ``<x>_ft`` its fine-tuning
(eq. 9), ``<x>_ctl`` its control (β = 0, the fine-tuning's epochs and learning rates); a row id
ending in ``_tau`` is that model at the τ ``sweep_tau`` selected for it (a control too at its own:
at one shared τ, a fine-tuning that raises g_t narrows the window by construction).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

#: a row's model: trained, fine-tuned or the fine-tuning's control
Kind = Literal["trained", "finetuned", "control"]
_SUFFIX = {"finetuned": "_ft", "control": "_ctl"}


@dataclass(frozen=True)
class Row:
    """One row: ``id`` (the JSON key), ``model`` (the checkpoint row it decodes), ``base`` (the
    trained variant the model comes from), ``kind`` and ``at_tau`` (decoded at a selected τ)."""

    id: str
    model: str
    base: str
    kind: Kind
    at_tau: bool

    @staticmethod
    def of(row_id: str) -> "Row":
        """The row a string id names."""
        at_tau = row_id.endswith("_tau")
        model = row_id[:-len("_tau")] if at_tau else row_id
        for kind, suffix in _SUFFIX.items():
            if model.endswith(suffix):
                return Row(row_id, model, model[:-len(suffix)], kind, at_tau)
        return Row(row_id, model, model, "trained", at_tau)

    def sibling(self, kind: Kind, at_tau: bool | None = None) -> "Row":
        """The row of the same base variant with another kind (and, if given, τ)."""
        model = self.base + _SUFFIX.get(kind, "")
        at = self.at_tau if at_tau is None else at_tau
        return Row.of(model + ("_tau" if at else ""))

    def reference(self, present: Collection[str]) -> str | None:
        """The row whose BLEU this row is tested against (Table 1's p-value), among the ids
        ``present``: ``global`` none; a τ row the same model at τ = ∞; a fine-tuning its control
        when that is evaluated, else its base; a control its base; every other row (and one whose
        base is absent) ``global``."""
        if self.id == "global":
            return None
        if self.at_tau and self.model in present:
            return self.model
        if self.kind == "finetuned" and self.sibling("control", False).id in present:
            return self.sibling("control", False).id
        if self.kind != "trained" and self.base in present:
            return self.base
        return "global"
