"""Whether each published finding held here: one :class:`Verdict` per row of the Experiments page's comparison,
decided by a rule written beside the claim (issue 33: a finding shown without saying it does not hold).

A rule is a threshold on what the run measured, chosen from the paper's own wording ("over half", "explodes",
"back close to the dense baseline"); the thresholds are the constants below, named in each rule's text. A row
whose published number and ours are different measures (a BLEU drop against this model's own metric) is
``held=None``: shown for scale, not judged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import checks

# "over half" (Clark et al. §3.2; Xiao et al. fig. 2: "most of the attention")
OVER_HALF = 0.5
# StreamingLLM fig. 3 "explodes": the window alone at least this many nats above full attention
EXPLODES_NATS = 0.5
# table 1 "back close to the dense baseline": sinks recover at least this share of the window's gap
RECOVERED = 0.75
# StreamingLLM fig. 2 "across all layers": layers above the bottom two with over 20 % on the first token
ALL_LAYERS = 0.9
# Olsson et al. fig. 1-2: the second copy "far better": its loss at most this share of the first copy's
FAR_BETTER = 0.5
# Michel et al. §4.2: 20 % (WMT) of heads off by importance with no noticeable change
FLAT_SHARE = 0.2
# Kovaleva et al. §4.1: a map type's share within this many points of the published range
TYPE_POINTS = 0.15
# Whisper's timing: our token times within one encoder frame (20 ms) of transformers'
ONE_FRAME_S = 0.02
# the control layers track time this many times worse than the alignment heads
CONTROL_TIMES = 5.0
# Wendler et al. fig. 2: English "rises" in the middle layers: its mean first-token probability at least this high
LATENT_MIN = 0.05
# Wu et al. 2024 §3.1: "less than 5 %" of the heads are retrieval heads (retrieval score above 0.1)
RETRIEVAL_SHARE = 0.05
# DuoAttention (Xiao et al. 2024): the retrieval heads full and the rest a window keep the needle: recall at least
# this share of the all-full recall
KEEPS_RECALL = 0.9
# Wu et al. fig. 1: k random heads do not carry it: their best draw's recall at most this share of the top-k's
RANDOM_SHARE = 0.5


@dataclass(frozen=True)
class Verdict:
    """One row's verdict.

    Attributes:
        rule: the rule's key (``"<experiment>_<row>"``; the page shows its text, ``exp_rule_<rule>``).
        held: True (reproduced here), False (not reproduced here) or None (not comparable: shown for scale).
    """

    rule: str
    held: bool | None


def _v(rule: str, held) -> Verdict:
    return Verdict(rule, None if held is None else bool(held))


def _sinks(r) -> list[Verdict]:
    share, stream = r.share, r.streaming
    low, high = share.bottom_top()
    above = share.per_layer[2:]
    w0 = int(np.argmin(stream.windows))
    gap, with_sinks = float(stream.window_gap[w0]), float(stream.sinks_gap[w0])
    return [_v("sinks_share", high > OVER_HALF and high > low),
            _v("sinks_layers", above.size and (above > 0.2).mean() >= ALL_LAYERS),
            _v("sinks_window", gap >= EXPLODES_NATS),
            _v("sinks_sinks", gap > 0 and with_sinks <= (1 - RECOVERED) * gap)]


def _induction(r) -> list[Verdict]:
    rnd = np.asarray(r.loss_second_random)
    off = r.loss_second_off - r.loss_second
    return [_v("ind_heads", (np.asarray(r.scores) > 0.3).sum() >= 1),
            _v("ind_loss", r.loss_second <= FAR_BETTER * r.loss_first),
            _v("ind_off", off > 0 and (not rnd.size or off > float(rnd.max()) - r.loss_second))]


def _prunable(r) -> list[Verdict]:
    return [_v("prune_flat", r.flat_share >= FLAT_SHARE), _v("prune_voita", None)]


def _clark(r) -> list[Verdict]:
    from .clark import middle_layers

    tg, shares = r.targets, r.patterns.shares
    lo, hi = middle_layers(len(tg.per_layer["separator"]))
    return [_v("clark_sep", float(np.mean(tg.per_layer["separator"][lo:hi])) > OVER_HALF),
            _v("clark_prev", len(tg.heads_above("previous")) >= 1),
            _v("clark_next", len(tg.heads_above("next")) >= 1),
            _v("clark_vertical", abs(shares["vertical"] - 0.30) <= TYPE_POINTS),
            _v("clark_hetero", 0.32 - TYPE_POINTS <= shares["heterogeneous"] <= 0.61 + TYPE_POINTS)]


def _alignment(r) -> list[Verdict]:
    return [_v("align_ours", r.max_difference <= ONE_FRAME_S),
            _v("align_control", r.control_mean_difference >= CONTROL_TIMES * max(r.mean_difference, ONE_FRAME_S / 2))]


def _grammar(r) -> list[Verdict]:
    # switching the top heads off lowers the metric (suffix log-probability; case distance) more than every random draw
    drop, rnd = r.full - r.off, r.full - np.asarray(r.random)
    agree = None if not np.isfinite(r.agreement_preference) else r.agreement_preference > 0
    return [_v("grammar_track", float(np.max(r.tracking)) > OVER_HALF),
            _v("grammar_off", drop > 0 and (not rnd.size or drop > float(rnd.max()))),
            _v("grammar_agree", agree)]


def _inner_language(r) -> list[Verdict]:
    turkish, english = r.mean(0)
    middle = slice(1, len(english) - 1)  # layer outputs before the last
    latent = bool(np.any((english[middle] > turkish[middle]) & (english[middle] >= LATENT_MIN)))
    return [_v("inner_latent", latent), _v("inner_final", turkish[-1] > english[-1]), _v("inner_size", None)]


def _retrieval(r) -> list[Verdict]:
    full, pairs = r.row("all full"), r.pairs()
    top, rnd = pairs[-1] if pairs else (None, None)  # the largest k
    kept = full is not None and top is not None and full.recall > 0 and top.recall >= KEEPS_RECALL * full.recall
    random = top is not None and rnd is not None and top.recall > 0 and rnd.recall_range[1] <= RANDOM_SHARE * top.recall
    return [_v("retr_share", r.retrieval_share < RETRIEVAL_SHARE), _v("retr_top", kept), _v("retr_random", random),
            _v("retr_kv", None)]


_RULES = {"sinks": _sinks, "induction": _induction, "prunable": _prunable, "clark": _clark, "alignment": _alignment,
          "grammar": _grammar, "inner_language": _inner_language, "retrieval_heads": _retrieval}


def verdicts(which: str, result) -> list[Verdict]:
    """One :class:`Verdict` per row of the experiment's comparison with the published numbers, in the page's
    order.

    Args:
        which: the experiment's key (``sinks``, ``induction``, ``prunable``, ``clark``, ``alignment``, ``grammar``,
            ``inner_language``, ``retrieval_heads``).
        result: what :func:`models.experiments.run` returned for it.

    Raises:
        InvalidArgumentError (``arg_choice``): an unknown key.
    """
    return _RULES[checks.choice("which", which, tuple(_RULES))](result)
