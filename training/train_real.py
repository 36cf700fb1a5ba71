"""The built-in architecture trained on real English plus the grammar (the recipe of the shipped models).

    python training/scripts/build_corpus.py --out training/corpus
    python -m training.train_real --corpus training/corpus --out /tmp/real0 --seed 0

Differences from train.py: a WordPiece vocabulary learned from the corpus and the grammar's
sentences (--vocab-size, lowercase; every answer/wrong word of both tasks is forced to be a whole
word), and training items from the corpus besides the grammar's: every corpus sentence with
is/are/was/were/has/have becomes a masked agreement item (one occurrence masked, the other number
as the wrong word), and with his/her a masked pronoun item (wrong word: the other one). Same model
(MODEL_CONFIG), same loss (vocabulary cross-entropy + answer-vs-wrong cross-entropy at [MASK]).
The output folder is a model folder (`attnviz evaluate --model FOLDER --set real`).

--styled-share: the share of all training items made by real_style.py (real names, WordNet nouns,
distractors in relative clauses, appositions and stacked phrases; half agreement, half pronoun),
taken from the corpus side. A held-out set of such items (another seed) is scored with the
grammar's dev sets at every evaluation ("styled_agreement", "styled_pronoun").

--generated FOLDER: sentences of biographies written by pkg:smollm2 (training/scripts/generate_bios.py)
become items as the corpus sentences do, --generated-share of all items, taken from the corpus side.
--hidden N (from scratch only): hidden size N instead of 128 (8 heads, feed-forward 4N).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
from pathlib import Path

import torch

from attnviz.datasets import read_jsonl, set_files, set_path

from . import grammar
from .common import MODEL_CONFIG, Encoded, target_logits
from .train import accuracy, batches, blank_unk, seed_everything

PAIRS = {"is": "are", "are": "is", "was": "were", "were": "was", "has": "have", "have": "has"}
PRON = {"his": "her", "her": "his"}


def real_items(sentences: list[str], rng: random.Random) -> list[dict]:
    items = []
    for s in sentences:
        words = s.split()
        for table, task in ((PAIRS, "agreement"), (PRON, "pronoun")):
            hits = [i for i, w in enumerate(words) if w.lower() in table]
            if hits:
                i = rng.choice(hits)
                w = words[i].lower()
                text = " ".join(words[:i] + ["[MASK]"] + words[i + 1:])
                items.append({"text": text, "answer": w, "wrong": table[w], "task": task,
                              "n_attractors": -1, "source": "corpus"})
    return items


def build_tokenizer(out: Path, texts: list[str], vocab_size: int, required: set[str]):
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    wp = BertWordPieceTokenizer(lowercase=True, clean_text=True, strip_accents=True)
    wp.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2,
                           special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                           wordpieces_prefix="##")
    vocab = sorted(wp.get_vocab().items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    have = set(tokens)
    tokens += sorted(w for w in required if w not in have)
    out.mkdir(parents=True, exist_ok=True)
    tok = BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True,
                            model_max_length=128)
    tok.save_pretrained(str(out))
    if not (out / "vocab.txt").exists():
        (out / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return tok


SHARE_OPTIONS = {
    "--gendered-appos": "this share (0..1) of the singular real-style pronoun items give the subject "
                        "(often a bare surname) an apposition whose head noun tells its sex ('the younger "
                        "brother of' + the distractors, 'the last queen of egypt'); 0 = no such item",
    "--sexed-contrast": "this share (0..1) of the singular real-style pronoun items with distractors put "
                        "a sexed common noun of the other sex right after the subject, in an object relative "
                        "clause ('the countess , whom the king had met , ...'); 0 = no such item",
    "--verb-frames": "this share (0..1) of the real-style agreement items end in a lexical verb and "
                     "its tail from a corpus sentence (WordNet verbs seen finite in the corpus, both forms one "
                     "token of the tokenizer: 189 with the built-in one), instead of the frames' ~60; 0 = no such item",
    "--more-sexed": "this share (0..1) of a real-style person's 'the (adjective) noun' draws take a "
                    "noun from real_style.MALE_MORE / FEMALE_MORE (38 + 49 nouns whose meaning gives the sex: "
                    "'the widow', 'the bridegroom') instead of the grammar's 36 pairs; 0 = no such draw",
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--vocab-size", type=int, default=12000)
    ap.add_argument("--real-share", type=float, default=0.5)
    ap.add_argument("--unk-prob", type=float, default=0.05)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--styled-share", type=float, default=0.0)
    ap.add_argument("--agreement-share", type=float, default=0.5,
                    help="share of agreement items among the real-style items (the rest: pronoun items)")
    ap.add_argument("--extra-names", action="store_true",
                    help="real-style pronoun items also draw first names from "
                         "training/data/first_names_extra.tsv (off: census names only)")
    for flag, text in SHARE_OPTIONS.items():  # each a share 0..1 of some real-style items; 0 = the option is off
        ap.add_argument(flag, type=float, default=0.0, metavar="SHARE", help=text)
    ap.add_argument("--common-names", action="store_true",
                    help="real-style pronoun items also draw first names from the shorter list of common "
                         "non-English names training/data/first_names_common.tsv (off: census names only; "
                         "not with --extra-names)")
    ap.add_argument("--hidden", type=int, default=None,
                    help="from scratch only: hidden size (8 heads, feed-forward 4x hidden) instead of "
                         f"MODEL_CONFIG's {MODEL_CONFIG['hidden_size']}")
    ap.add_argument("--generated", default=None,
                    help="a folder of training/scripts/generate_bios.py (sentences.txt: biographies written by pkg:smollm2); "
                         "its sentences become items like the corpus's, --generated-share of all items")
    ap.add_argument("--generated-share", type=float, default=0.1)
    ap.add_argument("--init", default=None,
                    help="start from this model folder's weights (fine-tuning) instead of random ones; its "
                         "tokenizer is used (implies --tokenizer INIT unless given)")
    ap.add_argument("--checkpoints", action="store_true",
                    help="also keep a copy of the weights at every evaluation in OUT/checkpoints/step-N")
    ap.add_argument("--device", default="cpu",
                    help="where to train: cpu (default) or cuda; the data, the tokenizer and the order of the "
                         "items are the same, the float arithmetic is not, so the weights differ by device")
    ap.add_argument("--tokenizer", default=None,
                    help="reuse this folder's tokenizer instead of learning one (the seeds of one model share "
                         "seed 0's, so that their attention over a sentence can be compared token by token)")
    args = ap.parse_args(argv)
    if args.extra_names and args.common_names:
        ap.error("--extra-names and --common-names: pick one")
    for flag in SHARE_OPTIONS:
        v = getattr(args, flag[2:].replace("-", "_"))
        if not 0.0 <= v <= 1.0:
            ap.error(f"{flag} is a share: 0..1, not {v}")
    if args.generated:
        gpath = Path(args.generated, "sentences.txt")
        if not gpath.exists():
            raise SystemExit(f"{gpath} is missing: make it with python training/scripts/generate_bios.py "
                             f"--out {args.generated}")
    if args.init and args.hidden:
        ap.error("--hidden sets the size of a new model: not with --init")
    if args.init and not args.tokenizer:
        args.tokenizer = args.init
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: this machine has no CUDA GPU (train on the CPU: leave --device out)")
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, set before its start
    torch.set_num_threads(1)
    seed_everything(args.seed)
    if device.type == "cuda":  # a few CUDA kernels (index backward) have no deterministic variant: warn, go on
        torch.use_deterministic_algorithms(True, warn_only=True)
    rng = random.Random(args.seed)
    out = Path(args.out)
    t0 = time.time()
    from transformers import BertConfig, BertForMaskedLM

    sents = Path(args.corpus, "sentences.txt").read_text(encoding="utf-8").splitlines()
    n_total = args.steps * args.batch_size
    n_gram = int(n_total * (1 - args.real_share))
    gram = []
    for task in ("agreement", "pronoun"):
        gram += grammar.generate(task, math.ceil(n_gram / 2), seed=args.seed, split="train")
    real = real_items(sents, rng)
    n_styled = int(n_total * args.styled_share)
    styled, styled_dev = [], {}
    if n_styled:
        from . import real_style
        vocab = None
        if args.verb_frames and args.tokenizer:  # both verb forms must be whole tokens of the tokenizer reused
            from transformers import BertTokenizerFast
            vocab = set(BertTokenizerFast.from_pretrained(args.tokenizer, trust_remote_code=False).get_vocab())
        try:
            lists = real_style.load_lists(Path(args.corpus), extra_names=args.extra_names,
                                          common_names=args.common_names, gendered_appos=args.gendered_appos,
                                          sexed_contrast=args.sexed_contrast, verb_frames=args.verb_frames,
                                          more_sexed=args.more_sexed, vocab=vocab)
        except FileNotFoundError as e:
            raise SystemExit(f"{e.filename} is missing: rebuild the corpus with "
                             "python training/scripts/build_corpus.py --out " + args.corpus) from None
        n_agr = int(round(n_styled * args.agreement_share))
        for task, n in (("agreement", n_agr), ("pronoun", n_styled - n_agr)):
            styled += real_style.items(task, n, lists, seed=args.seed)
            styled_dev["styled_" + task] = real_style.items(task, 500, lists, seed=10_000 + args.seed)
    dev = {t: grammar.generate(t, 500, seed=1000 + args.seed, split="test")
           for t in ("agreement", "pronoun")}
    dev.update(styled_dev)
    for path in set_files("real-dev"):  # the dev sets `attnviz evaluate --set real-dev` scores; never the tests
        if path.exists():
            dev[path.stem] = read_jsonl(path)
    required = {w for it in gram + real + styled + [i for v in dev.values() for i in v]
                for w in (it["answer"], it["wrong"])}
    for f in ("real_agreement.jsonl", "real_agreement2.jsonl", "real_pronoun.jsonl", "real_pronoun2.jsonl",
              "handwritten.jsonl"):
        required |= {w for it in read_jsonl(set_path(f)) for w in (it["answer"], it["wrong"])}
    gram_texts = [it["text"].replace("[MASK]", it["answer"]) for it in gram[:50000]]
    styled_texts = [it["text"].replace("[MASK]", it["answer"]) for it in styled[::4]]
    if args.tokenizer:
        from transformers import BertTokenizerFast
        tok = BertTokenizerFast.from_pretrained(args.tokenizer, trust_remote_code=False)
        vocab = tok.get_vocab()
        missing = sorted(w for w in required if w not in vocab)
        if missing:
            raise SystemExit(f"the tokenizer in {args.tokenizer} lacks {len(missing)} answer words as whole "
                             f"tokens (e.g. {', '.join(missing[:5])}): train without --tokenizer")
        out.mkdir(parents=True, exist_ok=True)
        tok.save_pretrained(str(out))
    else:
        tok = build_tokenizer(out, sents + gram_texts + styled_texts, args.vocab_size, required)
    generated = []
    if args.generated:
        gen_items = real_items(gpath.read_text(encoding="utf-8").splitlines(), rng)
        for it in gen_items:
            it["source"] = "generated"
        n_gen = int(n_total * args.generated_share)
        generated = [gen_items[i % len(gen_items)] for i in range(n_gen)] if gen_items else []
    n_real = n_total - len(gram) - len(styled) - len(generated)
    real_train = [real[i % len(real)] for i in range(max(0, n_real))]
    items = gram + real_train + styled + generated
    enc = Encoded(tok, items)
    dev_enc = {t: Encoded(tok, v) for t, v in dev.items()}
    print(f"data: {len(gram)} grammar + {len(real_train)} corpus items ({len(real)} distinct) + "
          f"{len(styled)} styled + {len(generated)} generated, "
          f"vocab {len(tok)}, {time.time() - t0:.0f}s", flush=True)

    if args.init:
        model = BertForMaskedLM.from_pretrained(args.init, trust_remote_code=False)
        if model.config.vocab_size != len(tok):
            raise SystemExit(f"{args.init} has {model.config.vocab_size} embeddings for {len(tok)} tokens")
    else:
        cfg = dict(MODEL_CONFIG)
        if args.hidden:
            cfg.update(hidden_size=args.hidden, intermediate_size=4 * args.hidden)
        config = BertConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, **cfg)
        model = BertForMaskedLM(config)
    model.to(device)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-6)

    def lr_at(step):
        if step < args.warmup:
            return (step + 1) / args.warmup
        frac = (step - args.warmup) / max(1, args.steps - args.warmup)
        return max(0.0, 0.5 * (1 + math.cos(math.pi * frac)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    plan = []
    while len(plan) < args.steps:
        plan += batches(enc, args.batch_size, rng)
    plan = plan[:args.steps]
    log, run = [], [0.0, 0.0]
    t1 = time.time()
    for step, idx in enumerate(plan):
        b = enc.batch(idx, tok.pad_token_id)
        blank_unk(b, tok, args.unk_prob, rng)
        b = {k: v.to(device) for k, v in b.items()}
        logits = target_logits(model, b)
        rows = torch.arange(len(idx), device=device)
        lv = torch.nn.functional.cross_entropy(logits, b["answer"])
        pair = torch.stack([logits[rows, b["answer"]], logits[rows, b["wrong"]]], dim=1)
        lp = torch.nn.functional.cross_entropy(pair, torch.zeros_like(b["answer"]))
        opt.zero_grad(set_to_none=True)
        (lv + lp).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        run[0] += lv.item()
        run[1] += lp.item()
        if (step + 1) % 50 == 0:
            print(f"step {step + 1} loss {run[0] / 50:.3f} pair {run[1] / 50:.3f} "
                  f"{time.time() - t1:.0f}s", flush=True)
            log.append({"step": step + 1, "loss": run[0] / 50, "pair": run[1] / 50,
                        "seconds": round(time.time() - t1, 1)})
            run = [0.0, 0.0]
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            accs = {t: accuracy(model, dev_enc[t], dev[t], tok.pad_token_id) for t in dev}
            print(f"step {step + 1} dev {json.dumps(accs)}", flush=True)
            model.eval()
            model.save_pretrained(str(out))
            if args.checkpoints:
                model.save_pretrained(str(out / "checkpoints" / f"step-{step + 1}"))
            model.train()
            if log:
                log[-1]["dev"] = accs
    model.eval()
    model.save_pretrained(str(out))
    info = {"command": "python -m training.train_real " + " ".join(sys.argv[1:] if argv is None else argv),
            "seed": args.seed, "steps": args.steps, "batch_size": args.batch_size,
            "init": args.init, "lr": args.lr, "warmup": args.warmup, "real_share": args.real_share,
            "styled_share": args.styled_share, "agreement_share": args.agreement_share,
            "extra_names": args.extra_names, "common_names": args.common_names, "gendered_appos": args.gendered_appos,
            "sexed_contrast": args.sexed_contrast, "verb_frames": args.verb_frames, "more_sexed": args.more_sexed,
            "hidden": args.hidden or MODEL_CONFIG["hidden_size"],
            "generated": args.generated, "generated_share": args.generated_share if args.generated else 0.0,
            "n_generated_items": len(generated),
            "vocab_size": len(tok), "n_grammar_items": len(gram), "n_corpus_items": len(real_train),
            "n_corpus_distinct": len(real), "n_corpus_sentences": len(sents), "n_styled_items": len(styled),
            "train_seconds": round(time.time() - t1, 1), "total_seconds": round(time.time() - t0, 1),
            "cpu_seconds": round(time.process_time(), 1), "threads": 1, "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "word_pieces": True,
            "max_train_tokens": max(len(x) for x in enc.ids), "log": log}
    (out / "train_log.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"saved {out} in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
