"""Data pipeline: corpus reading, SentencePiece tokenizer, cached token batches.

``prepare_data(cfg.data, run_dir)`` gives the tokenizer and the memory-mapped training and
validation splits, streaming the corpus (``iter_parallel``) so that its size is bounded by
disk, not memory; ``TokenBatchSampler`` cuts an epoch into length-bucketed token batches and
``TokenizedSplit.collate`` turns one into a padded :class:`Batch`.
"""

from nmt.data.batching import (
    Batch,
    PreparedData,
    TokenBatchSampler,
    TokenizedSplit,
    load_split,
    make_src_batch,
    make_tgt_batch,
    pad_efficiency,
    prepare_data,
    sample_split,
    training_pairs,
    write_pairs,
    write_split,
)
from nmt.data.corpus import (
    CorpusError,
    drop_empty_pairs,
    iter_hf,
    iter_lines,
    iter_nonempty_pairs,
    iter_parallel,
    iter_text_pair,
    iter_tsv,
    read_hf,
    read_lines,
    read_parallel,
    read_text_pair,
    read_tsv,
    split_fingerprint,
)
from nmt.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    sample_pairs,
    tokenizer_from_pairs,
    train_or_load_tokenizer,
    train_sentencepiece,
)

__all__ = [
    "BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "Batch", "CorpusError", "PreparedData",
    "TokenBatchSampler", "TokenizedSplit", "Tokenizer", "drop_empty_pairs", "iter_hf",
    "iter_lines", "iter_nonempty_pairs", "iter_parallel", "iter_text_pair", "iter_tsv",
    "load_split", "make_src_batch", "make_tgt_batch", "pad_efficiency", "prepare_data",
    "read_hf", "read_lines", "read_parallel", "read_text_pair", "read_tsv", "sample_pairs",
    "sample_split",
    "split_fingerprint", "tokenizer_from_pairs", "train_or_load_tokenizer",
    "train_sentencepiece", "training_pairs", "write_pairs", "write_split",
]
