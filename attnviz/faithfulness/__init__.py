"""Faithfulness: do the maps agree with what actually changes the prediction?

Importance baselines for the target prediction (blank-out, leave-one-out, gradient norm,
input×gradient, integrated gradients), rank correlations (Spearman ρ, Kendall τ-b) between each
map's target row and each baseline per layer, and a resumable corpus study.

    imp = importance(lm, text, contrast=("is", "are"))        # Importance
    res = score_sentence(lm, text)                             # maps + importance + Correlations
    st = study(lm, sentences, out_dir="runs/x")               # StudyResult (mean ± std per cell)
"""
from .correlation import Correlations, chance_level, correlate, dominated_rows, kendall_tau_b, rank_corr, spearman, target_rows
from .importance import (BASELINES, DEFAULT_IG_STEPS, IG_MAX_STEPS, BaselineInfo, baseline_label, estimate_seconds, Importance, Target, attributed_positions, blank_out,
                         blank_token, gradient, importance, integrated_gradients, jacobian_norms, leave_one_out,
                         make_target, output_kind)
from .sentence import CORE_METHODS, SentenceResult, available_methods, score_sentence
from .study import ABNAR_ZUIDEMA_TABLE1, STUDY_METHODS, StudyResult, load_study, study

__all__ = ["BASELINES", "IG_MAX_STEPS", "BaselineInfo", "baseline_label", "estimate_seconds", "DEFAULT_IG_STEPS", "Importance", "Target", "importance", "blank_out", "leave_one_out",
           "gradient", "jacobian_norms", "integrated_gradients", "make_target", "attributed_positions",
           "blank_token", "output_kind", "Correlations", "chance_level", "correlate", "dominated_rows", "rank_corr", "spearman", "kendall_tau_b",
           "target_rows", "SentenceResult", "score_sentence", "available_methods", "study", "load_study",
           "StudyResult", "STUDY_METHODS", "CORE_METHODS", "ABNAR_ZUIDEMA_TABLE1"]
