"""Evaluation: sacreBLEU scores, alignment dumps and heatmaps."""

from nmt.evaluation.alignments import Alignment, load_alignments, save_alignments
from nmt.evaluation.evaluate import evaluate_split, write_outputs
from nmt.evaluation.metrics import corpus_scores
from nmt.evaluation.plot import plot_alignment

__all__ = ["Alignment", "corpus_scores", "evaluate_split", "load_alignments", "plot_alignment",
           "save_alignments", "write_outputs"]
