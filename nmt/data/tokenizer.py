"""SentencePiece subword tokenizer: trained on the training split, cached, saved with runs.

Special ids are fixed for every model this package trains (they are SentencePiece's own
``pad_id`` / ``unk_id`` / ``bos_id`` / ``eos_id``, so both vocabularies agree on them):

========  ====  ===========
``PAD``   0     ``<pad>``
``UNK``   1     ``<unk>``
``BOS``   2     ``<s>``
``EOS``   3     ``</s>``
========  ====  ===========

Text is normalised with SentencePiece's ``nmt_nfkc`` rule (NFKC, case kept, runs of
white space collapsed, leading/trailing space removed), so ``decode(encode(x)) == x``
holds for every normalised ``x`` whose characters occur in the training data, umlauts
and other non-ASCII letters included (``character_coverage=1.0`` keeps every training
character). Models are unigram LM (Kudo 2018) or BPE (Sennrich et al. 2016), one joint
model for both languages or one per side.

Each model trains on at most ``data.tokenizer.input_sentence_size`` sentences: a uniform
random sample of the training pairs (reservoir sampling over the streamed corpus, seeded,
so the same corpus always gives the same sample and model), so memory and time stay
bounded however large the corpus is; a corpus that fits is used whole, in corpus order.

Training is skipped when a model trained from the same data and the same settings is in
the cache: ``{cache_dir}/tokenizers/{sha256(settings, data)}/``.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import logging
import math
import os
import random
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm

from nmt.config import ConfigError, cfg_get
from nmt.data.corpus import CorpusError

from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

TOKENIZER_VERSION = 1
SAMPLE_SEED = 0  # seed of the training-pair sample (part of the model's identity: keep it)
_STATE_FILE = "tokenizer.json"
log = logging.getLogger("nmt.data")

Texts = Sequence[str] | Callable[[], Sequence[str]]
Pairs = Callable[[], Iterable[tuple[str, str]]]
# SentencePiece's sampling generator is one per process (its seed) and per thread: see
# Tokenizer.encode_sampled, which holds this lock while it seeds and samples.
_SAMPLING_LOCK = threading.Lock()


class Tokenizer:
    """Source and target SentencePiece models (the same one when ``joint``).

    Attributes:
        src_vocab_size: number of source ids (specials included).
        tgt_vocab_size: number of target ids (equals ``src_vocab_size`` when joint).
        joint: one shared model/vocabulary for both sides.
        settings: the training settings (type, vocab_size, character_coverage, languages).

    ``encode_*`` return subword ids without BOS/EOS; batching adds them.

    Args:
        src_model: serialised SentencePiece model of the source side (or both when joint).
        tgt_model: serialised target model; ``None`` for one joint model.
        settings: the training settings to keep with the model (saved, not interpreted).

    Raises:
        ValueError: a model does not use this package's special ids (PAD 0, UNK 1, BOS 2,
            EOS 3); SentencePiece's own errors (e.g. ``RuntimeError`` for bytes that are
            not a model) propagate.
    """

    def __init__(self, src_model: bytes, tgt_model: bytes | None = None,
                 settings: dict[str, Any] | None = None):
        self.joint = tgt_model is None
        self._src_bytes = bytes(src_model)
        self._tgt_bytes = self._src_bytes if self.joint else bytes(tgt_model)
        self._src = spm.SentencePieceProcessor(model_proto=self._src_bytes)
        self._tgt = self._src if self.joint else spm.SentencePieceProcessor(model_proto=self._tgt_bytes)
        for sp in (self._src, self._tgt):
            ids = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
            if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
                raise ValueError(f"SentencePiece model has special ids {ids} (pad, unk, bos, eos); "
                                 f"this package needs {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}.")
        self.src_vocab_size = self._src.get_piece_size()
        self.tgt_vocab_size = self._tgt.get_piece_size()
        self.settings = dict(settings or {})

    # ------------------------------------------------------------------ encode/decode
    def encode_src(self, text: str) -> list[int]:
        """Source text -> subword ids (no BOS/EOS)."""
        return self._src.encode(text, out_type=int)

    def encode_tgt(self, text: str) -> list[int]:
        """Target text -> subword ids (no BOS/EOS)."""
        return self._tgt.encode(text, out_type=int)

    def encode_src_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Many source texts at once (SentencePiece's threaded batch encoder)."""
        return self._src.encode(list(texts), out_type=int, num_threads=2)

    def encode_tgt_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Many target texts at once (SentencePiece's threaded batch encoder)."""
        return self._tgt.encode(list(texts), out_type=int, num_threads=2)

    def encode_sampled(self, src_texts: Sequence[str], tgt_texts: Sequence[str], alpha: float,
                       nbest_size: int, seed: int | Sequence[int]
                       ) -> tuple[list[list[int]], list[list[int]]]:
        """Both sides with sampled segmentations (subword regularisation, Kudo 2018).

        Unigram models sample a segmentation x with probability proportional to
        ``P(x)^alpha`` (from all of them, forward-filtering backward-sampling, with
        ``nbest_size=-1``; else from the ``nbest_size`` best); BPE models drop each merge with
        probability ``alpha`` (BPE-dropout, Provilkov et al. 2020; ``nbest_size`` unused).
        Every segmentation decodes to the same text as :meth:`encode_src` / :meth:`encode_tgt`'s.

        ``seed``: ints, mixed by NumPy's ``SeedSequence`` into one SentencePiece seed per side.
        SentencePiece's generator is seeded process-wide (``set_random_generator_seed``) and
        lives per thread, and its multi-threaded batch encoder hands sentences to threads in
        no fixed order; so each call seeds and encodes single-threaded in a new thread, one
        call at a time: the same seed gives the same ids within a process. Another process
        draws differently (sentencepiece 0.2.3, measured), which is why
        :func:`nmt.data.batching.sample_split` caches its draws.

        Returns:
            ``(src_ids, tgt_ids)``: one id list per text (no BOS/EOS).
        """
        entropy = [int(x) for x in np.atleast_1d(seed)]
        seeds = [int(np.random.SeedSequence([*entropy, side]).generate_state(1)[0]) & 0x7FFFFFFF
                 for side in (0, 1)]   # 0xFFFFFFFF would mean "unseeded" to SentencePiece
        kwargs = dict(out_type=int, num_threads=1, enable_sampling=True, alpha=float(alpha),
                      nbest_size=int(nbest_size))
        out: dict[str, Any] = {}

        def work() -> None:
            try:
                spm.set_random_generator_seed(seeds[0])
                out["src"] = self._src.encode(list(src_texts), **kwargs)
                spm.set_random_generator_seed(seeds[1])
                out["tgt"] = self._tgt.encode(list(tgt_texts), **kwargs)
            except BaseException as err:  # re-raised in the caller's thread
                out["error"] = err

        with _SAMPLING_LOCK:
            thread = threading.Thread(target=work, name="nmt-subword-sampling")
            thread.start()
            thread.join()
        if "error" in out:
            raise out["error"]
        return out["src"], out["tgt"]

    @staticmethod
    def _clean(ids: Iterable[int]) -> list[int]:
        out = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(i)
        return out

    def decode_src(self, ids: Iterable[int]) -> str:
        """Source ids -> detokenised text; PAD/BOS dropped, stops at the first EOS."""
        return self._src.decode(self._clean(ids))

    def decode_tgt(self, ids: Iterable[int]) -> str:
        """Target ids -> detokenised text; PAD/BOS dropped, stops at the first EOS."""
        return self._tgt.decode(self._clean(ids))

    def src_pieces(self, ids: Iterable[int]) -> list[str]:
        """Source ids -> subword strings, one per id (EOS shown as ``</s>``), for plots."""
        return [self._src.id_to_piece(int(i)) for i in ids]

    def tgt_pieces(self, ids: Iterable[int]) -> list[str]:
        """Target ids -> subword strings, one per id (EOS shown as ``</s>``), for plots."""
        return [self._tgt.id_to_piece(int(i)) for i in ids]

    def normalize(self, text: str) -> str:
        """The text as the tokenizer sees it (``nmt_nfkc``): ``decode(encode(x)) == normalize(x)``
        for text whose characters are all in the vocabulary."""
        return self._src.normalize(text).replace("\u2581", " ").strip()

    @property
    def fingerprint(self) -> str:
        """sha256 of the model bytes: changes whenever the tokenizer changes."""
        h = hashlib.sha256(self._src_bytes)
        if not self.joint:
            h.update(self._tgt_bytes)
        return h.hexdigest()

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Picklable dict (model bytes + settings, no paths) stored in checkpoints."""
        return {"version": TOKENIZER_VERSION, "joint": self.joint, "src_model": self._src_bytes,
                "tgt_model": None if self.joint else self._tgt_bytes, "settings": dict(self.settings)}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Tokenizer:
        """Inverse of :meth:`state_dict`.

        Raises:
            ValueError: the dict is not a tokenizer state of a known version.
        """
        if not isinstance(state, dict) or state.get("version") != TOKENIZER_VERSION:
            raise ValueError(f"not a tokenizer state of version {TOKENIZER_VERSION}.")
        return cls(state["src_model"], state["tgt_model"], state.get("settings"))

    def save(self, directory: str | Path) -> None:
        """Write ``spm.model`` (joint) or ``src.model`` + ``tgt.model``, and ``tokenizer.json``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        files = {"spm.model": self._src_bytes} if self.joint else \
            {"src.model": self._src_bytes, "tgt.model": self._tgt_bytes}
        for name, data in files.items():
            (directory / name).write_bytes(data)
        meta = {"version": TOKENIZER_VERSION, "joint": self.joint, "files": sorted(files),
                "settings": self.settings, "special_ids": {"pad": PAD_ID, "unk": UNK_ID,
                                                           "bos": BOS_ID, "eos": EOS_ID}}
        (directory / _STATE_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        """Read a directory written by :meth:`save`.

        Raises:
            FileNotFoundError: ``tokenizer.json`` or a model file is missing (message names it).
        """
        directory = Path(directory)
        meta_path = directory / _STATE_FILE
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path}: no tokenizer saved here.")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        names = ["spm.model"] if meta["joint"] else ["src.model", "tgt.model"]
        blobs = []
        for name in names:
            path = directory / name
            if not path.is_file():
                raise FileNotFoundError(f"{path}: tokenizer model file is missing.")
            blobs.append(path.read_bytes())
        return cls(blobs[0], None if meta["joint"] else blobs[1], meta.get("settings"))


# ---------------------------------------------------------------------- training
def _settings(tok_cfg: Any, src_lang: str, tgt_lang: str) -> dict[str, Any]:
    def get(key: str) -> Any:
        return cfg_get(tok_cfg, key)

    settings = {"type": str(get("type")), "vocab_size": int(get("vocab_size")),
                "character_coverage": float(get("character_coverage")), "joint": bool(get("joint")),
                "input_sentence_size": int(get("input_sentence_size")),
                "src_lang": src_lang, "tgt_lang": tgt_lang}
    if settings["type"] not in ("unigram", "bpe"):
        raise ValueError(f"data.tokenizer.type={settings['type']!r} must be unigram or bpe.")
    if settings["input_sentence_size"] < 1:
        raise ValueError(f"data.tokenizer.input_sentence_size={settings['input_sentence_size']} "
                         "must be at least 1.")
    return settings


def hash_texts(*sides: Iterable[str]) -> str:
    """sha256 over the lines of each side (a separator keeps sides and lines apart)."""
    h = hashlib.sha256()
    for side in sides:
        for line in side:
            h.update(line.encode("utf-8"))
            h.update(b"\n")
        h.update(b"\x00side\x00")
    return h.hexdigest()


def sample_pairs(pairs: Iterable[tuple[str, str]], k: int, seed: int = SAMPLE_SEED
                 ) -> tuple[list[tuple[str, str]], int]:
    """A uniform random sample of ``k`` pairs of a stream, in stream order (memory: ``k`` pairs).

    Reservoir sampling, Li's Algorithm L (ACM TOMS 1994): every subset of ``k`` pairs is
    equally likely, with O(k log(n / k)) random draws; the whole stream is read (so its
    errors are raised), never held. A stream of at most ``k`` pairs is returned whole.

    Args:
        pairs: the stream, read once.
        k: sample size, at least 1.
        seed: the sample is a function of (stream, ``k``, ``seed``).

    Returns:
        (the sample, ordered as in the stream; the number of pairs the stream held).

    Raises:
        ValueError: ``k`` < 1. Errors of the stream propagate.
    """
    if k < 1:
        raise ValueError(f"sample size k={k} must be at least 1.")
    rng = random.Random(seed)
    counter = itertools.count()
    stream = zip(pairs, counter, strict=False)  # (pair, position); counter stops with pairs
    reservoir = list(itertools.islice(stream, k))
    if len(reservoir) == k:
        w = math.exp(math.log(1.0 - rng.random()) / k)  # 1 - random() lies in (0, 1]
        while True:
            log_keep = math.log1p(-w) if w < 1.0 else -math.inf
            skip = math.floor(math.log(1.0 - rng.random()) / log_keep) if log_keep else sys.maxsize
            item = next(itertools.islice(stream, skip, None), None)
            if item is None:
                break
            reservoir[rng.randrange(k)] = item
            w *= math.exp(math.log(1.0 - rng.random()) / k)
        reservoir.sort(key=lambda item: item[1])
    return [pair for pair, _ in reservoir], next(counter)


def train_sentencepiece(texts: Sequence[str], model_type: str, vocab_size: int,
                        character_coverage: float) -> bytes:
    """Train one SentencePiece model in memory; returns the serialised model.

    It trains on every sentence of ``texts`` in their order (callers bound the number: see
    :func:`sample_pairs`); SentencePiece's peak memory grows by about 1.4 KB per sentence
    (unigram, 8,000 pieces, Multi30k-like captions: 82 MB for 58,000 sentences).

    ``vocab_size`` is a soft limit (``hard_vocab_limit=False``): a corpus too small to
    provide that many pieces yields a smaller vocabulary (logged) instead of an error.
    Empty sentences are not removed here (training pairs are cleaned once, by
    :func:`nmt.data.corpus.iter_nonempty_pairs`); SentencePiece skips them.

    Raises:
        CorpusError: no non-empty training sentence.
        ConfigError: SentencePiece rejects the settings, e.g. ``vocab_size`` smaller than the
            number of distinct characters (the message names ``data.tokenizer.vocab_size`` and
            the smallest value that works; SentencePiece's C++ trace is dropped).
    """
    if not any(t.strip() for t in texts):
        raise CorpusError("cannot train a tokenizer: the training texts are all empty.")
    out = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_writer=out, model_type=model_type,
            vocab_size=vocab_size, character_coverage=character_coverage,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            normalization_rule_name="nmt_nfkc", hard_vocab_limit=False,
            # SentencePiece's reservoir is at least as large as ``texts``, so it keeps them all,
            # in order; the values are recorded in the model, where 2,000,000 keeps models of
            # corpora under that size byte-identical to those trained before sampling moved here
            input_sentence_size=max(2_000_000, len(texts)), shuffle_input_sentence=True,
            max_sentence_length=8192, num_threads=2, minloglevel=2)
    except RuntimeError as err:
        msg = str(err).strip().splitlines()[-1] if str(err).strip() else repr(err)
        need = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", msg)
        if need:
            raise ConfigError(
                f"data.tokenizer.vocab_size={vocab_size} is too small: the training text has "
                f"characters and special pieces needing at least {need.group(2)} entries "
                f"({model_type} model). Set data.tokenizer.vocab_size={need.group(2)} or more "
                "(or lower data.tokenizer.character_coverage).") from None
        msg = msg.split("] ", 1)[-1]  # drop SentencePiece's "INTERNAL: file.cc(123) [check]"
        raise ConfigError(f"SentencePiece training failed ({model_type}, data.tokenizer."
                          f"vocab_size={vocab_size}): {msg} Check the data.tokenizer settings."
                          ) from None
    model = out.getvalue()
    got = spm.SentencePieceProcessor(model_proto=model).get_piece_size()
    if got < vocab_size:
        log.warning("tokenizer: the corpus yields only %d %s pieces (asked for vocab_size=%d)",
                    got, model_type, vocab_size)
    return model


