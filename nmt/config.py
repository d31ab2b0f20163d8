"""One typed config tree, composed by Hydra from ``configs/`` and validated once.

The YAML files under ``configs/`` (installed as the package ``nmt.configs``) hold the defaults
and their meaning, each key in one place; the dataclasses below hold the types. Each tool's
primary config lists its schema first, so Hydra itself rejects a mistyped value or an unknown
key; :func:`validate` adds the range checks that types cannot express, before any data is
read. Every problem is a one-line :class:`ConfigError` naming the key::

    cfg = compose_config(["model=rnn", "train.max_steps=100"])   # tests, scripts, notebooks
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import importlib.resources
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

CONFIG_MODULE = "nmt.configs"


def _config_path() -> str:
    """``configs/`` beside ``nmt/`` in a source checkout (so code and configs come from one
    tree), else the installed package ``pkg://nmt.configs``."""
    source = Path(__file__).resolve().parents[1] / "configs"
    if (source / "nmt_tool.yaml").is_file() and (source / "__init__.py").is_file():
        return str(source)
    return f"pkg://{CONFIG_MODULE}"


CONFIG_PATH = _config_path()   # config_path of every hydra.main entry point


def config_file(name: str) -> DictConfig:
    """``configs/<name>`` (e.g. ``"sampling.yaml"``) from :data:`CONFIG_PATH`, untyped: the
    command line's defaults, which the Python API reads too."""
    root = (importlib.resources.files(CONFIG_MODULE) if CONFIG_PATH.startswith("pkg://")
            else Path(CONFIG_PATH))
    return OmegaConf.create(root.joinpath(name).read_text(encoding="utf-8"))


class ConfigError(ValueError):
    """A configuration value is missing, mistyped or out of range; the message names the key
    (the CLIs print it and exit with status 2, no traceback)."""


