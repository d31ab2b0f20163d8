"""nmt: neural machine translation with a Bahdanau RNN and a Transformer.

Data flows one way (see ``README.md``): corpus -> SentencePiece -> token batches ->
model (``encode`` / ``decode``) -> label-smoothed training -> search -> sacreBLEU and
alignment heatmaps.
"""

__version__ = "0.1.0"
