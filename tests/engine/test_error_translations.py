"""Every engine error reaches the Turkish interface in Turkish (issue 33, item 5).

* Every ``raise <DikkatError subclass>(...)`` in ``models/`` carries a ``code`` whose ``errmsg_<code>`` has a
  Turkish text, and every placeholder of that text is a keyword argument of the raise.
* A library's failure the loader wraps (transformers, safetensors, gguf) is sorted into a known kind with its own
  code, triggered here with tiny broken files, and the Turkish page shows no English sentence for it (the
  library's English stays in ``str(exc)`` for API users).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import shutil
from pathlib import Path

import pytest

import models
import models.errors
from test_error_messages import DYNAMIC, _placeholders, _strings  # one table of the codes built at a raise site

ROOT = Path(__file__).resolve().parents[2]
ERROR_CLASSES = {name for name, cls in vars(models.errors).items()
                 if inspect.isclass(cls) and issubclass(cls, models.errors.DikkatError)}


def _dikkat_raises():
    """(where, class name, call) of every ``raise X(...)`` in models/ with X a DikkatError subclass."""
    for path in sorted((ROOT / "models").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            func = node.exc.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in ERROR_CLASSES:
                yield f"{path.relative_to(ROOT / 'models')}:{node.lineno}", name, node.exc


def test_every_dikkat_error_raise_has_a_code_with_a_turkish_text_filled_by_its_params():
    strings = _strings()
    missing, problems, sites = [], [], 0
    for where, cls, call in _dikkat_raises():
        sites += 1
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        if "code" not in kw:
            first = call.args[0] if call.args else None
            text = first.value if isinstance(first, ast.Constant) else ast.unparse(first) if first else ""
            missing.append(f"{where} {cls}: {text[:70]}")
            continue
        code = kw.pop("code")
        codes = [code.value] if isinstance(code, ast.Constant) else DYNAMIC.get(ast.unparse(code).replace("'", '"'))
        if not codes:
            problems.append(f"{where}: code {ast.unparse(code)} is neither a string nor listed in DYNAMIC")
            continue
        given = set(kw) | set(getattr(getattr(models.errors, cls), "PARAMS", ()))  # a class may supply some
        for c in codes:
            tr = (strings.get(f"errmsg_{c}") or {}).get("tr")
            if not tr:
                problems.append(f"{where}: no Turkish errmsg_{c}")
            elif not _placeholders(tr) <= given:
                problems.append(f"{where}: errmsg_{c} needs {sorted(_placeholders(tr) - given)}, not passed")
    assert sites >= 190, sites
    assert not missing, f"raises without a code ({len(missing)}):\n" + "\n".join(missing)
    assert not problems, "\n".join(problems)


def test_no_turkish_template_quotes_a_library_message():
    """``{detail}`` carries a library's (or Python's) English text: never shown in a translation."""
    quoting = [k for k, v in _strings().items()
               if k.startswith("errmsg_") and "detail" in _placeholders(v.get("tr", ""))]
    assert not quoting, quoting


# ---- "no English sentence" -------------------------------------------------------------------------------------

ENGLISH = set(["a", "an", "the", "is", "are", "was", "were", "be", "been", "not", "no", "of", "to", "in", "on", "at",
               "by", "as", "it", "its", "this", "that", "these", "with", "for", "from", "and", "or", "but", "so", "if",
               "than", "then", "there", "which", "who", "you", "your", "we", "our", "can", "cannot", "could", "should",
               "would", "will", "may", "might", "must", "does", "do", "did", "has", "have", "had", "please", "install",
               "update", "upgrade", "command", "read", "load", "loading", "loaded", "file", "files", "model", "models",
               "type", "version", "architecture", "recognize", "recognized", "supported", "support", "yet", "out",
               "date", "because", "issue", "error", "while", "header", "invalid", "weights", "shape", "size",
               "mismatch", "set", "thus", "raising", "start", "starts", "magic", "bytes", "trying", "checkpoint",
               "work", "very", "new", "release", "fully", "covered", "incomplete", "metadata", "deserializing",
               "expecting", "value", "line", "column", "property", "name", "enclosed", "double", "quotes",
               "unrecognized", "key", "should", "valid", "unknown", "found", "missing", "expected", "got", "only",
               "use", "used", "using", "when", "what", "how", "why", "see", "details", "report", "above", "below",
               "require", "requires", "required", "need", "needs", "needed", "buffer", "least", "most", "actual",
               "offset", "unpacking", "more", "less", "any", "all", "some", "each", "every", "one", "into", "over",
               "under", "after", "before", "about", "also", "just", "like", "other", "same", "such"])


def english_run(text: str, params: dict | None = None) -> str | None:
    """The first run of 3 or more consecutive common English words in ``text``, outside the params' values
    (names, paths) and paths or file names (a token with ``/``, ``\\`` or an inner dot); None when there is none."""
    for value in sorted((str(v) for v in (params or {}).values() if str(v)), key=len, reverse=True):
        text = text.replace(value, " ")
    run: list[str] = []
    for token in text.split():
        bare = token.replace("\\", "")
        if "/" in bare or re.search(r"\w\.\w", bare):
            run = []
            continue
        word = re.sub(r"[^\w']", "", bare).lower()
        if word and word in ENGLISH:
            run.append(word)
            if len(run) >= 3:
                return " ".join(run)
        else:
            run = []
    return None


def test_the_detector_finds_english_and_passes_turkish():
    assert english_run("Cannot read GGUF file /tmp/x.gguf: it is not a GGUF file.") == "it is not"
    assert english_run("You can update Transformers with the command `pip install --upgrade transformers`.")
    assert english_run("Bu klasörde kullanılabilir bir model yok (yapılandırma ya da safetensors ağırlıkları).") is None


def _turkish(exc, monkeypatch) -> str:
    from views import shared

    for module in (shared.strings, shared.output):
        monkeypatch.setattr(module, "lang", lambda: "tr")
    return shared.error_text(exc)


# ---- triggering each wrapped library failure ------------------------------------------------------------------

def _bert(tiny_folder, tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny_folder("bert"), folder)
    return folder


def _edit_config(folder: Path, **changes) -> Path:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _gguf(path: Path, architecture: str) -> Path:
    import gguf  # requirements.txt: make test installs it
    import numpy as np

    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name("tiny")
    w.add_block_count(1)
    w.add_context_length(16)
    w.add_embedding_length(8)
    w.add_head_count(2)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b", "ab"])
    w.add_token_merges(["a b"])
    w.add_tensor("token_embd.weight", np.zeros((3, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _not_gguf(tiny_folder, tmp_path):
    path = tmp_path / "x.gguf"
    path.write_text("This is a text file, not a model.\n")
    return path


def _truncated_gguf(tiny_folder, tmp_path):
    whole = _gguf(tmp_path / "whole.gguf", "llama").read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(whole[: len(whole) // 2])
    return path


def _gguf_other_arch(tiny_folder, tmp_path):
    return _gguf(tmp_path / "rwkv.gguf", "rwkv6")


def _unknown_model_type(tiny_folder, tmp_path):
    return _edit_config(_bert(tiny_folder, tmp_path), model_type="no_such_arch")


def _config_not_json(tiny_folder, tmp_path):
    folder = _bert(tiny_folder, tmp_path)
    (folder / "config.json").write_text('{"model_type": "bert", oops')
    return folder


def _config_without_model_type(tiny_folder, tmp_path):
    folder = _bert(tiny_folder, tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("model_type")
    cfg.pop("architectures", None)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _safetensors_cut(tiny_folder, tmp_path):
    folder = _bert(tiny_folder, tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    return folder


def _wrong_shapes(tiny_folder, tmp_path):
    return _edit_config(_bert(tiny_folder, tmp_path), intermediate_size=48)


CASES = {  # what the file is -> (make it, error class, code, params it must carry)
    "text file named .gguf": (_not_gguf, models.NoUsableModelError, "gguf_not_gguf", {}),
    "truncated GGUF": (_truncated_gguf, models.NoUsableModelError, "gguf_corrupt", {}),
    "GGUF of an architecture transformers cannot load": (_gguf_other_arch, models.NoUsableModelError,
                                                         "gguf_unsupported_arch", {"architecture": "rwkv6"}),
    "unknown model_type": (_unknown_model_type, models.NoUsableModelError, "unknown_model_type",
                           {"model_type": "no_such_arch"}),
    "config.json not JSON": (_config_not_json, models.NoUsableModelError, "folder_bad_config", {}),
    "config.json without model_type": (_config_without_model_type, models.NoUsableModelError,
                                       "config_no_model_type", {}),
    "safetensors cut in half": (_safetensors_cut, models.NoUsableModelError, "safetensors_corrupt", {}),
    "weights of the wrong shape": (_wrong_shapes, models.NoUsableModelError, "weights_shape_mismatch", {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_wrapped_library_failure_has_its_own_code_and_a_turkish_text_without_english(case, tiny_folder, tmp_path,
                                                                                       monkeypatch):
    make, cls, code, params = CASES[case]
    monkeypatch.setenv("DIKKAT_CACHE", str(tmp_path / "cache"))  # a .gguf is converted into the cache
    path = make(tiny_folder, tmp_path)
    with pytest.raises(cls) as info:
        models.load(str(path), device="cpu")
    exc = info.value
    assert exc.code == code, (exc.code, str(exc))
    assert {k: exc.params.get(k) for k in params} == params
    assert english_run(str(exc)), f"the English message lost the library's text: {exc}"
    shown = _turkish(exc, monkeypatch)
    assert "İngilizce" not in shown, shown  # the translated message, not the engine's English under a headline
    assert "pip" not in shown and "Transformers does not" not in shown, shown
    run = english_run(shown, exc.params)
    assert run is None, f"English in the Turkish text ({run!r}): {shown}"


def test_the_flow_checks_name_their_part_and_place_in_turkish(monkeypatch):
    """The information flow's self-checks named the part that did not add up and where in English words
    ("the heads' outputs ... at encoder layer 3"), which reached the Turkish message as they were."""
    import torch

    from models.flow import record

    with pytest.raises(models.UnsupportedOperationError) as err:
        record._check("the heads' outputs summed through the output projection", torch.ones(3), torch.zeros(3),
                      ("encoder", 3), 1e-6)
    assert "the heads' outputs summed" in str(err.value)  # the English message keeps its words
    shown = _turkish(err.value, monkeypatch)
    assert "kodlayıcı" in shown.lower() and "3. katman" in shown and "izdüşümünden" in shown, shown
    assert english_run(shown) is None, shown
    with pytest.raises(models.UnsupportedOperationError) as err:
        record._check("the logits rebuilt from the last residual stream", torch.ones(3), torch.zeros(3), None,
                      1e-6)
    shown = _turkish(err.value, monkeypatch)
    assert "çıkış başlığı" in shown and english_run(shown) is None, shown