def _resolve(texts: Texts) -> Sequence[str]:
    return texts() if callable(texts) else texts


def train_or_load_tokenizer(tok_cfg: Any, src_lang: str, tgt_lang: str, src_texts: Texts,
                            tgt_texts: Texts, cache_dir: str | Path,
                            data_hash: str | None = None) -> Tokenizer:
    """:func:`tokenizer_from_pairs` for training texts given as two lists.

    Args:
        src_texts, tgt_texts: training sentences (training split only, equally many), or
            zero-argument callables returning them, so that a cache hit need not read the
            corpus.
        tok_cfg, src_lang, tgt_lang, cache_dir, data_hash: see :func:`tokenizer_from_pairs`.

    Raises:
        ValueError: the sides differ in length, or see :func:`tokenizer_from_pairs`.
        CorpusError, ConfigError: see :func:`tokenizer_from_pairs`.
    """
    resolved: list[Sequence[str]] = []

    def pairs() -> Iterable[tuple[str, str]]:
        if not resolved:
            resolved.extend((_resolve(src_texts), _resolve(tgt_texts)))
        return zip(*resolved, strict=True)

    return tokenizer_from_pairs(tok_cfg, src_lang, tgt_lang, pairs, cache_dir, data_hash)


def tokenizer_from_pairs(tok_cfg: Any, src_lang: str, tgt_lang: str, pairs: Pairs,
                         cache_dir: str | Path, data_hash: str | None = None) -> Tokenizer:
    """Return the tokenizer for this training corpus and these settings, training it if needed.

    Training reads the corpus once as a stream and keeps a seeded uniform sample of it (see
    :func:`sample_pairs`): ``input_sentence_size`` pairs per side for two models, half as many
    pairs (both sides of each) for a joint model, so each SentencePiece model trains on at
    most ``input_sentence_size`` sentences (a joint model on at least two). A corpus within
    that bound trains on every pair, in corpus order (the source side, then the target side,
    for a joint model).

    Args:
        tok_cfg: ``data.tokenizer`` section (type, vocab_size, character_coverage, joint,
            input_sentence_size).
        src_lang, tgt_lang: language codes (part of the cache key and the saved settings).
        pairs: zero-argument callable returning a fresh stream of ``(source, target)``
            training pairs (training split only, already cleaned); it is not called on a
            cache hit with ``data_hash`` given.
        cache_dir: models go to ``{cache_dir}/tokenizers/{key}/``.
        data_hash: identity of the training data when the caller already knows it (e.g. a
            hash of the corpus files); default: :func:`hash_texts` of the two sides (two
            more passes over ``pairs()``).

    The cache key is sha256(settings, data hash): the same data and settings never train twice;
    changing either (``input_sentence_size`` included) trains a new model.

    Raises:
        ValueError: ``tok_cfg.type`` is not ``unigram`` or ``bpe``, or ``input_sentence_size``
            is below 1.
        CorpusError: the training texts are all empty; the stream's own errors propagate.
        ConfigError: SentencePiece rejects the settings (e.g. ``vocab_size`` too small for the
            corpus's characters); see :func:`train_sentencepiece`.
    """
    settings = _settings(tok_cfg, src_lang, tgt_lang)
    if data_hash is None:
        data_hash = hash_texts((s for s, _ in pairs()), (t for _, t in pairs()))
    key = hashlib.sha256(json.dumps({"v": TOKENIZER_VERSION, "settings": settings,
                                     "data": data_hash}, sort_keys=True).encode()).hexdigest()[:24]
    final = Path(cache_dir) / "tokenizers" / key
    if (final / _STATE_FILE).is_file():
        log.info("tokenizer: cache hit %s", final)
        return Tokenizer.load(final)

    size = settings["input_sentence_size"]
    sample, total = sample_pairs(pairs(), max(1, size // 2) if settings["joint"] else size)
    src_texts, tgt_texts = [s for s, _ in sample], [t for _, t in sample]
    del sample
    if len(src_texts) < total:
        log.info("tokenizer: training on a sample of %d of %d pairs "
                 "(data.tokenizer.input_sentence_size=%d)", len(src_texts), total, size)
    args = (settings["type"], settings["vocab_size"], settings["character_coverage"])
    if settings["joint"]:
        tokenizer = Tokenizer(train_sentencepiece(src_texts + tgt_texts, *args), None, settings)
    else:
        tokenizer = Tokenizer(train_sentencepiece(src_texts, *args),
                              train_sentencepiece(tgt_texts, *args), settings)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=final.parent))
    try:
        tokenizer.save(tmp)
        os.replace(tmp, final)
    except OSError:  # another process finished the same model first
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("tokenizer: trained %s (src %d, tgt %d pieces) -> %s", settings["type"],
             tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, final)
    return tokenizer


