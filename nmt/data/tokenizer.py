"""SentencePiece subword tokenizer: trained on the training split, cached, saved with runs.

Unigram LM (Kudo 2018) or BPE (Sennrich et al. 2016) models, one joint model or one per
side, with the special ids of :mod:`nmt.data.vocab` as SentencePiece's own. The ``nmt_nfkc``
normalisation (NFKC, case kept, white space runs collapsed) and ``character_coverage=1.0``
give ``decode(encode(x)) == x`` for normalised text, umlauts included. Each model trains on
a seeded uniform sample of at most ``data.tokenizer.input_sentence_size`` sentences of the
streamed corpus, so time and memory stay bounded however large the corpus.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import logging
import math
import random
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from nmt.checkpoint import CheckpointError
from nmt.config import ConfigError
from nmt.data.corpus import CorpusError
from nmt.data.languages import BT_TAG, lang_tag
from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from nmt.runtime import atomic_path

TOKENIZER_VERSION = 1
SAMPLE_SEED = 0  # seed of the training-pair sample (part of the model's identity: keep it)
_STATE_FILE = "tokenizer.json"
log = logging.getLogger("nmt.data")


class Tokenizer:
    """The source and target SentencePiece models (one when ``joint``) from their bytes,
    with their training ``settings`` (kept, not read). ``encode_*`` give ids without BOS/EOS.
    ``joint``: one vocabulary for both sides (one model, or two whose pieces are the same, id
    for id, as an imported Marian model's). ValueError: special ids other than
    :mod:`nmt.data.vocab`'s (RuntimeError: not a model)."""

    def __init__(self, src_model: bytes, tgt_model: bytes | None = None,
                 settings: dict[str, Any] | None = None):
        one = tgt_model is None
        self._src_bytes = bytes(src_model)
        self._tgt_bytes = self._src_bytes if one else bytes(tgt_model)
        self._src = spm.SentencePieceProcessor(model_proto=self._src_bytes)
        self._tgt = self._src if one else spm.SentencePieceProcessor(model_proto=self._tgt_bytes)
        for sp in (self._src, self._tgt):
            ids = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
            if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
                raise ValueError(f"SentencePiece model has special ids {ids} (pad, unk, bos, eos); "
                                 f"this package needs {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}.")
        self.src_vocab_size = self._src.get_piece_size()
        self.tgt_vocab_size = self._tgt.get_piece_size()
        self.joint = one or self.src_pieces(range(self.src_vocab_size)) == self.tgt_pieces(
            range(self.tgt_vocab_size))
        self.settings = dict(settings or {})

    def encode_src_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self._src.encode(list(texts), out_type=int, num_threads=2)

    def encode_tgt_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self._tgt.encode(list(texts), out_type=int, num_threads=2)

    def tag_id(self, lang: str) -> int:
        """The id of target-language tag ``<2lang>`` (a user-defined symbol of the joint
        model, :mod:`nmt.data.languages`); ConfigError naming the tags it has otherwise."""
        piece, index = lang_tag(lang), self._src.piece_to_id(lang_tag(lang))
        if index == UNK_ID or self._src.id_to_piece(index) != piece:
            tags = [p for p in map(self._src.id_to_piece, range(self.src_vocab_size))
                    if p.startswith("<2") and p.endswith(">")]
            raise ConfigError(f"the tokenizer has no {piece} tag; it has "
                              f"{', '.join(tags) or 'none (a bilingual model)'}.")
        return index

    @property
    def bt_tag_id(self) -> int | None:
        """The source id of the back-translation tag :data:`~nmt.data.languages.BT_TAG` (a
        user-defined symbol with ``data.tokenizer.bt_tag``), None when the model lacks it."""
        index = self._src.piece_to_id(BT_TAG)
        return None if index == UNK_ID or self._src.id_to_piece(index) != BT_TAG else index

    def decode_tgt(self, ids: Iterable[int]) -> str:
        """Target ids -> detokenised text; PAD and BOS are skipped, the first EOS ends it."""
        ids = [int(i) for i in ids]
        ids = ids[: ids.index(EOS_ID)] if EOS_ID in ids else ids
        return self._tgt.decode([i for i in ids if i not in (PAD_ID, BOS_ID)])

    def src_pieces(self, ids: Iterable[int]) -> list[str]:   # one per id, EOS as </s> (plots)
        return [self._src.id_to_piece(int(i)) for i in ids]

    def tgt_pieces(self, ids: Iterable[int]) -> list[str]:
        return [self._tgt.id_to_piece(int(i)) for i in ids]

    @property
    def fingerprint(self) -> str:   # sha256 of the model bytes
        h = hashlib.sha256(self._src_bytes)
        if self._tgt is not self._src:
            h.update(self._tgt_bytes)
        return h.hexdigest()

    def processors(self) -> tuple[spm.SentencePieceProcessor, spm.SentencePieceProcessor]:
        return self._src, self._tgt     # (source, target); the same one for one model

    def state_dict(self) -> dict[str, Any]:   # what checkpoints store
        one = self._tgt is self._src
        return {"version": TOKENIZER_VERSION, "joint": self.joint, "src_model": self._src_bytes,
                "tgt_model": None if one else self._tgt_bytes, "settings": dict(self.settings)}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Tokenizer:
        if not isinstance(state, dict) or state.get("version") != TOKENIZER_VERSION:
            raise ValueError(f"not a tokenizer state of version {TOKENIZER_VERSION}.")
        return cls(state["src_model"], state["tgt_model"], state.get("settings"))

    @classmethod
    def from_checkpoint(cls, source: str | Path, state: Any) -> Tokenizer:
        """:meth:`from_state_dict` of a checkpoint's ``tokenizer`` entry; CheckpointError
        naming ``source`` when it cannot be rebuilt (damaged, or not written by nmt)."""
        try:
            return cls.from_state_dict(state)
        except (ValueError, RuntimeError, KeyError, TypeError) as err:
            raise CheckpointError(
                f"{source}: the saved tokenizer cannot be rebuilt ({err}).") from None

    def save(self, directory: str | Path) -> None:   # spm.model or src/tgt.model, tokenizer.json
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        files = {"spm.model": self._src_bytes} if self._tgt is self._src else \
            {"src.model": self._src_bytes, "tgt.model": self._tgt_bytes}
        for name, data in files.items():
            (directory / name).write_bytes(data)
        meta = {"version": TOKENIZER_VERSION, "joint": self.joint, "files": sorted(files),
                "settings": self.settings, "special_ids": {"pad": PAD_ID, "unk": UNK_ID,
                                                           "bos": BOS_ID, "eos": EOS_ID}}
        (directory / _STATE_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        """Read a directory :meth:`save` wrote (FileNotFoundError names a missing file)."""
        meta_path = Path(directory) / _STATE_FILE
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path}: no tokenizer saved here.")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        blobs = []
        for name in ["spm.model"] if meta["files"] == ["spm.model"] else ["src.model", "tgt.model"]:
            path = Path(directory) / name
            if not path.is_file():
                raise FileNotFoundError(f"{path}: tokenizer model file is missing.")
            blobs.append(path.read_bytes())
        return cls(blobs[0], None if meta["joint"] else blobs[1], meta.get("settings"))


def sample_pairs(pairs: Iterable[tuple[str, str]], k: int, seed: int = SAMPLE_SEED
                 ) -> tuple[list[tuple[str, str]], int]:
    """``(a uniform sample of k pairs in stream order, the number of pairs)``; a stream of at
    most ``k`` pairs is kept whole. Reservoir sampling, Li's Algorithm L (ACM TOMS 20(4),
    1994): O(k log(n / k)) draws; the whole stream is read, only ``k`` pairs held.
    """
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


def sample_languages(streams: Mapping[str, Callable[[], Iterable[str]]], k: int) -> list[str]:
    """A sample balanced across languages: per language (sorted) a seeded uniform sample
    (:func:`sample_pairs`) of ``k`` of its distinct sentences (a language on the side of
    several directions, e.g. Multi30k's English, counts each sentence once; 8 bytes of memory
    per distinct sentence), concatenated. ``streams``: language -> a function streaming its
    sentences."""
    out: list[str] = []
    for lang in sorted(streams):
        seen: set[bytes] = set()
        keyed = ((t, hashlib.blake2b(t.encode(), digest_size=8).digest()) for t in streams[lang]())
        distinct = (t for t, key in keyed if key not in seen and not seen.add(key))  # add: None
        sample, total = sample_pairs(distinct, k)
        log.info("tokenizer: %d of %d distinct %s sentences", len(sample), total, lang)
        out += sample
    return out


def train_sentencepiece(texts: Sequence[str], model_type: str, vocab_size: int,
                        character_coverage: float, symbols: Sequence[str] = ()) -> bytes:
    """The bytes of a SentencePiece model trained on all of ``texts``, in order (about 1.4 KB
    of memory per sentence), ``symbols`` (language tags) as user-defined pieces that are never
    split. ``vocab_size`` is a soft limit: a small corpus gives a smaller vocabulary (logged).
    ConfigError when SentencePiece rejects the settings, e.g. a ``vocab_size`` below the
    number of characters (names the smallest that works)."""
    if not any(t.strip() for t in texts):
        raise CorpusError("cannot train a tokenizer: the training texts are all empty.")
    out = io.BytesIO()
    extra = {"user_defined_symbols": list(symbols)} if symbols else {}
    try:
        spm.SentencePieceTrainer.train(**extra,
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


def tokenizer_from_pairs(tok_cfg: Any, src_lang: str, tgt_lang: str,
                         pairs: Callable[[], Iterable[tuple[str, str]]], cache_dir: str | Path,
                         data_hash: str, languages: Mapping[str, Callable[[], Iterable[str]]]
                         | None = None, tags: Sequence[str] = ()) -> Tokenizer:
    """The tokenizer of the ``data.tokenizer`` settings ``tok_cfg`` for the training pairs
    that ``pairs()`` streams and ``data_hash`` identifies: from
    ``{cache_dir}/tokenizers/{sha256(settings, data_hash)}/``, else trained and cached.

    Training reads the stream once and keeps a seeded sample (:func:`sample_pairs`) of
    ``input_sentence_size`` pairs, half as many for a joint model (both sides of each), so
    each model trains on at most ``input_sentence_size`` sentences. A multilingual model
    (``languages``: language -> its sentences; a joint ``tok_cfg``) trains instead on
    :func:`sample_languages`, ``input_sentence_size`` sentences in all, with the language
    ``tags`` (Johnson et al. 2017, sec. 3) as user-defined symbols; both join the key. With
    ``tok_cfg.bt_tag`` the source model (the joint one) also reserves
    :data:`~nmt.data.languages.BT_TAG` after them (it joins the key; without it, settings,
    key and model are those of a tokenizer trained before the option existed)."""
    settings = {"type": str(tok_cfg.type), "vocab_size": int(tok_cfg.vocab_size),
                "character_coverage": float(tok_cfg.character_coverage),
                "joint": bool(tok_cfg.joint),
                "input_sentence_size": int(tok_cfg.input_sentence_size),
                "src_lang": src_lang, "tgt_lang": tgt_lang}
    if languages:
        settings.update(languages=sorted(languages), tags=list(tags))
    bt = [BT_TAG] if tok_cfg.get("bt_tag") else []
    if bt:
        settings.update(bt_tag=True)
    key = hashlib.sha256(json.dumps({"v": TOKENIZER_VERSION, "settings": settings,
                                     "data": data_hash}, sort_keys=True).encode()).hexdigest()[:24]
    final = Path(cache_dir) / "tokenizers" / key
    if (final / _STATE_FILE).is_file():
        log.info("tokenizer: cache hit %s", final)
        return Tokenizer.load(final)

    size = settings["input_sentence_size"]
    args = (settings["type"], settings["vocab_size"], settings["character_coverage"])
    if languages:
        texts = sample_languages(languages, max(1, size // len(languages)))
        tokenizer = Tokenizer(train_sentencepiece(texts, *args, symbols=[*tags, *bt]), None,
                              settings)
    else:
        sample, total = sample_pairs(pairs(), max(1, size // 2) if settings["joint"] else size)
        src_texts, tgt_texts = [s for s, _ in sample], [t for _, t in sample]
        del sample
        if len(src_texts) < total:
            log.info("tokenizer: training on a sample of %d of %d pairs "
                     "(data.tokenizer.input_sentence_size=%d)", len(src_texts), total, size)
        tokenizer = Tokenizer(train_sentencepiece(src_texts + tgt_texts, *args, bt), None,
                              settings) if settings["joint"] else Tokenizer(
            train_sentencepiece(src_texts, *args, bt), train_sentencepiece(tgt_texts, *args),
            settings)
    try:
        with atomic_path(final, directory=True) as tmp:
            tokenizer.save(tmp)
    except OSError:
        if not (final / _STATE_FILE).is_file():  # else another process saved the same model first
            raise
    log.info("tokenizer: trained %s (src %d, tgt %d pieces) -> %s", settings["type"],
             tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, final)
    return tokenizer


def load_tokenizer_model(path: str | Path, tok_cfg: Any, src_lang: str, tgt_lang: str) -> Tokenizer:
    """The tokenizer ``data.tokenizer.model`` names: a run's ``tokenizer/`` directory, or one
    SentencePiece ``.model`` file for both sides (ConfigError naming the key otherwise)."""
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
    if not tok_cfg.joint:
        raise ConfigError(f"{key} is one model for both sides: set data.tokenizer.joint=true, "
                          "or give a tokenizer/ directory with src.model and tgt.model.")
    try:
        tokenizer = Tokenizer(path.read_bytes())
    except RuntimeError:
        raise ConfigError(f"{key}: not a SentencePiece model file.") from None
    except ValueError as err:  # special ids other than nmt's
        raise ConfigError(f"{key}: {err}") from None
    tokenizer.settings = {"type": "given", "vocab_size": tokenizer.src_vocab_size,
                          "character_coverage": None, "joint": True, "src_lang": src_lang,
                          "tgt_lang": tgt_lang, "model": str(path)}
    return tokenizer
