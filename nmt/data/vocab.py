"""The special token ids every vocabulary reserves, as SentencePiece's own ``pad_id``,
``unk_id``, ``bos_id`` and ``eos_id`` (pieces ``<pad>``, ``<unk>``, ``<s>``, ``</s>``)."""

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
