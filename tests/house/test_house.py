"""The house in order (issues 16, 26): every test file is in a tier's folder, the code passes ruff, no module
or function is too long, the engine's imports have no cycle and keep to their layer. No model is loaded here
(README.md's Python example runs in tests/bundled/test_readme.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


from conftest import ROOT, TIERS, tier_of


def test_every_test_file_is_in_a_tier():
    """Issue 26: a test file sits in one tier's folder (its marker); none is left at the top of tests/."""
    files = list((ROOT / "tests").rglob("test_*.py"))
    assert len(files) > 40
    stray = [str(p.relative_to(ROOT)) for p in files if tier_of(p) is None]
    assert not stray, stray
    assert {tier_of(p) for p in files} == set(TIERS)


def test_ruff_finds_nothing():
    ruff = Path(sys.executable).with_name("ruff")
    out = subprocess.run([str(ruff), "check", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def _imports(path: Path) -> set[str]:
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_three_layers_keep_to_themselves():
    """viz/ draws from numpy (no torch, no streamlit, no models: a notebook or another app can use it);
    models/ is the engine (no streamlit, no pages, no figures: issue 26 took its last viz import out)."""
    for path in (ROOT / "viz").rglob("*.py"):
        assert not _imports(path) & {"torch", "streamlit", "models", "views", "transformers"}, path
    for path in (ROOT / "models").rglob("*.py"):
        assert not _imports(path) & {"streamlit", "views", "plotly", "viz"}, path
    for path in (ROOT / "pagestate").rglob("*.py"):  # below views/ and live/: a lesson is checked without a browser
        assert not _imports(path) & {"streamlit", "views", "live", "plotly", "viz"}, path
    for path in (ROOT / "live").rglob("*.py"):  # the class's state and lessons: no page, no Streamlit
        assert not _imports(path) & {"streamlit", "views"}, path


def test_views_leave_torch_and_transformers_to_the_engine():
    """Issue 26: pages are glue (read widgets, call models/, draw viz/); what they need of torch or transformers
    (a cache entry measured without the model's modules, the thread count of a timing) the engine offers."""
    found = {path.relative_to(ROOT).as_posix(): _imports(path) & {"torch", "transformers"}
             for path in (ROOT / "views").rglob("*.py")}
    assert not {k: v for k, v in found.items() if v}, found


def test_pages_end_early_with_the_apps_stop_not_streamlits():
    """A page that called ``st.stop`` was never sent to a live class, and a student's such page was drawn again
    (views/shared/pagerun.py ``stop``: after ``st.stop`` any read of the session's state raises again, so the end of
    the run could not be done); pages end early with ``views.shared.stop``."""
    found = [path.relative_to(ROOT).as_posix() for path in [ROOT / "app.py", *(ROOT / "views").rglob("*.py")]
             if "st.stop(" in path.read_text(encoding="utf-8")]
    assert not found, found


def test_no_module_is_over_500_lines():
    """Issues 16, 49: one topic per module in every product folder (the live class and the launcher too)."""
    from test_imports import PRODUCT

    paths = [p for folder in PRODUCT for p in (ROOT / folder).rglob("*.py")] + [ROOT / "app.py"]
    assert len({p.parent.relative_to(ROOT).parts[0] for p in paths[:-1]}) == len(PRODUCT)
    long = {str(p.relative_to(ROOT)) for p in paths if len(p.read_text(encoding="utf-8").splitlines()) > 500}
    assert not long, long


# each page's Session State keys (widget keys, link parameters, its own state) start with its prefix, so two
# pages never share a key by accident; Explore's keys are the app's first link parameters (layer, head, view)
# and keep their short names, the sidebar's are the app's own
PAGE_PREFIXES = {"cost": ("cost_",), "kvcache": ("kv_",), "masks": ("masks_",), "mask_sections": ("masks_",),
                 "positions": ("pos_",), "pruning": ("prune_", "_prune_"), "qkv": ("qkv_",), "flow": ("flow_",),
                 "why": ("why_", "_why_"),
                 "experiments": ("exp_",), "atlas": ("atlas_",), "atlas_sections": ("atlas_",),
                 "live": ("live_", "_live_"), "live_sections": ("live_", "_live_")}
# a page's parts, one module each, and their page
SECTIONS = {"mask_sections": "masks", "atlas_sections": "atlas", "live_sections": "live", "explore_parts": "explore"}
APP_KEYS = {"_device_slot", "_selection", "_uploader_words", "example", "lang", "model_custom", "model_key",
            "scale", "text"}


def _session_keys(path: Path) -> set[str]:
    """The literal Session State keys a view file names: ``key=``, ``session_state[...]`` / ``.get`` /
    ``.setdefault`` / ``.pop``, a :class:`UrlState`'s ``bind`` / ``read`` / ``sync`` / ``drop``, ``clamp``,
    ``layer_head`` and ``UrlState`` (an f-string's literal start counts)."""
    import ast
    keys = set()

    def literal(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            return node.values[0].value + "{}"
        return None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = list(node.args)
            if name in ("get", "setdefault", "pop") and "session_state" in ast.unparse(node.func) \
                    or name in ("bind", "read", "sync", "drop", "url_drop", "clamp"):
                args = args[:1]
            elif name == "layer_head":
                args = args[:2]
            elif name == "UrlState":
                args = list(args[0].elts) if args and isinstance(args[0], ast.Tuple) else []
            else:
                args = []
            keys |= {k for k in map(literal, args) if k}
            keys |= {k for k in (literal(kw.value) for kw in node.keywords if kw.arg == "key") if k}
        elif isinstance(node, ast.Subscript) and "session_state" in ast.unparse(node.value):
            key = literal(node.slice)
            if key:
                keys.add(key)
    return keys


def test_each_page_keeps_its_session_state_keys_under_its_own_prefix():
    views = ROOT / "views"
    seen: dict[str, str] = {}
    for path in sorted(views.rglob("*.py")):
        page = path.parent.name if path.parent.name in PAGE_PREFIXES or path.parent.name in SECTIONS else path.stem
        keys = _session_keys(path)
        if path.parent.name == "shared":
            assert keys <= APP_KEYS, (path.name, keys - APP_KEYS)
            continue
        if page in PAGE_PREFIXES:
            stray = {k for k in keys if not k.startswith(PAGE_PREFIXES[page])}
            assert not stray, (path.name, sorted(stray))
        for key in keys:
            owner = seen.setdefault(key, SECTIONS.get(page, page))
            assert owner == SECTIONS.get(page, page), f"{key!r} used by {owner} and {page}"
    assert len(seen) > 100, len(seen)
    explore = _session_keys(views / "explore.py")
    others = tuple(p for prefixes in PAGE_PREFIXES.values() for p in prefixes)
    assert explore and not any(k.startswith(others) for k in explore), explore
