"""One typed config tree, composed by Hydra from ``configs/`` and validated once.

The YAML files under ``configs/`` (installed as the package ``nmt.configs``, found through
the search path :data:`CONFIG_PATH`) hold every default, each in exactly one place. The
dataclasses below hold only the *types* (all fields ``MISSING``). They are registered in
Hydra's ConfigStore (``nmt_train``, ``nmt_evaluate``, ...) and each primary config lists its
schema first in its defaults list, so Hydra itself rejects a non-numeric
``train.max_steps=abc`` or an unknown key (also one added with ``+key=...``, which appends a
key that the schema does not have). :func:`validate` adds the range checks that types cannot
express. Every problem becomes a :class:`ConfigError` whose message says which key to change.

Usage (tests, scripts, notebooks; the ``nmt-*`` tools are ``hydra.main`` applications)::

    cfg = compose_config(["model=rnn", "train.max_steps=100"])   # validated DictConfig

Checkpoints store the resolved config as plain containers with :data:`CONFIG_VERSION`;
:func:`upgrade_config` brings an old one up to date (migrations, then the current
defaults for every key it lacks), so adding a key never makes old checkpoints unloadable.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

CONFIG_MODULE = "nmt.configs"


def _config_path() -> str:
    """Where the tools' Hydra config tree is: ``pkg://nmt.configs`` in an installed package;
    in a source checkout (``configs/`` beside ``nmt/``, editable installs included) that
    directory, so code and configs always come from the same tree, whichever checkout an
    editable install points at."""
    source = Path(__file__).resolve().parents[1] / "configs"
    if (source / "nmt_tool.yaml").is_file() and (source / "__init__.py").is_file():
        return str(source)
    return f"pkg://{CONFIG_MODULE}"


CONFIG_PATH = _config_path()   # config_path of every hydra.main entry point


class ConfigError(ValueError):
    """A configuration value is missing, mistyped or out of range.

    The message is one paragraph meant for the user: it names the key and says what to
    change. CLIs print it and exit with status 2 instead of showing a traceback.
    """


# --------------------------------------------------------------------------- schemas
@dataclass
class TransformerSchema:
    name: str = MISSING
    d_model: int = MISSING
    heads: int = MISSING
    ff_dim: int = MISSING
    encoder_layers: int = MISSING
    decoder_layers: int = MISSING
    norm: str = MISSING
    dropout: float = MISSING
    attention_dropout: float = MISSING
    activation_dropout: float = MISSING
    activation: str = MISSING
    tie_embeddings: bool = MISSING
    alignment_layer: int = MISSING


@dataclass
class RNNSchema:
    name: str = MISSING
    emb_dim: int = MISSING
    encoder_hidden: int = MISSING
    encoder_layers: int = MISSING
    decoder_hidden: int = MISSING
    attention_dim: int = MISSING
    output_dim: int = MISSING
    maxout: bool = MISSING
    dropout: float = MISSING
    tie_embeddings: bool = MISSING


MODEL_SCHEMAS: dict[str, type] = {"transformer": TransformerSchema, "rnn": RNNSchema}


@dataclass
class TokenizerSchema:
    type: str = MISSING
    vocab_size: int = MISSING
    character_coverage: float = MISSING
    joint: bool = MISSING
    input_sentence_size: int = MISSING
    model: str | None = MISSING
    sampling_alpha: float | None = MISSING
    nbest_size: int = MISSING


@dataclass
class DataSchema:
    name: str = MISSING
    format: str = MISSING
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
    tokenizer: TokenizerSchema = field(default_factory=TokenizerSchema)


@dataclass
class TrainSchema:
    seed: int = MISSING
    batch_tokens: int = MISSING
    accum_steps: int = MISSING
    max_steps: int | None = MISSING
    max_epochs: int | None = MISSING
    max_minutes: float | None = MISSING
    eval_every_steps: int = MISSING
    log_every_steps: int = MISSING
    label_smoothing: float = MISSING
    optimizer: str = MISSING
    lr: float = MISSING
    betas: list[float] = MISSING
    eps: float = MISSING
    weight_decay: float = MISSING
    schedule: str = MISSING
    warmup_steps: int = MISSING
    cooldown: float = MISSING
    plateau_factor: float = MISSING
    plateau_patience: int = MISSING
    min_lr: float = MISSING
    clip_grad_norm: float = MISSING
    precision: str = MISSING
    compile: bool = MISSING
    prefetch: bool = MISSING
    early_stopping_patience: int | None = MISSING
    keep_last: int = MISSING
    keep_best: int = MISSING
    ema_decay: float | None = MISSING
    resume: str = MISSING
    init_from: str | None = MISSING


@dataclass
class SearchSchema:
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
    model: Any = MISSING                 # TransformerSchema or RNNSchema: see validate_model
    data: DataSchema = field(default_factory=DataSchema)
    train: TrainSchema = field(default_factory=TrainSchema)
    search: SearchSchema = field(default_factory=SearchSchema)
    run_dir: str = MISSING
    device: str = MISSING


@dataclass
class DataRootOverride:
    root: str | None = MISSING


@dataclass
class SamplingSchema:
    sampling: bool = MISSING
    temperature: float = MISSING
    top_k: int = MISSING
    top_p: float = MISSING
    seed: int = MISSING


@dataclass
class EngineSchema:
    engine: str = MISSING                # pytorch | ctranslate2
    model_dir: str | None = MISSING      # the nmt-export directory (engine=ctranslate2)
    weights: str = MISSING               # inference | trained (engine=pytorch)


@dataclass
class EvaluateConfig(EngineSchema, SamplingSchema, SearchSchema):
    checkpoint: Any = MISSING            # a file, or a list of files (an ensemble)
    split: str | None = MISSING
    data: DataRootOverride = field(default_factory=DataRootOverride)
    src_file: str | None = MISSING
    ref_file: str | None = MISSING
    out_dir: str | None = MISSING
    save_alignments: bool = MISSING
    attention: str = MISSING
    device: str = MISSING


@dataclass
class TranslateConfig(EngineSchema, SamplingSchema, SearchSchema):
    checkpoint: Any = MISSING            # a file, or a list of files (an ensemble)
    input: str | None = MISSING
    output: str | None = MISSING
    device: str = MISSING


@dataclass
class PlotConfig:
    alignments: str = MISSING
    index: Any = MISSING                 # int, "all" or "start:stop"
    out: str = MISSING
    format: str = MISSING
    kind: str | None = MISSING
    layer: Any = MISSING                 # None, int, "all" or "mean"
    head: Any = MISSING                  # None, int, "all" or "mean"
    gold: str | None = MISSING
    gold_one_based: bool | None = MISSING
    cmap: str = MISSING
    dpi: int = MISSING


@dataclass
class AverageConfig:
    run_dir: str | None = MISSING
    last: int = MISSING
    best: int | None = MISSING
    checkpoints: list[str] | None = MISSING
    out: str | None = MISSING


@dataclass
class AlignConfig:
    checkpoint: str = MISSING
    src_file: str | None = MISSING
    tgt_file: str | None = MISSING
    input: str | None = MISSING
    out: str = MISSING
    one_based: bool = MISSING
    method: str = MISSING
    threshold: float | None = MISSING
    shift: bool = MISSING
    layer: Any = MISSING                 # int (negative counts from the end) or "mean"
    head: Any = MISSING                  # int or "mean"
    reverse_checkpoint: str | None = MISSING
    symmetrize: str = MISSING
    gold: str | None = MISSING
    gold_one_based: bool | None = MISSING
    attention_out: str | None = MISSING
    batch_sentences: int = MISSING
    device: str = MISSING


@dataclass
class ExportConfig:
    checkpoint: str = MISSING
    format: str = MISSING
    out_dir: str = MISSING
    quantization: str = MISSING
    max_positions: int = MISSING


TOOL_SCHEMAS: dict[str, type] = {"nmt_train": TrainConfig, "nmt_evaluate": EvaluateConfig,
                                 "nmt_translate": TranslateConfig, "nmt_plot": PlotConfig,
                                 "nmt_average": AverageConfig, "nmt_align": AlignConfig,
                                 "nmt_export": ExportConfig}


# Keys that never name a sweep job's directory (paths, and where it runs).
DIRNAME_EXCLUDED_KEYS = ("run_dir", "device", "data.root", "data.cache_dir",
                         "data.tokenizer.model", "train.init_from")


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _command_line_keys(argv: list[str]) -> tuple[set[str], set[str]]:
    """(keys swept on a sweep's command line, keys given there with one value only)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, swept, fixed = OverridesParser.create(), set(), set()
    for arg in argv:
        if arg.startswith("-"):
            continue
        try:
            sweep = parser.parse_override(arg).is_sweep_override()
        except Exception:  # not an override: Hydra reports it elsewhere
            continue
        (swept if sweep else fixed).add(_override_key(arg))
    return swept, fixed - swept


def job_dirname(task_overrides: Any, limit: int = 120) -> str:
    """A sweep job's directory name (``hydra.sweep.subdir``) from its overrides.

    Keeps the overrides that vary between the jobs: the job's own (``hydra.overrides.task``,
    the last one of each key) less the keys given with one value only on the sweep's command
    line and :data:`DIRNAME_EXCLUDED_KEYS`; sorted and joined as Hydra's
    ``override_dirname`` (``train.lr=0.001,train.warmup_steps=300``). Keys a sweeper adds
    itself (Optuna's search space) are kept. A ``/`` becomes ``_``; a name longer than
    ``limit`` characters is cut and given an 8-character hash of the whole, so two jobs never
    share a directory and names stay under the 255-byte limit; no override gives ``default``.
    """
    import sys

    swept, fixed = _command_line_keys(sys.argv[1:])
    own: dict[str, str] = {}
    for override in map(str, task_overrides):
        key = _override_key(override)
        if key not in DIRNAME_EXCLUDED_KEYS and key not in fixed:
            own[key] = override
    name = ",".join(sorted(own.values())).replace("/", "_") or "default"
    if len(name) > limit:
        name = f"{name[:limit]}..{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return name


def register_configs() -> None:
    """Put the tool schemas into Hydra's ConfigStore and the ``nmt.dirname`` resolver into
    OmegaConf (idempotent; done when this module is imported)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, schema in TOOL_SCHEMAS.items():
        store.store(name=name, node=schema)
    if not OmegaConf.has_resolver("nmt.dirname"):
        OmegaConf.register_new_resolver("nmt.dirname", job_dirname)


# ------------------------------------------------------------------------- checks
def _choice(cfg: DictConfig, key: str, choices: tuple[str, ...]) -> None:
    value = OmegaConf.select(cfg, key)
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not one of {', '.join(choices)}: set {key}=<one of them>.")


def _positive(cfg: DictConfig, *keys: str, allow_zero: bool = False) -> None:
    for key in keys:
        value = OmegaConf.select(cfg, key)
        if value is None:
            continue
        if value < 0 or (value == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise ConfigError(f"{key}={value} is impossible: it must be {bound}.")


def _unit_interval(cfg: DictConfig, *keys: str) -> None:
    for key in keys:
        value = OmegaConf.select(cfg, key)
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"{key}={value} must lie in [0, 1).")


def _check_sampling(tok: DictConfig) -> None:
    """Range checks of subword regularisation (``data.tokenizer.sampling_alpha``, ``nbest_size``).

    Raises:
        ConfigError: a negative alpha, a BPE dropout rate of 1 or more, or an ``nbest_size``
            that samples nothing (0 or 1) or is below -1.
    """
    alpha, nbest = tok.sampling_alpha, tok.nbest_size
    if alpha is not None and alpha < 0:
        raise ConfigError(f"data.tokenizer.sampling_alpha={alpha} is impossible: it must be >= 0 "
                          "(null or 0 = no subword sampling).")
    if alpha and tok.type == "bpe" and alpha >= 1.0:
        raise ConfigError(f"data.tokenizer.sampling_alpha={alpha} must lie in [0, 1) with "
                          "data.tokenizer.type=bpe: it is the probability of dropping a merge "
                          "(BPE-dropout, Provilkov et al. 2020; they use 0.1).")
    if not (nbest == -1 or nbest >= 2):
        raise ConfigError(f"data.tokenizer.nbest_size={nbest} samples nothing: use -1 (sample from "
                          "all segmentations) or a number >= 2 (sample from the n best).")


def validate_model(model: DictConfig) -> DictConfig:
    """Type-check and range-check a ``model`` section; returns the typed section.

    Raises:
        ConfigError: unknown ``model.name``, mistyped value, or sizes that cannot work
            (``d_model`` not divisible by ``heads``, zero layers, ...), before any tensor
            is built.
    """
    name = model.get("name")
    if name not in MODEL_SCHEMAS:
        raise ConfigError(
            f"model.name={name!r} is unknown: choose model=transformer or model=rnn "
            f"(configs/model/{{transformer,rnn}}.yaml)."
        )
    model = _merge_typed(MODEL_SCHEMAS[name], model, "model")
    cfg = OmegaConf.create({"model": model})
    if name == "transformer":
        _positive(cfg, "model.d_model", "model.heads", "model.ff_dim", "model.encoder_layers",
                  "model.decoder_layers")
        if model.d_model % model.heads:
            raise ConfigError(
                f"model.d_model={model.d_model} is not divisible by model.heads={model.heads}: "
                "each head has d_model / heads dimensions (Vaswani et al. 2017, section 3.2.2); "
                "pick sizes such as d_model=256 heads=4."
            )
        _choice(cfg, "model.norm", ("pre", "post"))
        _choice(cfg, "model.activation", ("relu", "gelu"))
        _unit_interval(cfg, "model.dropout", "model.attention_dropout", "model.activation_dropout")
        if not -model.decoder_layers <= model.alignment_layer < model.decoder_layers:
            raise ConfigError(
                f"model.alignment_layer={model.alignment_layer} does not name one of the "
                f"{model.decoder_layers} decoder layers: use 0..{model.decoder_layers - 1} or -1 (last)."
            )
    else:
        _positive(cfg, "model.emb_dim", "model.encoder_hidden", "model.encoder_layers",
                  "model.decoder_hidden", "model.attention_dim", "model.output_dim")
        if model.maxout and model.output_dim % 2:
            raise ConfigError(f"model.output_dim={model.output_dim} must be even with model.maxout=true (pool size 2).")
        _unit_interval(cfg, "model.dropout")
    return model


def validate_search(section: Any, prefix: str = "") -> DictConfig:
    """Type-check and range-check the search keys (``configs/search/default.yaml``).

    Args:
        section: a mapping with exactly the keys of :class:`SearchSchema`.
        prefix: how the keys are spelled on the command line (``"search."`` for nmt-train,
            ``""`` for nmt-evaluate / nmt-translate, where they sit at the top level).

    Raises:
        ConfigError: non-numeric value, beam_size/batch_sentences/n_best < 1, negative
            max_len_a/max_len_b, or n_best > beam_size.
    """
    search = _merge_typed(SearchSchema, section, prefix.rstrip(".") or "search")
    wrapped = OmegaConf.create({"s": search})

    def spelled(err: ConfigError) -> ConfigError:
        return ConfigError(str(err).replace("s.", prefix, 1))

    try:
        _positive(wrapped, "s.beam_size", "s.batch_sentences", "s.n_best")
        _positive(wrapped, "s.max_len_a", "s.max_len_b", "s.batch_tokens", allow_zero=True)
    except ConfigError as err:
        raise spelled(err) from None
    if search.n_best > search.beam_size:
        raise ConfigError(f"{prefix}n_best={search.n_best} exceeds {prefix}beam_size={search.beam_size}: "
                          "a beam search returns at most beam_size hypotheses.")
    return search


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


def cfg_get(cfg: Any, key: str) -> Any:
    """``cfg[key]`` for a mapping (dict, DictConfig), else ``getattr(cfg, key)``."""
    from collections.abc import Mapping

    return cfg[key] if isinstance(cfg, Mapping | DictConfig) else getattr(cfg, key)


def validate(cfg: DictConfig) -> DictConfig:
    """Validate a composed ``nmt-train`` config; returns it typed and read-only.

    Raises:
        ConfigError: with a one-paragraph message naming the key and the fix.
    """
    out = OmegaConf.create(
        {
            "model": validate_model(cfg.model),
            "data": _merge_typed(DataSchema, cfg.data, "data"),
            "train": _merge_typed(TrainSchema, cfg.train, "train"),
            "search": validate_search(cfg.search, "search."),
            "run_dir": str(cfg.run_dir),
            "device": str(cfg.device),
        }
    )
    _choice(out, "data.format", ("text", "tsv", "hf"))
    _choice(out, "data.tokenizer.type", ("unigram", "bpe"))
    _positive(out, "data.tokenizer.vocab_size", "data.tokenizer.input_sentence_size",
              "data.max_len", "data.max_len_ratio", "data.max_train_pairs")
    if out.data.src_lang == out.data.tgt_lang:
        raise ConfigError(f"data.src_lang and data.tgt_lang are both {out.data.src_lang!r}: set two different languages.")
    _choice(out, "train.optimizer", ("adam", "adamw"))
    _choice(out, "train.schedule", ("inverse_sqrt", "constant", "plateau"))
    _choice(out, "train.precision", ("auto", "fp32", "bf16", "fp16"))
    _positive(out, "train.batch_tokens", "train.accum_steps", "train.max_steps", "train.max_epochs",
              "train.max_minutes", "train.eval_every_steps", "train.log_every_steps", "train.lr",
              "train.plateau_patience", "train.early_stopping_patience")
    _positive(out, "train.warmup_steps", "train.clip_grad_norm", "train.weight_decay",
              "train.keep_last", "train.keep_best", "train.min_lr", allow_zero=True)
    _unit_interval(out, "train.label_smoothing", "train.cooldown")
    if out.train.cooldown > 0 and out.train.max_steps is None and out.train.max_minutes is None:
        raise ConfigError(f"train.cooldown={out.train.cooldown} decays the lr over the end of the "
                          "budget, but the run has none: set train.max_steps or train.max_minutes.")
    _choice(out, "train.resume", ("auto", "force"))
    if len(out.train.betas) != 2 or not all(0.0 <= b < 1.0 for b in out.train.betas):
        raise ConfigError(f"train.betas={list(out.train.betas)} must hold two numbers in [0, 1), "
                          "e.g. train.betas=[0.9,0.98] (Adam's beta1, beta2).")
    _positive(out, "train.eps")
    if not 0.0 < out.train.plateau_factor < 1.0:
        raise ConfigError(f"train.plateau_factor={out.train.plateau_factor} must lie in (0, 1): "
                          "the learning rate is multiplied by it on a plateau.")
    ema = out.train.ema_decay
    if ema is not None and not 0.0 < ema < 1.0:
        raise ConfigError(f"train.ema_decay={ema} must lie in (0, 1): each step the average keeps "
                          "this share of itself and takes the rest from the new weights, so it "
                          "spans about 1 / (1 - decay) steps (0.999: the last ~1,000). Use e.g. "
                          "train.ema_decay=0.999, or null to train without an average.")
    _check_sampling(out.data.tokenizer)
    if out.train.init_from and out.data.tokenizer.model:
        raise ConfigError("train.init_from and data.tokenizer.model both name a tokenizer: a "
                          "fine-tuning run uses its checkpoint's tokenizer, so drop data.tokenizer.model.")
    if out.model.tie_embeddings and not out.data.tokenizer.joint:
        raise ConfigError(
            "model.tie_embeddings=true needs one vocabulary for both sides, but "
            "data.tokenizer.joint=false: set data.tokenizer.joint=true or model.tie_embeddings=false."
        )
    if not (out.device in ("auto", "cpu", "cuda") or out.device.startswith("cuda:")):
        raise ConfigError(f"device={out.device!r} must be auto, cpu, cuda or cuda:N.")
    OmegaConf.set_readonly(out, True)
    return out


def _merge_typed(schema: type, section: Any, where: str) -> DictConfig:
    """Merge ``section`` into ``schema``; type errors become :class:`ConfigError`."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), section)
        OmegaConf.to_container(merged, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        key = key if key.startswith(where) else f"{where}.{key}"
        msg = getattr(err, "msg", str(err)).splitlines()[0]
        raise ConfigError(f"Invalid config value for {key}: {msg}. Fix the override or the YAML file.") from None
    return merged


# ------------------------------------------------------------------------ compose
def _hydra_error_message(err: BaseException) -> str:
    """Hydra/OmegaConf error text as one line, without the config search path dump."""
    text = str(err)
    cause = err.__cause__
    if isinstance(cause, OmegaConfBaseException) and str(cause).split("\n")[0] not in text:
        text += ". " + str(cause).split("\n")[0]
    return " ".join(text.split("Config search path")[0].split())


def compose_config(overrides: list[str] | tuple[str, ...] = (), config_name: str = "config",
                   validate_fn: Callable[[DictConfig], DictConfig] | None = validate) -> DictConfig:
    """Compose ``configs/<config_name>.yaml`` with Hydra overrides and validate it.

    For tests, scripts and notebooks; the tools themselves are ``hydra.main`` applications.
    A caller's own Hydra context (a ``hydra.initialize`` block, or a running ``hydra.main``
    job) is left as it was: this function composes in a private one and restores the
    caller's afterwards.

    Args:
        overrides: Hydra override strings, e.g. ``["model=rnn", "train.max_steps=10"]``.
        config_name: primary config (``config``, ``evaluate``, ``translate``, ``plot``,
            ``average``, ``align``, ``export``).
        validate_fn: checker applied to the composed config (``None``: return unchecked).

    Returns:
        The composed config with interpolations resolved (``validate_fn``'s result).

    Raises:
        ConfigError: unknown group option, unknown key, bad override syntax or invalid value.
    """
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
    """Dotted keys under ``node`` that its schema (dataclass) does not have.

    Hydra's ``+key=value`` appends such a key to a typed node (it opens the node first);
    no tool would read it, so it is an error rather than silently ignored.
    """
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
    """Resolve interpolations (run_dir, environment variables) and validate.

    Used on what Hydra composed, by :func:`compose_config` and by the tools' ``hydra.main``
    task functions alike, so saved configs are self-contained.

    Raises:
        ConfigError: an interpolation cannot be resolved, or ``validate_fn`` rejects the config.
    """
    cfg = copy.deepcopy(cfg)
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as err:
        raise ConfigError(f"Could not resolve the config: {_hydra_error_message(err)}") from None
    unknown = _unknown_keys(cfg)
    if unknown:
        raise ConfigError(f"{unknown[0]} is not a setting of this tool (added with +{unknown[0]}=...?): "
                          "see --help for the keys there are.")
    return validate_fn(cfg) if validate_fn is not None else cfg


register_configs()
