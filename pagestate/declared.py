"""The app's pages and each one's parameters, in the order the page draws them: the one place they are declared.

A parameter's options and bounds are written here when they are fixed; where they depend on a lesson step (its
model, its section) they are a function of :class:`~pagestate.params.Context`; where only the running page knows
them (the loaded model's layers, the text's length) they are left to the page, which passes them when it binds the
widget. ``BIG`` bounds a number the page limits by the text's length, unknown before a model reads it.
"""

from __future__ import annotations

from collections.abc import Callable

import models
from models.analysis import kv_layout
from models.analysis.masks import STARTS as MASK_STARTS

from .params import Context, Page, Param, model_stacks

BIG = 10_000_000

# ------------------------------------------------------------------------------ conditions and model-bound options


def _fixed(key: str) -> Callable:
    return lambda ctx: (models.get_spec(key),)


def _encdec(ctx: Context) -> tuple:
    spec = models.CATALOG.get(ctx.params.get("masks_encdec_choice", "whisper-base"))
    return (spec,) if spec is not None else ()  # a hub model's shape is not known before it loads


def _gqa(ctx: Context) -> tuple:
    """The Masks page's GQA section: the step's model when its heads share key/value heads, else smollm2-135m."""
    return tuple(s if s.kv_heads and s.kv_heads < s.heads else models.get_spec("smollm2-135m") for s in ctx.specs)


def section(name: str) -> tuple[Callable, str]:
    """The Masks page reads the parameter only in its section ``name``."""
    return lambda ctx: ctx.params.get("masks_section", "compare") == name, f"masks_section = {name}"


def _kind(kind: str) -> tuple[Callable, str]:
    def test(ctx):
        return section("compare")[0](ctx) and kind in (ctx.params.get("masks_kinds") or ["bidirectional", "causal"])
    return test, f"masks_kinds ∋ {kind}"


def _speech_encdec(speech: bool) -> tuple[Callable, str]:
    def test(ctx):
        spec = models.CATALOG.get(ctx.params.get("masks_encdec_choice", "whisper-base"))
        return section("encdec")[0](ctx) and (spec is not None and spec.reads == "speech") == speech
    return test, "masks_section = encdec, masks_encdec_choice: " + ("whisper-base" if speech else "text")


def _stack_options(skip_cross: bool) -> Callable:
    def options(ctx):
        common = [s for s in ("encoder", "decoder", "cross") if all(s in model_stacks(spec) for spec in ctx.specs)]
        return [s for s in common if not (skip_cross and s == "cross")]
    return options


def _experiments(ctx) -> tuple:
    from models import experiments  # the experiments' modules: only when a lesson opens the page

    return tuple(experiments.EXPERIMENTS)


def _atlas_metrics(ctx) -> tuple:
    from models.atlas import RANKABLE  # pandas and pyarrow: only when a lesson opens the atlas

    return RANKABLE


def _kv_presets(ctx) -> tuple:
    loaded = tuple(f"loaded:{s.key}" for s in ctx.specs[:1] if len(ctx.specs) == 1)
    return loaded + tuple(kv_layout.KV_PRESETS)


_KV_PRESET = (lambda ctx: "kv_preset" in ctx.params, "kv_preset")

# ----------------------------------------------------------------------------------------------- the parameters

MASK_MAX = 24  # the Masks page draws at most 24 tokens
MASK_KINDS = ("bidirectional", "causal", "sliding_window", "strided", "sink_window", "custom")
MASK_SECTIONS = ("compare", "bert_gpt", "encdec", "gqa", "per_head")
ENCDEC_PRESETS = ("Helsinki-NLP/opus-mt-tr-en", "whisper-base", "google-t5/t5-small", "facebook/bart-base")
CLIPS = ("the_cat_chased_the_mouse_en.wav", "kedi_fareyi_kovaladi_tr.wav", "record")
AUDIO_LANGUAGES = ("en", "tr", "de", "fr", "es")
REPLACED_MASKS = ("native", "bidirectional", "causal")  # Information flow and Why a head attends (one run's mask)
SCALES = ("normal", "large", "projector")  # the text size (views/shared/scale.py: the factors)
LANGS = ("en", "tr")
KV_BOUNDS = {"kv_layers": (1, 1000), "kv_heads_q": (1, 1024), "kv_heads_kv": (1, 1024), "kv_head_dim": (1, 4096),
             "kv_window": (0, BIG), "kv_window_layers": (0, 1000)}


def _layer(key, **kw) -> Param:
    return Param(key, "layer", **kw)


def _head(key, **kw) -> Param:
    return Param(key, "head", **kw)


def _flag(key, default=False, **kw) -> Param:
    return Param(key, "flag", default=default, **kw)


def _whole(key, bounds, default=None, **kw) -> Param:
    return Param(key, "whole", bounds=bounds, default=default, **kw)


def _choice(key, options, default=None, **kw) -> Param:
    return Param(key, "choice", options=options, default=default, **kw)


