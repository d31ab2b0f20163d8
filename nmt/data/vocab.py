"""The special token ids every vocabulary reserves (SentencePiece ids 0-3, nmt.data.tokenizer)."""

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
