"""One typed config tree, composed by Hydra from ``configs/`` and validated once.

The YAML files under ``configs/`` hold every default, each in exactly one place. The
dataclasses below hold only the *types* (all fields ``MISSING``): merging the composed
YAML into them makes OmegaConf reject a non-numeric ``train.max_steps=abc`` or an unknown
key, and :func:`validate` adds the range checks that types cannot express. Every problem
becomes a :class:`ConfigError` whose message says which key to change and how.

Usage::

    cfg = compose_config(["model=rnn", "train.max_steps=100"])   # validated DictConfig
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

CONFIG_DIR = Path(os.environ.get("NMT_CONFIG_DIR", Path(__file__).resolve().parents[1] / "configs"))


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
    plateau_factor: float = MISSING
    plateau_patience: int = MISSING
    min_lr: float = MISSING
    clip_grad_norm: float = MISSING
    precision: str = MISSING
    compile: bool = MISSING
    early_stopping_patience: int | None = MISSING
    keep_last: int = MISSING


@dataclass
class SearchSchema:
    beam_size: int = MISSING
    length_penalty: float = MISSING
    max_len_a: float = MISSING
    max_len_b: int = MISSING
    batch_sentences: int = MISSING
    n_best: int = MISSING


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
        _positive(wrapped, "s.max_len_a", "s.max_len_b", allow_zero=True)
    except ConfigError as err:
        raise spelled(err) from None
    if search.n_best > search.beam_size:
        raise ConfigError(f"{prefix}n_best={search.n_best} exceeds {prefix}beam_size={search.beam_size}: "
                          "a beam search returns at most beam_size hypotheses.")
    return search


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
    _positive(out, "data.tokenizer.vocab_size", "data.max_len", "data.max_len_ratio",
              "data.max_train_pairs")
    if out.data.src_lang == out.data.tgt_lang:
        raise ConfigError(f"data.src_lang and data.tgt_lang are both {out.data.src_lang!r}: set two different languages.")
    _choice(out, "train.optimizer", ("adam", "adamw"))
    _choice(out, "train.schedule", ("inverse_sqrt", "constant", "plateau"))
    _choice(out, "train.precision", ("auto", "fp32", "bf16"))
    _positive(out, "train.batch_tokens", "train.accum_steps", "train.max_steps", "train.max_epochs",
              "train.max_minutes", "train.eval_every_steps", "train.log_every_steps", "train.lr",
              "train.plateau_patience", "train.early_stopping_patience")
    _positive(out, "train.warmup_steps", "train.clip_grad_norm", "train.weight_decay",
              "train.keep_last", "train.min_lr", allow_zero=True)
    _unit_interval(out, "train.label_smoothing")
    if len(out.train.betas) != 2:
        raise ConfigError(f"train.betas={list(out.train.betas)} must hold two numbers, e.g. [0.9,0.98].")
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
def compose_config(overrides: list[str] | tuple[str, ...] = (), config_name: str = "config",
                   validate_fn=validate) -> DictConfig:
    """Compose ``configs/<config_name>.yaml`` with Hydra overrides and validate it.

    Args:
        overrides: Hydra override strings, e.g. ``["model=rnn", "train.max_steps=10"]``.
        config_name: primary config (``config``, ``evaluate``, ``translate``, ``plot``).
        validate_fn: checker applied to the composed config (``None``: return unchecked).

    Raises:
        ConfigError: unknown group option, unknown key, bad override syntax or invalid value.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as err:
        msg = " ".join(str(err).split("Config search path")[0].split())
        raise ConfigError(f"Could not build the config from overrides {list(overrides)}: {msg}") from None
    finally:
        GlobalHydra.instance().clear()
    # Resolve interpolations now (run_dir, env vars) so saved configs are self-contained.
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as err:
        raise ConfigError(f"Could not resolve the config: {err}") from None
    return validate_fn(cfg) if validate_fn is not None else cfg
