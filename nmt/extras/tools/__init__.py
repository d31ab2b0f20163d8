"""Tools around a trained model (the seam: a CLI verb each): the HTTP service
(:mod:`~nmt.extras.tools.serve`, its batching :mod:`~nmt.extras.tools.batcher`), CTranslate2
export and engine
(:mod:`~nmt.extras.tools.ctranslate2`), Marian import and export
(:mod:`~nmt.extras.tools.marian`), word alignment (:mod:`~nmt.extras.tools.word_alignment`)
and the attention viewer (:mod:`~nmt.extras.tools.viewer`)."""
