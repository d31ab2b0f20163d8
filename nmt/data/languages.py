"""Directions and language tags: the one place that knows which directions a model serves.

A config's ``data.pairs`` lists the trained directions as ``"src-tgt"`` strings; null (or one
pair) is the bilingual model of ``data.src_lang`` -> ``data.tgt_lang``, which has no tags.
With two or more pairs every example carries the target-language tag ``<2xx>`` (Johnson et
al. 2017, "Google's Multilingual NMT System", sec. 3), prepended to the source ids
(``data.lang_tag=source``) or as the first target id (``target``: decoder input after BOS,
never a training target nor scored, as in M2M-100); :func:`add_tag` is the one place either side
gets it. The tags are user-defined symbols of the joint SentencePiece model
(``Tokenizer.tag_id``), as is the back-translation tag :data:`BT_TAG` with
``data.tokenizer.bt_tag``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nmt.config import (  # data.pairs: checked, parsed and counted there
    ConfigError,
    is_multilingual,  # noqa: F401 - re-exported
    parse_pairs,
)

LANG_TAG = "<2{}>"
# Tagged back-translation (Caswell et al. 2019, "Tagged Back-Translation", WMT): the piece that
# starts each synthetic source (nmt.extras.decoding.backtranslate), reserved like the language
# tags, as a user-defined symbol, when data.tokenizer.bt_tag asks for it.
BT_TAG = "<BT>"


def lang_tag(lang: str) -> str:
    """The piece that asks for target language ``lang``: ``lang_tag("fr") == "<2fr>"``."""
    return LANG_TAG.format(lang)


def _get(data_cfg: Any, key: str) -> Any:
    return data_cfg.get(key) if hasattr(data_cfg, "get") else getattr(data_cfg, key, None)


def directions(data_cfg: Any) -> list[tuple[str, str]]:
    """The trained directions of a ``data`` section (a DictConfig or a checkpoint's plain
    dict): ``data.pairs`` parsed, or ``[(src_lang, tgt_lang)]`` when it is null or absent
    (configs written before it existed)."""
    pairs = _get(data_cfg, "pairs")
    if pairs is None:
        return [(str(_get(data_cfg, "src_lang")), str(_get(data_cfg, "tgt_lang")))]
    return parse_pairs(pairs)


def trained_directions(data_cfg: Any, real: bool = False) -> list[tuple[str, str]]:
    """The directions of ``data_cfg`` some training corpus holds (``data.train_pairs``,
    ``data.corpora[k].pairs``; null: every direction), in :func:`directions` order; the
    others were validated only: zero-shot directions for evaluation and serving. ``real``:
    only those a corpus of real pairs holds, not only ``synthetic`` ones (back-translated:
    zero-resource directions)."""
    corpora = [c for c in _get(data_cfg, "corpora") or () if not (real and _get(c, "synthetic"))]
    held = [_get(data_cfg, "train_pairs")] + [_get(c, "pairs") for c in corpora]
    if any(pairs is None for pairs in held):
        return directions(data_cfg)
    return [d for d in directions(data_cfg) if any(d in parse_pairs(p) for p in held)]


def languages(data_cfg: Any) -> list[str]:
    """Every language of the directions, sorted."""
    return sorted({lang for pair in directions(data_cfg) for lang in pair})


def target_languages(data_cfg: Any) -> list[str]:
    """The languages some direction translates into (those with a tag when multilingual), sorted."""
    return sorted({tgt for _, tgt in directions(data_cfg)})


def check_target(data_cfg: Any, src_lang: str | None, tgt_lang: str) -> None:
    """ConfigError, naming what is allowed, unless a model of ``data_cfg`` can translate
    ``src_lang`` (None: not checked) into ``tgt_lang``: both must be languages it was trained
    on, ``tgt_lang`` a target language (it has a tag), and the two must differ. A zero-shot
    direction (say de-fr of a model trained on de-en and en-fr) passes; a bilingual model
    (two languages, one target) its own direction only."""
    known, targets = languages(data_cfg), target_languages(data_cfg)
    for key, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if lang is not None and lang not in known:
            raise ConfigError(f"{key}={lang!r} is not a language of this model "
                              f"(it knows {', '.join(known)}).")
    if tgt_lang not in targets:
        raise ConfigError(f"tgt_lang={tgt_lang!r}: the model was not trained to translate into it "
                          f"(target languages: {', '.join(targets)}).")
    if src_lang == tgt_lang:
        raise ConfigError(f"src_lang and tgt_lang are both {tgt_lang!r}; they must differ.")


def add_tag(ids: list[int], tag_id: int) -> list[int]:
    """``[tag_id] + ids``: the tag goes first, on the source (Johnson et al. 2017, sec. 3) or
    the target side (the decoder's first token after BOS)."""
    return [tag_id, *ids]


def temperature_shares(sizes: Sequence[int], temperature: float) -> np.ndarray:
    """The probability of drawing each direction (Arivazhagan et al. 2019, "Massively
    Multilingual NMT in the Wild", sec. 4.2): ``q_d = p_d^(1/T) / sum_e p_e^(1/T)`` with
    ``p_d = n_d / sum(n)``, for ``sizes`` ``n_d`` (pairs) and ``temperature`` T > 0 (checked
    by the config): T = 1 is proportional to size, large T nears uniform. Shape
    ``[len(sizes)]``, float64, sums to 1."""
    p = np.asarray(sizes, dtype=np.float64)
    p = p / p.sum()
    q = p ** (1.0 / float(temperature))
    return q / q.sum()