class Choice(str, enum.Enum):
    """A choice field: Hydra rejects any other value (naming the key and the choices); a
    member compares equal to, prints and formats as its value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def _choice_type(name: str, *values: str) -> type[Choice]:
    return Choice(name, {v: v for v in values}, module=__name__)


DataFormat = _choice_type("DataFormat", "text", "tsv", "hf")
TokenizerType = _choice_type("TokenizerType", "unigram", "bpe")
Optimizer = _choice_type("Optimizer", "adam", "adamw")
Schedule = _choice_type("Schedule", "inverse_sqrt", "constant", "plateau")
Precision = _choice_type("Precision", "auto", "fp32", "bf16", "fp16")
Resume = _choice_type("Resume", "auto", "force")
Consistency = _choice_type("Consistency", "none", "rdrop", "simcut", "crossconst")
LangTag = _choice_type("LangTag", "source", "target")
Symmetrize = _choice_type("Symmetrize", "grow-diag-final-and", "grow-diag-final", "grow-diag",
                          "intersection", "union", "forward", "reverse")


@dataclass
class TokenizerSchema:
    type: TokenizerType = MISSING
    vocab_size: int = MISSING
    character_coverage: float = MISSING
    joint: bool = MISSING
    input_sentence_size: int = MISSING
    model: str | None = MISSING
    sampling_alpha: float | None = MISSING
    nbest_size: int = MISSING
    bt_tag: bool = MISSING


@dataclass
class CorpusSchema:   # one of data.corpora
    split: str = MISSING
    root: str | None = None
    weight: float = 1.0
    format: DataFormat | None = None   # null: data.format
    pairs: list[str] | None = None     # the directions it holds; null: every one of data.pairs
    synthetic: bool | None = None      # back-translated; null: nmt-backtranslate's report,
                                       # {split}.backtranslation.json, lies in its root


@dataclass
class DataSchema:
    format: DataFormat = MISSING
    root: str = MISSING
    src_lang: str = MISSING
    tgt_lang: str = MISSING
    train_split: str = MISSING
    valid_split: str = MISSING
    test_split: str = MISSING
    max_train_pairs: int | None = MISSING
    max_len: int = MISSING
    max_len_ratio: float = MISSING
    cache_dir: str = MISSING
    alignments: str | None = MISSING
    teacher_symmetrize: Symmetrize = MISSING
    corpora: list[CorpusSchema] = MISSING
    pairs: list[str] | None = MISSING
    train_pairs: list[str] | None = None   # the directions train_split holds; null: all of pairs
    lang_tag: LangTag = MISSING
    sampling_temperature: float = MISSING
    tokenizer: TokenizerSchema = field(default_factory=TokenizerSchema)


@dataclass
class TrainSchema:
    seed: int = MISSING
    batch_tokens: int = MISSING
    accum_steps: int = MISSING
    max_steps: int | None = MISSING
    max_epochs: int | None = MISSING
    max_minutes: float | None = MISSING
    eval_every_steps: int | None = MISSING
    log_every_steps: int = MISSING
    save_every_steps: int | None = MISSING
    label_smoothing: float = MISSING
    consistency: Consistency = MISSING
    consistency_alpha: float | None = MISSING
    cutoff_p: float = MISSING
    alignment_loss_weight: float = MISSING
    optimizer: Optimizer = MISSING
    lr: float = MISSING
    betas: list[float] = MISSING
    eps: float = MISSING
    weight_decay: float = MISSING
    schedule: Schedule = MISSING
    warmup_steps: int = MISSING
    cooldown: float = MISSING
    plateau_factor: float = MISSING
    plateau_patience: int = MISSING
    min_lr: float = MISSING
    clip_grad_norm: float = MISSING
    precision: Precision = MISSING
    compile: bool = MISSING
    shape_buckets: int = MISSING
    shape_multiple: int = MISSING
    peak_tflops: float | None = MISSING
    prefetch: bool = MISSING
    log_figures: bool = MISSING
    early_stopping_patience: int | None = MISSING
    keep_last: int = MISSING
    keep_best: int = MISSING
    ema_decay: float | None = MISSING
    resume: Resume = MISSING
    init_from: str | None = MISSING


@dataclass
class SearchSchema:
    """Search settings: nmt-train's validation (``search.*``, greedy there), and the top level of
    nmt-evaluate and nmt-translate. Defaults and meaning: configs/search/default.yaml, which
    the Python API (``Translator.translate``, ``nmt.inference.translator.search_settings``)
    reads too."""

    beam_size: int = MISSING
    length_penalty: float = MISSING
    max_len_a: float = MISSING
    max_len_b: int = MISSING
    batch_sentences: int = MISSING
    batch_tokens: int = MISSING
    n_best: int = MISSING


# Primary configs of the tools (configs/<name>.yaml lists its schema first).
@dataclass
class TrainConfig:
    model: Any = MISSING                 # typed by its model's config (nmt.models.validate_model)
    data: DataSchema = field(default_factory=DataSchema)
    train: TrainSchema = field(default_factory=TrainSchema)
    search: SearchSchema = field(default_factory=SearchSchema)
    run_dir: str = MISSING
    device: str = MISSING


@dataclass
class SamplingSchema:
    """Sampling instead of search (nmt-evaluate, nmt-translate), e.g. for back-translation:
    ``nmt-translate checkpoint=... sampling=true top_p=0.9 seed=1 < mono.de > bt.en``.
    Defaults and meaning: configs/sampling.yaml; ranges: :func:`validate_decoding`."""

    sampling: bool = MISSING
    temperature: float = MISSING
    top_k: int = MISSING
    top_p: float = MISSING
    seed: int = MISSING


TOOL_SCHEMAS: dict[str, type] = {"nmt_train": TrainConfig}   # the other tools': nmt/cli/schemas.py


def register_configs() -> None:
    """Put the tool schemas of ``TOOL_SCHEMAS`` into Hydra's ConfigStore (idempotent; done
    when this module, or ``nmt.cli.schemas`` which adds the other tools', is imported)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, schema in TOOL_SCHEMAS.items():
        store.store(name=name, node=schema)