SIDEBAR_PARAMS = (
    _choice("lang", LANGS, "en", own=True, lesson=False),  # the viewer's interface language, not the lesson's
    Param("model_key", "model"),  # default: the language's model (models.default_model_for_language)
    Param("model_custom", "text", default="", lesson=False),  # a folder or hub id: never in a lesson or a class
    Param("text", "text"),  # default: the language's sentence
    _choice("scale", SCALES, "normal", own=True, lesson=False),  # text size: each screen's own (projector mode)
)

EXPLORE = (
    Param("pair", "text", default="", when=(lambda ctx: all(s.family == "encoder" for s in ctx.specs),
                                             "an encoder model")),
    _choice("view", ("head", "model", "heatmap", "summary"), "head"),
    _choice("stack", _stack_options(False)),
    *(_flag(k) for k in ("hide_special", "hide_first", "avg", "rollout", "value")),
    # word level, or Turkish morphemes (issue 32); the page reads the link's text itself (1, true, m, morphemes ...)
    Param("words", "choice", options=(True, False, "morphemes"), default="0", raw=True),
    _flag("side"),
    _choice("img_fmt", ("PNG", "SVG"), "PNG"),
    _layer("layer", default=0), _head("head", default=0),
    _whole("hv_start", (0, BIG), 0),
)

PRUNING = (Param("off", "heads"), _layer("prune_show_layer"), _head("prune_show_head"))

MASKS = (
    _choice("masks_section", MASK_SECTIONS, "compare"),
    Param("masks_kinds", "several", options=MASK_KINDS, default=["bidirectional", "causal"], most=4,
          when=section("compare")),
    _whole("masks_window", (1, MASK_MAX), 3, when=_kind("sliding_window")),
    _whole("masks_stride", (1, MASK_MAX), 3, when=_kind("strided")),
    _whole("masks_sink_window", (1, MASK_MAX), 3, when=_kind("sink_window")),
    _whole("masks_sinks", (0, MASK_MAX), 1, when=_kind("sink_window")),
    _choice("masks_custom_start", MASK_STARTS, MASK_STARTS[0], when=_kind("custom")),
    _layer("masks_cmp_layer", when=section("compare")), _head("masks_cmp_head", mean=True, when=section("compare")),
    _layer("masks_bg_enc_layer", of=_fixed("minilm-l6"), when=section("bert_gpt")),
    _head("masks_bg_enc_head", of=_fixed("minilm-l6"), mean=True, when=section("bert_gpt")),
    _layer("masks_bg_dec_layer", of=_fixed("smollm2-135m"), when=section("bert_gpt")),
    _head("masks_bg_dec_head", of=_fixed("smollm2-135m"), mean=True, when=section("bert_gpt")),
    _choice("masks_encdec_choice", ENCDEC_PRESETS, when=section("encdec")),
    Param("masks_src", "text", when=_speech_encdec(False)),
    Param("masks_tgt", "text", when=_speech_encdec(False)),
    _flag("masks_encdec_hide", True, when=section("encdec")),
    _layer("masks_ed_layer", of=_encdec, when=section("encdec")),
    _head("masks_ed_head", of=_encdec, mean=True, when=section("encdec")),
    _choice("masks_align_threshold", tuple(round(0.05 * i, 2) for i in range(21)), 0.1, when=_speech_encdec(False)),
    _choice("masks_clip", CLIPS, CLIPS[0], when=_speech_encdec(True)),
    _choice("masks_audio_lang", AUDIO_LANGUAGES, when=_speech_encdec(True)),
    Param("masks_audio_tgt", "text", default="", when=_speech_encdec(True)),
    _choice("masks_audio_heads", ("alignment", "selected"), "alignment", when=_speech_encdec(True)),
    _layer("masks_gqa_layer", of=_gqa, default=0, when=section("gqa")),
    # masks per head (issue 31)
    _choice("masks_ph_text", ("long", "sidebar"), "long", when=section("per_head")),
    _choice("masks_ph_preset", ("window", "duo", "custom"), "duo", when=section("per_head")),
    # the per-head section reads a long text (to 2,046 tokens): the page bounds these by its length
    _whole("masks_ph_window", (1, BIG), 64, when=section("per_head")),
    _whole("masks_ph_sinks", (0, BIG), 4, when=section("per_head")),
    _whole("masks_ph_k", (0, BIG), when=section("per_head")),
    _choice("masks_ph_score", ("lost", "retrieval"), when=section("per_head")),
    Param("masks_ph_default", "text", default="full", when=section("per_head")),
    _whole("masks_ph_budget", (2, BIG), when=section("per_head")),
)

FLOW = (
    _choice("flow_mask", REPLACED_MASKS, "native"), _flag("flow_use_off", True),
    _choice("flow_stack", _stack_options(True), "decoder"),
    _whole("flow_position", (0, BIG)),
    _layer("flow_layer"), _head("flow_head"),
    _choice("flow_level", ("tokens", "words", "morphemes"), "tokens"),  # Turkish morphemes (issue 32)
    _choice("flow_threshold", (0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2), 0.04),
    _layer("flow_de_layer"), _head("flow_de_head"),
)

