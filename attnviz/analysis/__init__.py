"""Analysis on top of recorded traces: head statistics, health checks, ablation, mask
experiments, attribution and export. Plain Python (no UI imports): usable from notebooks, the
CLI and the app alike.

    from attnviz.analysis import check, head_stats, ablate, mask_lab, attribute
"""

from .ablation import AblationResult, HeadEffect, ablate, all_heads, head_effects
from .align import AlignmentReport, alignment, parse_pharaoh, read_pharaoh, write_pharaoh
from .attribution import Attribution, attribute, spearman
from .compare import Comparison, TokenChange, compare
from .dla import DirectAttribution, Part, direct_attribution
from .export import Inspection, inspect_text, write_json, write_npz
from .faithful import METHODS as FAITHFULNESS_METHODS
from .faithful import FaithfulnessReport, faithfulness
from .flow import Edge, Flow, flow
from .health import Finding, HealthReport, check
from .induction import InductionScores, induction_scores
from .lenses import LENSES, lens
from .masked_lm import MaskFill, ReadPass, fill_mask, read_pass, read_sentence, score_read
from .masking import (
    MaskExperiment,
    MaskLab,
    block_source,
    causal_experiment,
    companion_input,
    mask_lab,
    padding_experiment,
    references,
)
from .patching import PatchHeads, Patching, PatchStream, PatchWeights, patch
from .similarity import Similarity, similarity
from .speech_align import HeadTiming, TimedClip, read_word_times, score_heads
from .stats import METRICS, HeadStats, head_stats, matrix_stats, role_of
from .timestamps import Alignment, Word, alignment_heads, speech_alignment, word_timestamps
from .whatif import Decode, WhatIf, what_if
from .why import LensGrid, LogitLens, lens_grid, logit_lens

__all__ = [
    "DirectAttribution",
    "Part",
    "direct_attribution",
    "Edge",
    "Flow",
    "flow",
    "PatchHeads",
    "PatchStream",
    "PatchWeights",
    "Patching",
    "patch",
    "LensGrid",
    "LogitLens",
    "lens_grid",
    "logit_lens",
    "Similarity",
    "similarity",
    "MaskFill",
    "ReadPass",
    "fill_mask",
    "read_pass",
    "read_sentence",
    "score_read",
    "InductionScores",
    "induction_scores",
    "LENSES",
    "Alignment",
    "HeadTiming",
    "TimedClip",
    "read_word_times",
    "score_heads",
    "Word",
    "speech_alignment",
    "alignment_heads",
    "word_timestamps",
    "AlignmentReport",
    "FAITHFULNESS_METHODS",
    "FaithfulnessReport",
    "faithfulness",
    "alignment",
    "lens",
    "parse_pharaoh",
    "read_pharaoh",
    "write_pharaoh",
    "METRICS",
    "AblationResult",
    "Attribution",
    "Comparison",
    "TokenChange",
    "compare",
    "Finding",
    "HeadEffect",
    "HeadStats",
    "HealthReport",
    "Inspection",
    "MaskExperiment",
    "MaskLab",
    "ablate",
    "all_heads",
    "attribute",
    "block_source",
    "causal_experiment",
    "check",
    "companion_input",
    "head_effects",
    "head_stats",
    "inspect_text",
    "mask_lab",
    "matrix_stats",
    "padding_experiment",
    "references",
    "role_of",
    "spearman",
    "write_json",
    "write_npz",
    "Decode",
    "WhatIf",
    "what_if",
]
