"""The typed schemas of the tools other than nmt-train (configs/<tool>.yaml lists its schema
first, so Hydra rejects a mistyped value or an unknown key): registered in Hydra's ConfigStore
when this module is imported (nmt.cli.common does), beside nmt-train's (:mod:`nmt.config`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from nmt.config import TOOL_SCHEMAS, Choice, SamplingSchema, SearchSchema, register_configs


def _choice_type(name: str, *values: str) -> type[Choice]:
    return Choice(name, {v: v for v in values}, module=__name__)


Engine = _choice_type("Engine", "pytorch", "ctranslate2")
Weights = _choice_type("Weights", "inference", "trained")
AttentionStored = _choice_type("AttentionStored", "alignment", "all")
PlotFormat = _choice_type("PlotFormat", "png", "html")
AttentionKind = _choice_type("AttentionKind", "alignment", "cross", "encoder", "decoder")
LinkMethod = _choice_type("LinkMethod", "argmax", "threshold")
ExportFormat = _choice_type("ExportFormat", "ctranslate2", "marian")
ImportFormat = _choice_type("ImportFormat", "marian")
Quantization = _choice_type("Quantization", "float32", "int8")
Directions = _choice_type("Directions", "all")
Decoding = _choice_type("Decoding", "search", "mbr")
MbrCandidates = _choice_type("MbrCandidates", "beam", "sample")   # nmt.extras.decoding.mbr.CHOICES
MbrUtility = _choice_type("MbrUtility", "chrf", "bleu")
CorpusFormat = _choice_type("CorpusFormat", "text", "tsv")


@dataclass
class DataRootOverride:
    root: str | None = MISSING


@dataclass
class EngineSchema:
    engine: Engine = MISSING
    model_dir: str | None = MISSING      # the nmt-export directory (engine=ctranslate2)
    weights: Weights = MISSING           # engine=pytorch


@dataclass
class MbrSchema:
    """Minimum-Bayes-risk decoding (``decoding=mbr``; :mod:`nmt.extras.decoding.mbr`, whose
    ``mbr_settings`` checks the ranges): of ``num`` candidates per sentence, the one with the
    highest mean utility against all of them. Defaults and meaning: configs/mbr.yaml."""

    candidates: MbrCandidates = MISSING
    num: int = MISSING
    utility: MbrUtility = MISSING
    epsilon: float = MISSING
    compare_beam: bool = MISSING


@dataclass
class DecodingSchema:
    """How nmt-evaluate and nmt-translate choose a translation: ``decoding=search`` (beam or
    greedy search, or one sample with ``sampling=true``) or ``decoding=mbr`` with the
    ``mbr.*`` settings."""

    decoding: Decoding = MISSING
    mbr: MbrSchema = field(default_factory=MbrSchema)


@dataclass
class DirectionSchema:
    src_lang: str | None = MISSING       # a multilingual model's direction (nmt.data.languages)
    tgt_lang: str | None = MISSING


@dataclass
class EvaluateConfig(DirectionSchema, EngineSchema, DecodingSchema, SamplingSchema, SearchSchema):
    checkpoint: Any = MISSING            # a file, or a list of files (an ensemble)
    split: str | None = MISSING
    data: DataRootOverride = field(default_factory=DataRootOverride)
    src_file: str | None = MISSING
    ref_file: str | None = MISSING
    out_dir: str | None = MISSING
    save_alignments: bool = MISSING
    attention: AttentionStored = MISSING
    directions: Directions | None = MISSING   # all: every direction of the split
    pivot: str | None = MISSING
    device: str = MISSING


@dataclass
class TranslateConfig(DirectionSchema, EngineSchema, DecodingSchema, SamplingSchema, SearchSchema):
    checkpoint: Any = MISSING            # a file, or a list of files (an ensemble)
    input: str | None = MISSING
    output: str | None = MISSING
    pivot: str | None = MISSING
    device: str = MISSING


@dataclass
class BacktranslateConfig(DirectionSchema, EngineSchema, SamplingSchema, SearchSchema):
    checkpoint: Any = MISSING            # a file, or a list of files (an ensemble)
    input: str | None = MISSING
    out_dir: str = MISSING
    split: str = MISSING
    format: CorpusFormat | None = MISSING
    pivot: str | None = MISSING
    input_split: str | None = MISSING
    data: DataRootOverride = field(default_factory=DataRootOverride)
    tag: bool = MISSING
    max_len: int | None = MISSING
    chunk_lines: int = MISSING
    device: str = MISSING


@dataclass
class PlotConfig:
    alignments: str = MISSING
    index: Any = MISSING                 # int, "all" or "start:stop"
    out: str = MISSING
    format: PlotFormat = MISSING
    kind: AttentionKind | None = MISSING
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
class AlignConfig(DirectionSchema):
    checkpoint: str = MISSING
    src_file: str | None = MISSING
    tgt_file: str | None = MISSING
    input: str | None = MISSING
    out: str = MISSING
    one_based: bool = MISSING
    method: LinkMethod = MISSING
    threshold: float | None = MISSING
    shift: bool = MISSING
    layer: Any = MISSING                 # int (negative counts from the end) or "mean"
    head: Any = MISSING                  # int or "mean"
    eos_unaligned: bool = MISSING
    reverse_checkpoint: str | None = MISSING
    symmetrize: str | None = MISSING
    agreement_threshold: float = MISSING
    gold: str | None = MISSING
    gold_one_based: bool | None = MISSING
    attention_out: str | None = MISSING
    batch_sentences: int = MISSING
    device: str = MISSING


@dataclass
class ExportConfig:
    checkpoint: str = MISSING
    format: ExportFormat = MISSING
    out_dir: str = MISSING
    quantization: Quantization = MISSING
    max_positions: int = MISSING


@dataclass
class ImportConfig:
    format: ImportFormat = MISSING
    source: str = MISSING
    out: str = MISSING
    src_lang: str | None = MISSING
    tgt_lang: str | None = MISSING


@dataclass
class ServeSchema:
    host: str = MISSING
    port: int = MISSING
    max_batch_work: int = MISSING
    max_wait_ms: float = MISSING
    max_queue_sentences: int = MISSING
    max_request_work: int = MISSING
    max_sentences: int = MISSING
    max_chars: int = MISSING
    max_body_bytes: int = MISSING
    max_beam_size: int = MISSING
    api_key: str | None = MISSING
    allow_unauthenticated: bool = MISSING
    cors_origins: list[str] = MISSING


@dataclass
class ServeConfig(EngineSchema, SearchSchema):
    checkpoint: Any = MISSING            # a file, or a list of files (an ensemble)
    device: str = MISSING
    serve: ServeSchema = field(default_factory=ServeSchema)


TOOL_SCHEMAS.update({"nmt_evaluate": EvaluateConfig, "nmt_translate": TranslateConfig,
                     "nmt_plot": PlotConfig, "nmt_average": AverageConfig, "nmt_align": AlignConfig,
                     "nmt_export": ExportConfig, "nmt_serve": ServeConfig,
                     "nmt_import": ImportConfig, "nmt_backtranslate": BacktranslateConfig})
register_configs()
