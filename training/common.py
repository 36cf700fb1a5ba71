"""Shared pieces of the built-in models' training and evaluation: paths, model config, batching."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from attnviz.datasets import read_jsonl  # noqa: F401  (re-exported for the training modules)
from attnviz.resources import models_dir, sets_dir

MODELS_DIR = models_dir()
DATA_DIR = sets_dir()
TRAINING_DIR = Path(__file__).resolve().parent

# Abnar & Zuidema (2020): 6 layers, 8 heads, hidden size 128.
MODEL_CONFIG = dict(hidden_size=128, num_hidden_layers=6, num_attention_heads=8,
                    intermediate_size=512, max_position_embeddings=128, type_vocab_size=2,
                    hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.0,
                    hidden_act="gelu", layer_norm_eps=1e-12, initializer_range=0.02)


def model_dir(name: str, seed: int) -> Path:
    """The built-in models' folder NAME for seed 0, NAME-seedN otherwise."""
    return MODELS_DIR / (name if seed == 0 else f"{name}-seed{seed}")


def write_jsonl(path: Path, items: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")


class Encoded:
    """Items tokenized once: token ids per item, the [MASK] position, answer and wrong ids."""

    def __init__(self, tokenizer, items: list[dict]):
        enc = tokenizer([it["text"] for it in items], add_special_tokens=True)["input_ids"]
        mask_id = tokenizer.mask_token_id
        self.ids = enc
        self.pos = []
        for it, ids in zip(items, enc):
            positions = [i for i, t in enumerate(ids) if t == mask_id]
            if len(positions) != 1:
                raise ValueError(f"expected exactly one [MASK] in {it['text']!r}")
            self.pos.append(positions[0])
        self.answer = [_word_id(tokenizer, it["answer"]) for it in items]
        self.wrong = [_word_id(tokenizer, it["wrong"]) for it in items]

    def __len__(self) -> int:
        return len(self.ids)

    def batch(self, idx: list[int], pad_id: int) -> dict[str, torch.Tensor]:
        """Tensors for the items `idx`, padded to the longest of them."""
        width = max(len(self.ids[i]) for i in idx)
        input_ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            ids = self.ids[i]
            input_ids[row, :len(ids)] = torch.tensor(ids)
            attention[row, :len(ids)] = 1
        return {"input_ids": input_ids, "attention_mask": attention,
                "pos": torch.tensor([self.pos[i] for i in idx]),
                "answer": torch.tensor([self.answer[i] for i in idx]),
                "wrong": torch.tensor([self.wrong[i] for i in idx])}


def _word_id(tokenizer, word: str) -> int:
    ids = tokenizer.convert_tokens_to_ids(word)
    if ids == tokenizer.unk_token_id:
        raise ValueError(f"{word!r} is not a whole word of the vocabulary")
    return ids


def target_logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[B, V] logits at the [MASK] position of each row (the MLM head applied there only)."""
    hidden = model.bert(input_ids=batch["input_ids"],
                        attention_mask=batch["attention_mask"]).last_hidden_state
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    return model.cls(hidden[rows, batch["pos"]])
