"""Decoders over a translator (the seam: the engine contract of
:class:`~nmt.inference.translator.TranslatorBase`): minimum-Bayes-risk decoding
(:mod:`~nmt.extras.decoding.mbr`), ensembles (:mod:`~nmt.extras.decoding.ensemble`), pivot
translation (:mod:`~nmt.extras.decoding.pivot`) and the evaluation of a split's directions
through them (:mod:`~nmt.extras.decoding.multilingual`)."""
