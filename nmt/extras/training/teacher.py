"""The word links that supervise guided alignment (``train.alignment_loss_weight``), from
eflomal (Östling and Tiedemann 2016, "Efficient Word Alignment with Markov Chain Monte Carlo",
PBML 106), a Bayesian IBM-model aligner: the optional extra ``pip install 'nmt[align]'``.

The teacher of a run, a prepared artifact like the tokenizer: with ``data.alignments`` null,
the trainer's rank 0 calls :func:`prepare_links` (the training hooks' ``teacher``, which
:func:`nmt.extras.training.hooks` gives ``nmt-train`` and ``nmt.train()``), which writes the
links of the training corpora once, keyed by their bytes and these settings
(:func:`links_path`), then every rank trains on them::

    path = prepare_links(cfg.data)      # {cache_dir}/alignments/{key}.txt, eflomal runs once

eflomal aligns the lowercased tokens ``re.findall(r"\\w+|[^\\w\\s]", word)`` of each whitespace
word, both directions; ``data.teacher_symmetrize`` combines them
(:func:`~nmt.data.links.symmetrize`, or one direction: ``forward``, ``reverse``)
and a link of two tokens links their whitespace words, the unit that :mod:`nmt.data.links`
maps to subwords. The file is Pharaoh, 0-based ``i-j`` (source word i, target word j), one
line per training pair (:func:`~nmt.data.corpus.iter_training`: the first
``data.max_train_pairs`` of the training split, then ``data.corpora``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import itertools
import json
import logging
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nmt.config import ConfigError
from nmt.data.corpus import (
    CorpusError,
    iter_lines,
    iter_training,
    split_fingerprint,
    training_corpora,
)
from nmt.data.links import Link, parse_links, symmetrize, write_links

log = logging.getLogger("nmt.data")

LINKS_VERSION = 2  # part of the cache key: bump when the tokens or the procedure change
_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokens(text: str) -> tuple[list[str], list[int]]:
    """eflomal's tokens of ``text`` (lowercased words and punctuation marks) and the index of
    the whitespace word each comes from: ``"Hi, you."`` -> (hi , you .), (0, 0, 1, 1)."""
    out, words = [], []
    for w, word in enumerate(text.split()):
        for token in _TOKEN.findall(word.lower()):
            out.append(token)
            words.append(w)
    return out, words


def _require_eflomal():
    try:
        import eflomal
    except ImportError:
        raise ConfigError("guided alignment (train.alignment_loss_weight > 0) needs word links: "
                          "pip install 'nmt[align]' (eflomal), or give data.alignments=FILE "
                          "(Pharaoh links, one line per training pair).") from None
    return eflomal


def align_pairs(pairs: Sequence[tuple[str, str]], methods: Sequence[str] = ("grow-diag-final-and",),
                quiet: bool = True) -> dict[str, list[set[Link]]]:
    """Word links ``(source word, target word)`` of each pair by eflomal (defaults: model 3,
    HMM with fertility; 3 samplers), per method of ``methods``: a symmetrization, or
    ``forward`` / ``reverse`` (one direction). Both directions come from one eflomal run;
    ``quiet=False`` shows eflomal's own progress."""
    eflomal = _require_eflomal()
    logging.getLogger("eflomal").setLevel(logging.WARNING if quiet else logging.INFO)
    src = [tokens(s) for s, _ in pairs]
    tgt = [tokens(t) for _, t in pairs]
    with tempfile.TemporaryDirectory(prefix="nmt-eflomal-") as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        eflomal.Aligner().align([" ".join(t) for t, _ in src], [" ".join(t) for t, _ in tgt],
                                links_filename_fwd=str(fwd), links_filename_rev=str(rev),
                                quiet=quiet)
        # eflomal writes both directions as source-target links, one line per pair
        both = [[parse_links(line)[0] for line in itertools.islice(iter_lines(f), len(pairs))]
                for f in (fwd, rev)]
    out: dict[str, list[set[Link]]] = {m: [] for m in methods}
    for (s_tok, s_word), (t_tok, t_word), f, r in zip(src, tgt, *both, strict=True):
        for m in methods:
            links = f if m == "forward" else r if m == "reverse" else symmetrize(
                f, r, m, src_len=len(s_tok), tgt_len=len(t_tok))
            out[m].append({(s_word[i], t_word[j]) for i, j in links})
    return out


def links_path(data_cfg: Any) -> Path:
    """Where :func:`prepare_links` keeps the training corpora's links: ``{cache_dir}/
    alignments/{split}-{key}.txt``, key = sha256 of the corpora's bytes, ``max_train_pairs``,
    the languages, ``teacher_symmetrize``, the eflomal version and :data:`LINKS_VERSION`.
    ConfigError when the file is not there yet and eflomal is not installed; CorpusError for
    a missing corpus."""
    try:
        version = importlib.metadata.version("eflomal")
    except importlib.metadata.PackageNotFoundError:
        version = None
    split = str(data_cfg.train_split)
    key = hashlib.sha256(json.dumps(
        [LINKS_VERSION, str(data_cfg.teacher_symmetrize), version,
         [split_fingerprint(c.data, c.split) for c in training_corpora(data_cfg)],
         data_cfg.max_train_pairs, str(data_cfg.src_lang), str(data_cfg.tgt_lang)],
        sort_keys=True).encode()).hexdigest()[:24]
    path = Path(str(data_cfg.cache_dir)) / "alignments" / f"{split}-{key}.txt"
    if version is None and not path.is_file():
        _require_eflomal()
    return path


def prepare_links(data_cfg: Any, say: Callable[[str], None] = log.info) -> Path:
    """The training corpora's word links by :func:`align_pairs` (``data.teacher_symmetrize``),
    written to :func:`links_path` unless there already; returns the path. Minutes on a large
    corpus (Multi30k's 29,000 pairs: 50 s on 2 CPU cores), with a line to ``say`` before and
    after."""
    path = links_path(data_cfg)
    if path.is_file():
        say(f"alignments: cache hit {path}")
        return path
    pairs = [(p[0], p[1]) for p in iter_training(training_corpora(data_cfg))]
    if not pairs:
        raise CorpusError(f"{data_cfg.train_split}: no pairs to align.")
    say(f"alignments: eflomal aligns {len(pairs)} pairs {data_cfg.src_lang}-{data_cfg.tgt_lang} "
        "in both directions (about 2 ms a pair on 2 CPU cores) ...")
    start = time.perf_counter()
    method = str(data_cfg.teacher_symmetrize)
    links = align_pairs(pairs, (method,))[method]
    write_links(path, links)
    say(f"alignments: {sum(map(len, links))} word links ({method}) in "
        f"{time.perf_counter() - start:.0f} s -> {path}")
    return path
