"""Trainer hooks (the seam: the training loop): the eflomal teacher (guided alignment's links,
:mod:`~nmt.extras.training.teacher`), the R-Drop/SimCut/CrossConST regularisers
(:mod:`~nmt.extras.training.consistency`) and subword sampling
(:mod:`~nmt.extras.training.subword_sampling`)."""
