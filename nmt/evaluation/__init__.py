"""Evaluation: sacreBLEU scores, alignment dumps, heatmaps and word alignments (AER)."""

from nmt.evaluation.alignments import Alignment, load_alignments, save_alignments
from nmt.evaluation.evaluate import evaluate_split, write_outputs
from nmt.evaluation.forced_alignment import (
    ForcedAlignment,
    align_words,
    force_align,
    read_pair_file,
    select_attention,
    word_links,
)
from nmt.evaluation.metrics import corpus_scores
from nmt.evaluation.plot import plot_alignment, plot_attention, word_link_cells
from nmt.evaluation.viewer import attention_page
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

__all__ = ["Alignment", "AlignmentFormatError", "ForcedAlignment", "align_words",
           "alignment_scores", "attention_page", "corpus_scores", "drop_eos", "evaluate_split", "extract_links",
           "flip_links", "force_align", "format_links", "load_alignments", "parse_links",
           "plot_alignment", "plot_attention", "read_gold", "read_pair_file", "save_alignments", "select_attention",
           "subword_to_word_links", "symmetrize", "teacher_forced_links", "word_ids",
           "word_link_cells", "word_links", "write_links", "write_outputs"]
