"""Evaluation: sacreBLEU scores, alignment dumps, heatmaps and word alignments (AER)."""

from nmt.evaluation.alignments import Alignment, load_alignments, save_alignments
from nmt.evaluation.evaluate import evaluate_split, write_outputs
from nmt.evaluation.metrics import corpus_scores
from nmt.evaluation.plot import plot_alignment
from nmt.evaluation.word_alignment import (
    AlignmentFormatError,
    alignment_scores,
    drop_eos,
    extract_links,
    flip_links,
    format_links,
    parse_links,
    read_gold,
    subword_to_word_links,
    symmetrize,
    teacher_forced_links,
    word_ids,
    write_links,
)

__all__ = ["Alignment", "AlignmentFormatError", "alignment_scores", "corpus_scores", "drop_eos",
           "evaluate_split", "extract_links", "flip_links", "format_links", "load_alignments",
           "parse_links", "plot_alignment", "read_gold", "save_alignments", "subword_to_word_links",
           "symmetrize", "teacher_forced_links", "word_ids", "write_links", "write_outputs"]