def check_positive(cfg: DictConfig, *keys: str, allow_zero: bool = False, prefix: str = "") -> None:
    """ConfigError unless each of ``keys`` (dotted, in ``cfg``; None skips it) is finite and
    > 0 (>= 0 with ``allow_zero``), naming ``prefix + key`` and its value (nan and inf too)."""
    for key in keys:
        value = OmegaConf.select(cfg, key)
        if value is None or math.isfinite(value) and (value > 0 or allow_zero and value == 0):
            continue
        finite = "" if math.isfinite(value) else "a finite number "
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{prefix}{key}={value} must be {finite}{bound}.")


def _unit_interval(cfg: DictConfig, *keys: str) -> None:
    for key in keys:
        value = OmegaConf.select(cfg, key)
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"{key}={value} must lie in [0, 1).")


def _check_sampling(tok: DictConfig) -> None:
    """Subword regularisation: alpha >= 0 (a BPE-dropout rate < 1), nbest_size -1 or >= 2."""
    alpha, nbest = tok.sampling_alpha, tok.nbest_size
    if alpha is not None and not 0 <= alpha < math.inf:
        raise ConfigError(f"data.tokenizer.sampling_alpha={alpha} must be a finite number >= 0 "
                          "(null or 0 = off).")
    if alpha and tok.type == "bpe" and alpha >= 1.0:
        raise ConfigError(f"data.tokenizer.sampling_alpha={alpha} must lie in [0, 1) with "
                          "data.tokenizer.type=bpe (a merge-dropping probability).")
    if not (nbest == -1 or nbest >= 2):
        raise ConfigError(f"data.tokenizer.nbest_size={nbest} samples nothing: use -1 or >= 2.")


# train.consistency_alpha=null: each method's published weight of its KL term (R-Drop, Liang et
# al. 2021, eq. 3 on translation; SimCut, Gao et al. 2022, IWSLT; CrossConST, Gao et al. 2023,
# its IWSLT17 fine-tuning).
CONSISTENCY_ALPHA = {"rdrop": 5.0, "simcut": 3.0, "crossconst": 0.25}


def has_consistency(train: Any) -> bool:
    """A consistency regulariser is on (``consistency``: R-Drop, SimCut, CrossConST) in a
    ``train`` section (a DictConfig or the trainer's plain namespace). The one test of it."""
    return train.consistency != "none"


def is_guided(train: Any) -> bool:
    """Guided alignment is on (Garg et al. 2019): ``alignment_loss_weight`` > 0 in a
    ``train`` section (a DictConfig or the trainer's plain namespace). The one test of it."""
    return train.alignment_loss_weight > 0


def _check_guided(cfg: DictConfig) -> None:
    """Guided alignment: ``data.alignments`` (or the teacher's links) and
    ``model.alignment_full_context`` only with ``train.alignment_loss_weight`` > 0, on a head
    to supervise, with fixed subwords."""
    guided, links = is_guided(cfg.train), cfg.data.alignments
    if links is not None and not guided:
        raise ConfigError(f"data.alignments={links} supervises guided alignment: set "
                          "train.alignment_loss_weight > 0 (Garg et al. 2019: 0.05), or drop it.")
    if cfg.model.get("alignment_full_context", False) and not guided:
        raise ConfigError("model.alignment_full_context=true is a pass that only guided alignment "
                          "trains (its alignment would be untrained): set "
                          "train.alignment_loss_weight > 0, or drop it.")
    if guided and cfg.model.get("alignment_heads", 1) == 0:
        raise ConfigError("train.alignment_loss_weight > 0 supervises model.alignment_heads heads "
                          "of model.alignment_layer: set model.alignment_heads=1 "
                          "model.alignment_layer=-2 (Garg et al. 2019: one head, penultimate "
                          "layer).")
    if guided and cfg.data.tokenizer.sampling_alpha:
        raise ConfigError("data.tokenizer.sampling_alpha resegments the training split each epoch, "
                          "which guided alignment's subword links cannot follow: drop one of them.")


