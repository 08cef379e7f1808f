"""Each head's verdict beside its metrics: proven, pattern only, or not tested (issue 46, point 7).

A head's pattern makes it a candidate; :func:`models.atlas.causal_labels` switches it off and tests what the
pattern is for. Where heads are ranked (:meth:`models.atlas.Atlas.table`, :meth:`~models.atlas.Atlas.rank`,
:func:`models.atlas.find_heads`, the Atlas page) every head carries the verdict of those tests:

* ``proven``: a label's test passed (its interval excludes 0 in the direction stated, its mean past the smallest
  change that counts);
* ``pattern_only``: the head was tested and no test passed;
* ``untested``: the head was not among the candidates tested (or no labels were computed).

Ranked by a metric that is a label's pattern (:data:`LABEL_OF`), the verdict is that label's; by another metric,
the head's best: a passed label if any (the largest effect), else its tested one with the largest effect.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: label -> the metric its candidates are picked by (``special_other``: the control-token share minus the first
#: token's; ``induction`` falls back to the corpus's induction metric when there are no repeated sequences)
RULES = {"induction": "induction_repeat", "previous": "previous", "sink": "first", "special": "special_other",
         "self": "self", "local": "distance"}
#: a ranked metric -> the label whose pattern it is
LABEL_OF = {**{("special" if m == "special_other" else m): label for label, m in RULES.items()},
            "induction": "induction"}
VERDICTS = ("proven", "pattern_only", "untested")
COLUMNS = ["verdict", "verdict_label", "effect", "effect_lo", "effect_hi", "effect_quantity"]


def verdicts(labels: pd.DataFrame | None, heads: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """``heads`` (with ``stack``, ``layer``, ``head``) with :data:`COLUMNS` added: ``verdict`` (one of
    :data:`VERDICTS`), the label it is for (``verdict_label``, "" when untested), and that test's mean change
    when the head is switched off with its 95 % interval (``effect``, ``effect_lo``, ``effect_hi``: NaN when
    untested) in ``effect_quantity``'s unit (:func:`models.atlas.causal_labels`). ``labels``: the stored tests
    (:meth:`models.atlas.Atlas.labels`) or None. ``metric``: the ranking's metric (module docstring)."""
    out = heads.copy()
    empty = {"verdict": "untested", "verdict_label": "", "effect": np.nan, "effect_lo": np.nan,
             "effect_hi": np.nan, "effect_quantity": ""}
    for column, value in empty.items():
        out[column] = value
    if labels is None or not len(labels) or not len(out):
        return out
    rows = labels[labels["primary"].astype(bool)]
    label = LABEL_OF.get(metric or "")
    if label is not None:
        rows = rows[rows["label"] == label]
    if not len(rows):
        return out
    rows = rows.assign(size=rows["delta"].abs().fillna(-1.0), won=rows["passed"].astype(bool))
    best = rows.sort_values(["won", "size"], ascending=False).drop_duplicates(["stack", "layer", "head"])
    found = pd.DataFrame({"stack": best["stack"], "layer": best["layer"].astype(int),
                          "head": best["head"].astype(int),
                          "verdict": np.where(best["won"], "proven", "pattern_only"),
                          "verdict_label": best["label"], "effect": best["delta"], "effect_lo": best["lo"],
                          "effect_hi": best["hi"], "effect_quantity": best["quantity"]})
    keyed = out[["stack", "layer", "head"]].astype({"layer": int, "head": int}).merge(
        found, on=["stack", "layer", "head"], how="left")
    hit = keyed["verdict"].notna().to_numpy()
    for column in COLUMNS:
        values = out[column].to_numpy(dtype=object if column in ("verdict", "verdict_label", "effect_quantity")
                                      else float).copy()
        values[hit] = keyed[column].to_numpy()[hit]
        out[column] = values
    return out
