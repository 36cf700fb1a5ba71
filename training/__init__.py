"""Training of the built-in models (not installed with attnviz; run from the checkout root).

    python -m training.make_data          # the grammar's held-out sets (attnviz/data/sets/*_test.jsonl)
    python -m training.train --model agreement --seed 0          # grammar-only model
    python training/scripts/build_corpus.py --out training/corpus
    python -m training.train_real --corpus training/corpus --out FOLDER --seed 0 ...
    python -m training.evaluate           # training/EVAL.md and the model cards (README.md)

Modules: grammar and lexicon (the synthetic English grammar), real_style (sentences shaped like
encyclopedia and news prose), vocab (the grammar-only tokenizer), common (model configuration,
batching), train / train_real (the two recipes), make_data, evaluate (the EVAL.md and model-card
writer). scripts/ builds the corpus and the name lists; tests/ checks all of it. The code uses only
attnviz's public modules (attnviz.datasets, attnviz.evaluate, attnviz.resources, attnviz.load_model).
PILOT_REAL.md is the diary of the experiments that chose the shipped recipe; EVAL.md the tables of the
shipped models (written by training.evaluate).
"""
