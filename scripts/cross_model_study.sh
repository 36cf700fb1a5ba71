#!/usr/bin/env bash
# The papers' comparison on one model: every core map plus ALTI and GlobEnc against blank-out,
# leave-one-out and the gradient baselines, per layer, on the first N sentences of a set
# (Linzen et al.'s agreement set as a .jsonl of items; it is CC BY-NC: keep it out of the repository).
#   bash scripts/cross_model_study.sh MODEL DATA.jsonl OUT_DIR [N]
# e.g. python -c "from attnviz.evaluate import read_linzen; import json, sys;
#        [print(json.dumps(i)) for i in read_linzen('LINZEN_FOLDER', limit=400)]" > /tmp/linzen.jsonl
#      nice bash scripts/cross_model_study.sh pkg:smollm2 /tmp/linzen.jsonl runs/smollm2 200
set -euo pipefail
model=$1; data=$2; out=$3; n=${4:-200}
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TOKENIZERS_PARALLELISM=false \
  attnviz study --model "$model" --data "$data" --out "$out" --n "$n" --quiet \
  --methods attention,rollout,flow,value_norm,attn_res,attn_res_ln,alti,globenc \
  --baselines blank_out,leave_one_out,grad_norm,input_x_grad