_PAIR = re.compile(r"^([A-Za-z0-9_]+)-([A-Za-z0-9_]+)$")


def parse_pairs(pairs: Any, key: str = "data.pairs") -> list[tuple[str, str]]:
    """``["de-en", "fr-en"]`` -> ``[("de", "en"), ("fr", "en")]``, in the given order (the
    directions of ``data.pairs``, or of the config key ``key``; :mod:`nmt.data.languages`
    re-exports it). ConfigError naming the key and the entry: not ``src-tgt`` (e.g. ``de_en``),
    a language into itself (``de-de``), a direction listed twice, or none at all."""
    out: list[tuple[str, str]] = []
    for item in pairs:
        match = _PAIR.match(str(item))
        if not match:
            raise ConfigError(f"{key}: {item!r} is not a direction; write src-tgt, e.g. de-en.")
        if match[1] == match[2] or match.groups() in out:
            why = ("translates a language into itself." if match[1] == match[2]
                   else "is listed twice.")
            raise ConfigError(f"{key}: {item!r} {why}")
        out.append(match.groups())
    if not out:
        raise ConfigError(f"{key}=[] lists no direction: give src-tgt entries, or null.")
    return out


def is_multilingual(data: Any) -> bool:
    """Two or more ``data.pairs`` in a ``data`` section (a DictConfig or a checkpoint's plain
    dict; null or absent: the one direction of ``data.src_lang``, ``data.tgt_lang``): the
    examples carry language tags (:mod:`nmt.data.languages` re-exports it)."""
    return len(data.get("pairs") or ()) > 1


def _run_name(pairs: Any, src_lang: str, tgt_lang: str) -> str:
    """``${nmt.run_name:...}`` in configs/config.yaml's ``run_dir``: ``de_en``, or with several
    ``data.pairs`` the directions joined, ``de-en+fr-en``."""
    return "+".join(map(str, pairs)) if pairs and len(pairs) > 1 else f"{src_lang}_{tgt_lang}"


OmegaConf.register_new_resolver("nmt.run_name", _run_name, replace=True)


def _check_pairs(data: DictConfig, guided: bool) -> None:
    """``data.pairs``: valid directions that include the default one (``data.src_lang`` ->
    ``data.tgt_lang``); with two or more (language tags), a joint tokenizer, and neither
    guided alignment nor subword sampling (not supported yet). ``data.train_pairs`` and each
    ``data.corpora[k].pairs``: directions of the model (of ``data.pairs``, else the default)."""
    model = [(str(data.src_lang), str(data.tgt_lang))]
    if data.pairs is not None:
        model = parse_pairs(data.pairs)
    for key, held in (("data.train_pairs", data.train_pairs),
                      *((f"data.corpora[{k}].pairs", c.pairs) for k, c in enumerate(data.corpora))):
        for pair in [] if held is None else parse_pairs(held, key):
            if pair not in model:
                raise ConfigError(f"{key}: {'-'.join(pair)} is not a direction of the model "
                                  f"({', '.join(map('-'.join, model))}); add it to data.pairs.")
    if data.pairs is None:
        return
    if (data.src_lang, data.tgt_lang) not in model:
        raise ConfigError(f"data.src_lang-data.tgt_lang={data.src_lang}-{data.tgt_lang} (the "
                          f"default direction) must be one of data.pairs={list(data.pairs)}.")
    multilingual = is_multilingual(data)
    if multilingual and not data.tokenizer.joint:
        raise ConfigError("data.pairs with several directions needs data.tokenizer.joint=true (the "
                          "language tags are pieces of one joint model).")
    for key, on in (("guided alignment (train.alignment_loss_weight, data.alignments)", guided),
                    ("data.tokenizer.sampling_alpha", data.tokenizer.sampling_alpha)):
        if multilingual and on:
            raise ConfigError(f"{key} does not support several data.pairs yet: drop one of them.")


