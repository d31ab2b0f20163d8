"""Decoders over a translator (the seam: the engine contract of
:class:`~nmt.inference.translator.TranslatorBase`): minimum-Bayes-risk decoding
(:mod:`~nmt.extras.decoding.mbr`), ensembles (:mod:`~nmt.extras.decoding.ensemble`), pivot
translation (:mod:`~nmt.extras.decoding.pivot`) and the evaluation of a split's directions
through them (:mod:`~nmt.extras.decoding.multilingual`)."""

from __future__ import annotations

from typing import Any


class EngineDecoder:
    """A decoder over an engine (``translator``: a
    :class:`~nmt.inference.translator.TranslatorBase`, or another such decoder), which it calls
    through the public engine contract only (``translate_with``, ``hypotheses``, ``forced``,
    ``attention``). It passes on, as the engine has them, what callers read of an engine:
    ``config``, ``tokenizer``, ``device``, ``directions``, ``languages``, the capabilities
    (``all_attention``, ``epsilon_sampling``, ``alignment_full_context``), ``search_settings``
    and ``score``, and the contract on token ids (``hypotheses``, ``forced``, ``attention``:
    the engine's, so a decoder over a decoder reaches the engine: ``MbrTranslator(Pivot(t))``
    chooses the pivot's second step by MBR); a subclass gives its own ``translate`` and
    ``translate_with``."""

    def __init__(self, translator: Any) -> None:
        self.translator = translator

    config = property(lambda self: self.translator.config)
    tokenizer = property(lambda self: self.translator.tokenizer)
    device = property(lambda self: self.translator.device)
    directions = property(lambda self: self.translator.directions)
    languages = property(lambda self: self.translator.languages)
    all_attention = property(lambda self: self.translator.all_attention)
    epsilon_sampling = property(lambda self: self.translator.epsilon_sampling)
    alignment_full_context = property(lambda self: self.translator.alignment_full_context)

    def search_settings(self, **overrides: Any) -> dict:
        """The engine's :func:`~nmt.inference.translator.search_settings`."""
        return self.translator.search_settings(**overrides)

    def score(self, *args: Any, **kwargs: Any) -> list:
        """The engine's :meth:`~nmt.inference.translator.TranslatorBase.score`."""
        return self.translator.score(*args, **kwargs)

    def hypotheses(self, *args: Any, **kwargs: Any) -> list:
        """The engine's :meth:`~nmt.inference.translator.TranslatorBase.hypotheses`."""
        return self.translator.hypotheses(*args, **kwargs)

    def forced(self, *args: Any, **kwargs: Any) -> list:
        """The engine's :meth:`~nmt.inference.translator.TranslatorBase.forced`."""
        return self.translator.forced(*args, **kwargs)

    def attention(self, *args: Any, **kwargs: Any) -> list:
        """The engine's :meth:`~nmt.inference.translator.TranslatorBase.attention`."""
        return self.translator.attention(*args, **kwargs)
