"""Pivot translation with one model, ``src -> pivot -> tgt`` (the baseline of a zero-shot
direction; Johnson et al. 2017, sec. 5), and the check that a model can translate a direction::

    Pivot(translator, "en").translate(["Ein Hund ."], src_lang="de", tgt_lang="fr")
    check_direction(translator, "de", "fr", pivot="en")    # ConfigError unless both steps can
"""

from __future__ import annotations

from nmt.config import ConfigError
from nmt.extras.decoding import EngineDecoder
from nmt.inference.translator import direction_tags


class Pivot(EngineDecoder):
    """Pivot translation with one model: ``src -> pivot -> tgt`` (the baseline of a zero-shot
    direction). ``translate`` and ``translate_with`` take the translator's arguments; the
    first step's best translation is the second's input, so results are the second step's
    (their ``src_tokens`` are the pivot sentences; ``return_attention``, ``alignment``: the
    second step's; the first step's alignment is not read).
    What :class:`~nmt.extras.decoding.EngineDecoder` passes on (``search_settings``,
    ``device``, ``score``: the direct direction's, ...) is the wrapped translator's."""

    def __init__(self, translator, pivot: str) -> None:
        super().__init__(translator)
        self.pivot = pivot

    def translate(self, sentences, *, src_lang: str | None = None, tgt_lang: str | None = None,
                  return_attention: bool = False, alignment: bool = True, **search):
        """``sentences`` (a string or a list) through the pivot, ``search`` checked once
        (``search_settings``); ConfigError: a bad setting, the pivot is the source or target
        language, or a direction the model cannot translate."""
        return self.translate_with(sentences, self.translator.search_settings(**search),
                                   src_lang=src_lang, tgt_lang=tgt_lang,
                                   return_attention=return_attention, alignment=alignment)

    def translate_with(self, sentences, settings, *, src_lang: str | None = None,
                       tgt_lang: str | None = None, return_attention: bool = False,
                       alignment: bool = True, search=None):
        """:meth:`translate` with settings that ``search_settings`` checked already;
        ``search``: the second step's search callback (``TranslatorBase.translate_with``'s;
        :class:`~nmt.extras.decoding.mbr.MbrTranslator` over a pivot gives one)."""
        data = self.translator.config.data
        src, tgt = src_lang or data.src_lang, tgt_lang or data.tgt_lang
        check_direction(self.translator, src, tgt, self.pivot)
        single = isinstance(sentences, str)
        first = self.translator.translate_with([sentences] if single else list(sentences),
                                               settings, src_lang=src, tgt_lang=self.pivot,
                                               alignment=False)
        how = {} if search is None else {"search": search}
        out = self.translator.translate_with([r.text for r in first], settings,
                                             src_lang=self.pivot, tgt_lang=tgt,
                                             return_attention=return_attention,
                                             alignment=alignment, **how)
        return out[0] if single else out


def check_direction(translator, src_lang: str, tgt_lang: str, pivot: str | None = None) -> None:
    """ConfigError, naming what is allowed, unless ``translator`` can translate ``src_lang``
    into ``tgt_lang`` (through ``pivot``: both steps), before any text is read."""
    steps = [(src_lang, tgt_lang)] if pivot is None else [(src_lang, pivot), (pivot, tgt_lang)]
    if pivot in (src_lang, tgt_lang):
        raise ConfigError(f"pivot={pivot} is the source or target language of "
                          f"{src_lang}-{tgt_lang}: give a third language, or no pivot.")
    for src, tgt in steps:
        direction_tags(translator.config, translator.tokenizer, src, tgt)