# The least value of each search key; every value must also be finite. validate_search checks
# them, and nmt-serve's request schema takes its bounds from here (nmt/extras/tools/serve.py).
SEARCH_MINIMUM = {"beam_size": 1, "n_best": 1, "length_penalty": 0.0, "max_len_a": 0.0,
                  "max_len_b": 0, "batch_sentences": 1, "batch_tokens": 0}


def validate_search(section: Any, prefix: str = "") -> DictConfig:
    """Type and range checks of the search keys (:class:`SearchSchema`): each finite and at
    least its :data:`SEARCH_MINIMUM` (``length_penalty`` >= 0, not NaN), ``n_best`` <=
    ``beam_size``. ``prefix`` is how they are spelled on the command line (``search.`` in
    nmt-train, none in evaluate/translate)."""
    search = merge_typed(SearchSchema, section, prefix.rstrip(".") or "search")
    for key, least in SEARCH_MINIMUM.items():
        if not least <= search[key] < math.inf:
            finite = "" if math.isfinite(search[key]) else "a finite number "
            raise ConfigError(f"{prefix}{key}={search[key]} must be {finite}>= {least:g}.")
    if search.n_best > search.beam_size:
        raise ConfigError(f"{prefix}n_best={search.n_best} must be <= "
                          f"{prefix}beam_size={search.beam_size}.")
    return search


def _fields(schema: type) -> list[str]:
    return [f.name for f in dataclasses.fields(schema)]


def validate_decoding(settings: Mapping) -> dict:
    """The keys of :class:`SearchSchema` and :class:`SamplingSchema` (the top level of
    nmt-evaluate and nmt-translate; ``Translator.translate``'s arguments), checked where they
    enter, before any checkpoint loads, and returned as plain values. A ConfigError names the
    key of a wrong type, or of a value out of range: those of :func:`validate_search`,
    ``temperature`` finite and >= 0, ``top_k`` >= 0, ``top_p`` in (0, 1]."""
    search = validate_search({k: settings[k] for k in _fields(SearchSchema)})
    sampling = merge_typed(SamplingSchema, {k: settings[k] for k in _fields(SamplingSchema)}, "")
    for key, ok, allowed in (("temperature", 0 <= sampling.temperature < math.inf, "finite, >= 0"),
                             ("top_k", sampling.top_k >= 0, ">= 0"),
                             ("top_p", 0 < sampling.top_p <= 1, "in (0, 1]")):
        if not ok:
            raise ConfigError(f"{key}={sampling[key]} must be {allowed}.")
    return {**to_plain(search), **to_plain(sampling)}


def config_diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys where two plain nested dicts differ, as ``"key: checkpoint has A, now B"``
    (the one config comparison: resume, fine-tuning, averaging)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            out += config_diff(a.get(key, "<absent>"), b.get(key, "<absent>"), f"{prefix}.{key}")
        return out
    return [] if a == b else [f"{prefix.lstrip('.')}: checkpoint has {a!r}, now {b!r}"]


def config_at(tree: Any, key: str) -> Any:
    """The value at dotted ``key`` of a plain nested dict, or ``"<absent>"``."""
    for part in key.split("."):
        tree = tree.get(part, "<absent>") if isinstance(tree, dict) else "<absent>"
    return tree