def load_tokenizer_model(path: str | Path, tok_cfg: Any, src_lang: str, tgt_lang: str) -> Tokenizer:
    """The tokenizer that ``data.tokenizer.model`` names, instead of training one.

    Args:
        path: a directory written by :meth:`Tokenizer.save` (a run's ``tokenizer/``), or one
            SentencePiece ``.model`` file, used for both sides (joint).
        tok_cfg: ``data.tokenizer`` (its ``joint`` must be true for a single file).
        src_lang, tgt_lang: recorded in the settings of a single-file tokenizer.

    Raises:
        ConfigError: no such file or directory, not a SentencePiece model, or a single model
            with ``data.tokenizer.joint=false`` (each message names ``data.tokenizer.model``).
    """
    path = Path(path)
    key = f"data.tokenizer.model={path}"
    if path.is_dir():
        try:
            return Tokenizer.load(path)
        except (FileNotFoundError, ValueError, KeyError, RuntimeError) as err:
            raise ConfigError(f"{key}: {err} Give a run's tokenizer/ directory or a "
                              "SentencePiece .model file.") from None
    if not path.is_file():
        raise ConfigError(f"{key}: no such file or directory; give a run's tokenizer/ directory "
                          "or a SentencePiece .model file.")
    if not bool(cfg_get(tok_cfg, "joint")):
        raise ConfigError(f"{key} is one SentencePiece model, used for both sides: set "
                          "data.tokenizer.joint=true, or give a tokenizer/ directory with "
                          "src.model and tgt.model.")
    model = path.read_bytes()
    try:
        size = spm.SentencePieceProcessor(model_proto=model).get_piece_size()
    except RuntimeError:
        raise ConfigError(f"{key}: not a SentencePiece model file.") from None
    settings = {"type": "given", "vocab_size": size, "character_coverage": None, "joint": True,
                "src_lang": src_lang, "tgt_lang": tgt_lang, "model": str(path)}
    try:
        return Tokenizer(model, None, settings)
    except ValueError as err:                 # special ids other than nmt's
        raise ConfigError(f"{key}: {err}") from None
