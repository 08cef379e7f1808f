"""Models built by several threads at once (a class's sessions and the server's warm-up): every tied output layer
is tied and on the CPU, and transformers is left as it was (models/loading/construct.py). transformers 5 patches
``PreTrainedModel.tie_weights`` process-wide while it loads; without one build at a time, threads loading tied
models at once left ``lm_head`` on the meta device and, when their restores interleaved, every later load broken
(the lesson walk's Positions step, issue 50)."""

from __future__ import annotations

import threading

import pytest
import torch

import models
from models.loading import loader
from tiny import _config, _tokenizer

THREADS = 6


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root, out = tmp_path_factory.mktemp("tied"), []
    for i in range(THREADS):  # tiny's Llama and GPT-2, their output layer tied to the embeddings
        config, cls, kind = _config("llama" if i % 2 else "gpt2")
        config.tie_word_embeddings = True
        torch.manual_seed(i)
        cls(config).save_pretrained(str(root / f"m{i}"))  # a tied lm_head is not written: the load ties it
        _tokenizer(root / f"m{i}", kind)
        out.append(root / f"m{i}")
    return out


def _tied(loaded) -> bool:
    out, emb = loaded.model.get_output_embeddings(), loaded.model.get_input_embeddings()
    return out.weight.data_ptr() == emb.weight.data_ptr() and not out.weight.is_meta


@pytest.mark.parametrize("round_", range(3))
def test_tied_models_built_by_threads_at_once_are_all_tied(folders, round_):
    from transformers import PreTrainedModel

    tie, init = PreTrainedModel.tie_weights, PreTrainedModel.init_weights
    loader.clear_cache()
    start, results, errors = threading.Barrier(THREADS), {}, []

    def build(i):
        start.wait()
        try:
            results[i] = models.load(str(folders[i]))
        except Exception as exc:  # noqa: BLE001  (reported below)
            errors.append(repr(exc))

    threads = [threading.Thread(target=build, args=(i,)) for i in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert [i for i in range(THREADS) if not _tied(results[i])] == []
    assert not any(p.is_meta for r in results.values() for p in r.model.parameters())
    assert (PreTrainedModel.tie_weights, PreTrainedModel.init_weights) == (tie, init)  # transformers as it was
    ids = torch.tensor([[5, 10, 11, 12]])
    for r in results.values():  # the first logits are the embedding's rows: the tied layer reads them
        out = r.model(ids, output_hidden_states=True)
        last = r.model.get_output_embeddings()(out.hidden_states[-1])
        assert torch.equal(out.logits, last)
    loader.clear_cache()