def to_plain(cfg: DictConfig) -> dict:
    """A resolved config as plain containers, choices as strings: what checkpoints and exports
    store (they load with ``weights_only=True``, which refuses Enum objects)."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def validate(cfg: DictConfig) -> DictConfig:
    """Type and range checks of a composed ``nmt-train`` config; returns it typed, read-only."""
    out = OmegaConf.create(
        {
            "model": cfg.model,    # nmt.models.validate_model checks it (the trainer, first)
            "data": merge_typed(DataSchema, cfg.data, "data"),
            "train": merge_typed(TrainSchema, cfg.train, "train"),
            "search": validate_search(cfg.search, "search."),
            "run_dir": str(cfg.run_dir),
            "device": str(cfg.device),
        }
    )
    data, train = out.data, out.train
    for c in data.corpora:   # the evaluator labels what only they hold "zero-resource"
        if c.synthetic is None:
            c.synthetic = (Path(str(c.root or data.root)) / f"{c.split}.backtranslation.json"
                           ).is_file()
    if train.consistency_alpha is None and has_consistency(train):
        train.consistency_alpha = CONSISTENCY_ALPHA[str(train.consistency)]
    check_positive(out, "data.tokenizer.vocab_size", "data.tokenizer.input_sentence_size",
                   "data.max_len", "data.max_len_ratio", "data.max_train_pairs",
                   *(f"data.corpora[{k}].weight" for k in range(len(data.corpora))))
    if not 0.98 <= data.tokenizer.character_coverage <= 1.0:   # nan fails it too
        raise ConfigError(f"data.tokenizer.character_coverage={data.tokenizer.character_coverage} "
                          "must be a finite number in [0.98, 1] (SentencePiece's range).")
    if data.src_lang == data.tgt_lang:
        raise ConfigError(f"data.src_lang={data.src_lang!r} must differ from data.tgt_lang.")
    check_positive(out, "train.batch_tokens", "train.accum_steps", "train.max_steps",
                   "train.max_epochs", "train.max_minutes", "train.eval_every_steps",
                   "train.log_every_steps", "train.lr", "train.save_every_steps",
                   "train.plateau_patience", "train.early_stopping_patience", "train.eps",
                   "train.peak_tflops", "train.shape_multiple")
    check_positive(out, "train.warmup_steps", "train.clip_grad_norm", "train.weight_decay",
                   "train.keep_last", "train.keep_best", "train.min_lr", "train.consistency_alpha",
                   "train.shape_buckets", "train.alignment_loss_weight",
                   allow_zero=True)
    _unit_interval(out, "train.label_smoothing", "train.cooldown", "train.cutoff_p")
    if train.cooldown > 0 and train.max_steps is None and train.max_minutes is None:
        raise ConfigError(f"train.cooldown={train.cooldown} needs a budget: set train.max_steps "
                          "or train.max_minutes.")
    if len(train.betas) != 2 or not all(0.0 <= b < 1.0 for b in train.betas):
        raise ConfigError(f"train.betas={list(train.betas)} must be two numbers in [0, 1).")
    for key in ("plateau_factor", "ema_decay"):
        if train[key] is not None and not 0.0 < train[key] < 1.0:
            raise ConfigError(f"train.{key}={train[key]} must lie in (0, 1).")
    _check_sampling(data.tokenizer)
    _check_guided(out)
    check_positive(out, "data.sampling_temperature")
    _check_pairs(data, is_guided(train))   # data.alignments without it: refused above
    if data.alignments is not None and data.corpora and data.max_train_pairs is not None:
        raise ConfigError("data.alignments with data.corpora and data.max_train_pairs: the file "
                          "has a line per pair of every corpus, and past the capped split its "
                          "lines would go to the wrong pairs; drop data.max_train_pairs, or "
                          "data.alignments (the teacher aligns exactly the pairs trained on).")
    if train.consistency == "crossconst" and not data.tokenizer.joint:
        raise ConfigError("train.consistency=crossconst feeds each target sentence to the encoder: "
                          "it needs one vocabulary for both sides, data.tokenizer.joint=true.")
    if train.init_from and data.tokenizer.model:
        raise ConfigError("data.tokenizer.model must be null with train.init_from (a fine-tuning "
                          "run uses its checkpoint's tokenizer).")
    if out.model.tie_embeddings and not data.tokenizer.joint:
        raise ConfigError("data.tokenizer.joint=false, but model.tie_embeddings=true needs one "
                          "vocabulary for both sides.")
    if not (out.device in ("auto", "cpu", "cuda") or out.device.startswith("cuda:")):
        raise ConfigError(f"device={out.device!r} must be auto, cpu, cuda or cuda:N.")
    OmegaConf.set_readonly(out, True)
    return out


def merge_typed(schema: type, section: Any, where: str) -> DictConfig:
    """Merge ``section`` into ``schema``; type errors become :class:`ConfigError`."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), section)
        OmegaConf.to_container(merged, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        key = key if key.startswith(where) else f"{where}.{key}"
        msg = getattr(err, "msg", str(err)).splitlines()[0]
        raise ConfigError(f"Invalid config value for {key}: {msg}. Fix the override or the YAML "
                          "file.") from None
    return merged


def _hydra_error_message(err: BaseException) -> str:
    """Hydra/OmegaConf error text as one line, without the config search path dump."""
    text = str(err)
    cause = err.__cause__
    if isinstance(cause, OmegaConfBaseException) and str(cause).split("\n")[0] not in text:
        text += ". " + str(cause).split("\n")[0]
    return " ".join(text.split("Config search path")[0].split())


def compose_config(overrides: list[str] | tuple[str, ...] = (), config_name: str = "config",
                   validate_fn: Callable[[DictConfig], DictConfig] | None = validate) -> DictConfig:
    """Compose ``configs/<config_name>.yaml`` with Hydra overrides, resolve and validate it
    (``validate_fn=None``: unchecked). For tests, scripts and notebooks: it composes in a private
    Hydra context (popping Hydra's singletons, a private API) and restores the caller's."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobRuntime
    from hydra.errors import HydraException

    register_configs()
    saved = {cls: Singleton._instances.pop(cls) for cls in (GlobalHydra, JobRuntime)
             if cls in Singleton._instances}
    try:
        init = (initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3")
                if CONFIG_PATH.startswith("pkg://") else
                initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"))
        with init:
            cfg = compose(config_name=config_name, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        raise ConfigError(f"Could not build the config from overrides {list(overrides)}: "
                          f"{_hydra_error_message(err)}") from None
    finally:
        for cls in (GlobalHydra, JobRuntime):
            Singleton._instances.pop(cls, None)
        Singleton._instances.update(saved)
    return finish_config(cfg, validate_fn)


def _unknown_keys(node: Any, prefix: str = "") -> list[str]:
    """Dotted keys under ``node`` that its schema does not have (Hydra's ``+key=value`` can
    append one to a typed node; no tool would read it, so it is an error)."""
    if not isinstance(node, DictConfig):
        return []
    schema = OmegaConf.get_type(node)
    allowed = ({f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema)
               else None)
    out = []
    for key in node.keys():
        path = f"{prefix}{key}"
        if allowed is not None and key not in allowed:
            out.append(path)
        elif not OmegaConf.is_missing(node, key):
            out += _unknown_keys(node._get_node(key), f"{path}.")
    return out


def finish_config(cfg: DictConfig, validate_fn: Callable[[DictConfig], DictConfig] | None = validate
                  ) -> DictConfig:
    """Resolve interpolations (saved configs are self-contained), refuse unknown keys and
    validate what Hydra composed (:func:`compose_config` and the tools' task functions)."""
    cfg = copy.deepcopy(cfg)
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as err:
        raise ConfigError(f"Could not resolve the config: {_hydra_error_message(err)}") from None
    unknown = _unknown_keys(cfg)
    if unknown:
        raise ConfigError(f"{unknown[0]} is not a setting of this tool (see --help).")
    return validate_fn(cfg) if validate_fn is not None else cfg


register_configs()