WHY = (
    _choice("why_mask", REPLACED_MASKS, "native"), _flag("why_use_off", True),
    _choice("why_stack", _stack_options(False), "decoder"),
    _layer("why_layer"), _head("why_head"),
    _whole("why_i", (0, BIG)), _whole("why_j", (0, BIG)),
    _choice("why_parts", (4, 6, 8, 10, 12), 8), _choice("why_by", ("weighted", "at_j"), "weighted"),
    _flag("why_comp"),
)

ATLAS = (
    _choice("atlas_corpus", ("en", "tr", "upload")), Param("atlas_column", "text", default=""),
    _whole("atlas_max_tokens", (2, BIG)), _whole("atlas_limit", (0, 100_000), 0),
    _whole("atlas_repeats", (0, 1000)),
    _choice("atlas_engine", ("here", "ray_local", "ray_cluster"), "here"),
    Param("atlas_ray_address", "text", default=""),
    _whole("atlas_workers", (0, 4096), 0),
    _choice("atlas_metric", _atlas_metrics, "previous"), _flag("atlas_lowest"),
    _choice("atlas_stack", _stack_options(False)),
    _layer("atlas_layer"), _head("atlas_head"),
)

QKV = (
    _choice("qkv_stack", _stack_options(True)), _layer("qkv_layer"), _head("qkv_head"),
    _whole("qkv_query", (0, BIG)), _flag("qkv_noscale"),
    _choice("qkv_temperature", tuple(round(0.1 * i, 1) for i in range(1, 51)), 1.0),
)

POSITIONS = (
    _whole("pos_m", (0, 100_000), 2), _whole("pos_n", (0, 100_000), 5), _whole("pos_t", (0, 100_000), 7),
    _whole("pos_alibi_head", lambda ctx: (0, min(s.heads for s in ctx.specs) - 1), 0,
           when=(lambda ctx: all(s.heads > 1 for s in ctx.specs), "a model of 2 heads or more")),
    Param("pos_text_a", "text", default="Kedi fareyi kovaladı"),
    Param("pos_text_b", "text", default="Fareyi kedi kovaladı"),
    _layer("pos_wo_layer"), _head("pos_wo_head", mean=True),
)

COST = (
    Param("cost_lengths", "several", options=tuple(2 ** i for i in range(4, 11)), most=7),
    _whole("cost_repeats", (1, 5), 3), _flag("cost_log", True),
)

KVCACHE = (
    _choice("kv_preset", _kv_presets),
    *(_whole(k, KV_BOUNDS[k], when=_KV_PRESET) for k in ("kv_layers", "kv_heads_q", "kv_heads_kv", "kv_head_dim")),
    _choice("kv_bytes", (1, 2, 4), when=_KV_PRESET),
    *(_whole(k, KV_BOUNDS[k], when=_KV_PRESET) for k in ("kv_window", "kv_window_layers")),
    _whole("kv_tokens", (1, BIG), 131_072), Param("kv_prompt", "text"), _whole("kv_new_tokens", (4, 64), 16),
)

# ----------------------------------------------------------------------------------------------- the pages

PAGES = (
    Page("explore", "page_explore", ":material/visibility:", EXPLORE, reads_text=True, default=True),
    Page("pruning", "page_pruning", ":material/content_cut:", PRUNING, reads_text=True),
    Page("masks", "page_masks", ":material/grid_on:", MASKS),
    Page("flow", "page_flow", ":material/route:", FLOW, reads_text=True),
    Page("why", "page_why", ":material/psychology_alt:", WHY, reads_text=True),
    Page("experiments", "page_experiments", ":material/science:",
         (_choice("exp_which", _experiments),)),
    Page("atlas", "page_atlas", ":material/travel_explore:", ATLAS),
    Page("qkv", "page_qkv", ":material/calculate:", QKV, reads_text=True),
    Page("positions", "page_positions", ":material/place:", POSITIONS),
    Page("cost", "page_cost", ":material/speed:", COST),
    Page("kvcache", "page_kvcache", ":material/storage:", KVCACHE),
    Page("live", "page_live", ":material/groups:", followed=False),  # the teacher's desk: not followed
)
"""Every page of ``app.py``'s navigation, in its order."""

APP = Page("app", "", "", SIDEBAR_PARAMS)
"""The sidebar's parameters, read on every page (:func:`pagestate.page` ``("app")``)."""

SIDEBAR = {p.key: p for p in SIDEBAR_PARAMS if p.lesson}
"""The sidebar's parameters a lesson step or a live class carries (``model_key``, ``text``): a lesson keeps to the
catalog (no ``model_custom``), and the interface language and text size are each viewer's own."""

OWN = tuple(p.name for p in SIDEBAR_PARAMS if p.own)
"""Query parameters that are each viewer's own: never broadcast to a class, never taken from the teacher."""

FOLLOWED = tuple(p.name for p in PAGES if p.followed)
"""The pages a live class follows (and a lesson step may open)."""

TEXT_PAGES = tuple(p.name for p in PAGES if p.reads_text)
"""The pages that read the sidebar's sentence: a lesson step there refuses a speech model (Whisper)."""
