"""Train a built-in masked language model on the synthetic grammar.

    python -m training.train --model agreement --seed 0

`agreement` is ONE joint model trained on both tasks (verb-number agreement and possessive
pronouns), so builtin:agreement answers both kinds of sentence. `--model pronoun` trains the same
architecture on pronoun items only (not shipped). The model is BertForMaskedLM (post-LN) with
6 layers, 8 heads, hidden size 128 (Abnar & Zuidema 2020). The loss is computed at the [MASK] slot
only: cross-entropy over the whole vocabulary plus a two-way cross-entropy between the answer and
the wrong word. Training is reproducible from the seed on one machine with the same --threads.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from . import grammar
from .common import MODEL_CONFIG, Encoded, model_dir, target_logits
from .vocab import write_tokenizer

TASKS_OF_MODEL = {"agreement": ("agreement", "pronoun"), "pronoun": ("pronoun",)}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)


def batches(enc: Encoded, batch_size: int, rng: random.Random, chunk: int = 50):
    """Index lists of one epoch: shuffle, sort chunks of `chunk` batches by length (less padding),
    shuffle the batches."""
    order = list(range(len(enc)))
    rng.shuffle(order)
    out = []
    span = batch_size * chunk
    for s in range(0, len(order), span):
        part = sorted(order[s:s + span], key=lambda i: len(enc.ids[i]))
        out += [part[j:j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(out)
    return [b for b in out if len(b) == batch_size]


def blank_unk(b: dict[str, torch.Tensor], tokenizer, prob: float, rng: random.Random) -> None:
    """In place: for a share `prob` of rows, replace one random word token (not [CLS], [SEP],
    [MASK] or padding) by [UNK]; the label stays, so a blanked subject leaves the answer open."""
    ids = b["input_ids"]
    special = {tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id,
               tokenizer.pad_token_id}
    for row in range(ids.shape[0]):
        if rng.random() < prob:
            cand = [j for j, t in enumerate(ids[row].tolist()) if t not in special]
            ids[row, cand[rng.randrange(len(cand))]] = tokenizer.unk_token_id


@torch.no_grad()
def accuracy(model, enc: Encoded, items: list[dict], pad_id: int, batch_size: int = 256) -> dict:
    """Share of items whose answer logit beats the wrong logit, overall and by attractor count."""
    model.eval()
    device = next(model.parameters()).device
    correct = []
    for s in range(0, len(enc), batch_size):
        idx = list(range(s, min(len(enc), s + batch_size)))
        b = {k: v.to(device) for k, v in enc.batch(idx, pad_id).items()}
        logits = target_logits(model, b)
        rows = torch.arange(len(idx), device=device)
        correct += (logits[rows, b["answer"]] > logits[rows, b["wrong"]]).tolist()
    model.train()
    by_att: dict[int, list[bool]] = {}
    for it, c in zip(items, correct):
        by_att.setdefault(it["n_attractors"], []).append(c)
    return {"all": float(np.mean(correct)),
            **{f"att{k}": float(np.mean(v)) for k, v in sorted(by_att.items())}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="agreement", choices=sorted(TASKS_OF_MODEL))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--pair-weight", type=float, default=1.0,
                    help="weight of the answer-vs-wrong cross-entropy added to the vocab loss")
    ap.add_argument("--unk-prob", type=float, default=0.1,
                    help="share of training sentences in which one random word is replaced by "
                    "[UNK] (so that blanking a word out with [UNK] has a defined effect)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (reproducibility "
                    "holds for a fixed thread count)")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast (faster on CPUs "
                    "with AVX512-BF16/AMX)")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--out", default=None, help="output folder (default: the built-in models' folder "
                    "attnviz/data/models/MODEL for seed 0, MODEL-seedN otherwise)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    out = Path(args.out) if args.out else model_dir(args.model, args.seed)
    t_start = time.time()

    from transformers import BertConfig, BertForMaskedLM

    tokenizer = write_tokenizer(out)
    pad_id = tokenizer.pad_token_id

    tasks = TASKS_OF_MODEL[args.model]
    n_total = args.steps * args.batch_size
    per_task = math.ceil(n_total / len(tasks))
    items = []
    for task in tasks:
        items += grammar.generate(task, per_task, seed=args.seed, split="train")
    enc = Encoded(tokenizer, items)
    dev = {task: grammar.generate(task, 500, seed=1000 + args.seed, split="test") for task in tasks}
    dev_enc = {task: Encoded(tokenizer, its) for task, its in dev.items()}
    t_data = time.time() - t_start
    print(f"data: {len(items)} training items, {t_data:.1f}s", flush=True)

    config = BertConfig(vocab_size=len(tokenizer), pad_token_id=pad_id, **MODEL_CONFIG)
    model = BertForMaskedLM(config)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-6)

    def lr_at(step: int) -> float:
        if step < args.warmup:
            return (step + 1) / args.warmup
        frac = (step - args.warmup) / max(1, args.steps - args.warmup)
        return max(0.0, 0.5 * (1 + math.cos(math.pi * frac)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    rng = random.Random(args.seed)
    plan: list[list[int]] = []
    while len(plan) < args.steps:
        plan += batches(enc, args.batch_size, rng)
    plan = plan[:args.steps]

    log = []
    t_train = time.time()
    run_loss = run_pair = 0.0
    for step, idx in enumerate(plan):
        b = enc.batch(idx, pad_id)
        if args.unk_prob > 0:
            blank_unk(b, tokenizer, args.unk_prob, rng)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = target_logits(model, b)
        logits = logits.float()
        rows = torch.arange(len(idx))
        loss_vocab = torch.nn.functional.cross_entropy(logits, b["answer"])
        pair = torch.stack([logits[rows, b["answer"]], logits[rows, b["wrong"]]], dim=1)
        loss_pair = torch.nn.functional.cross_entropy(pair, torch.zeros_like(b["answer"]))
        loss = loss_vocab + args.pair_weight * loss_pair
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        run_loss += loss_vocab.item()
        run_pair += loss_pair.item()
        if (step + 1) % 100 == 0:
            print(f"step {step + 1} loss {run_loss / 100:.4f} pair {run_pair / 100:.4f} "
                  f"lr {sched.get_last_lr()[0]:.2e} {time.time() - t_train:.0f}s", flush=True)
            log.append({"step": step + 1, "loss": run_loss / 100, "pair_loss": run_pair / 100,
                        "seconds": round(time.time() - t_train, 1)})
            run_loss = run_pair = 0.0
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            accs = {t: accuracy(model, dev_enc[t], dev[t], pad_id) for t in tasks}
            print(f"step {step + 1} dev " + " | ".join(
                f"{t}: " + " ".join(f"{k} {v:.3f}" for k, v in a.items()) for t, a in accs.items()),
                flush=True)
            if not log or log[-1]["step"] != step + 1:
                log.append({"step": step + 1, "loss": run_loss / ((step + 1) % 100 or 100),
                            "pair_loss": run_pair / ((step + 1) % 100 or 100),
                            "seconds": round(time.time() - t_train, 1)})
            log[-1]["dev"] = accs

    t_total = time.time() - t_start
    model.eval()
    model.save_pretrained(str(out))
    info = {"command": "python -m training.train " + " ".join(sys.argv[1:] if argv is None
                                                                      else argv),
            "model": args.model, "tasks": list(tasks), "seed": args.seed, "steps": args.steps,
            "batch_size": args.batch_size, "lr": args.lr, "warmup": args.warmup,
            "weight_decay": args.weight_decay, "pair_weight": args.pair_weight,
            "unk_prob": args.unk_prob,
            "threads": args.threads, "bf16": args.bf16, "n_train_items": len(items),
            "data_seconds": round(t_data, 1), "train_seconds": round(time.time() - t_train, 1),
            "total_seconds": round(t_total, 1),
            "cpu_seconds": round(time.process_time(), 1), "final_loss": log[-1]["loss"] if log else None,
            "final_pair_loss": log[-1]["pair_loss"] if log else None,
            "final_dev": log[-1].get("dev") if log else None,
            "n_parameters": sum(p.numel() for p in model.parameters()),
            "torch": torch.__version__, "cpu_count": os.cpu_count(), "log": log}
    (out / "train_log.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"saved {out} in {t_total:.0f}s", flush=True)


if __name__ == "__main__":
    main()
