"""One training run's policy around the loop: its directory, its settings, its tokenizer.

A run directory holds one run, however many times its command runs::

    no checkpoints/last.pt                    -> a fresh run
    last.pt, the same settings, not finished  -> resume from last.pt
    last.pt, the same settings, finished      -> nothing to do: no file is written
    last.pt, other settings                   -> refused before anything is written,
                                                 naming every key that differs ...
    ... with train.resume=force               -> resume with the new settings (warned)

"The same settings" is the resolved config but :data:`UNCHECKED_KEYS`. Even forced, a run
keeps its model, language pair and tokenizer (:data:`COMPATIBILITY_KEYS`; dropout and subword
sampling may change); a changed batch order (:data:`BATCH_ORDER_KEYS`) is warned about. A run
is finished when its last checkpoint records the stop condition that ended it.
``train.init_from`` fine-tunes another run's weights with its tokenizer.

``.hydra/`` holds Hydra's files of the latest segment (run of the command; written after the
checks, so a refused or finished run changes no file) and ``summary.json`` lists every
segment. Sweeps (``nmt-train -m``): :mod:`nmt.cli.sweep`.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from nmt.checkpoint import CheckpointError, load_checkpoint
from nmt.config import ConfigError, config_at, config_diff, to_plain
from nmt.data.corpus import CorpusError
from nmt.data.pipeline import prepare_data
from nmt.data.tokenizer import Tokenizer, load_tokenizer_model
from nmt.runtime import compile_stats, ensure_writable_dir, write_json_atomic, write_text_atomic
from nmt.training.distributed import DistInfo, broadcast_object, collective_errors, gather_objects
from nmt.training.hooks import Teacher, needs_teacher

log = logging.getLogger("nmt")

# Errors the user must fix (exit status 2); under DDP every rank raises the first one.
USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, CheckpointError, CorpusError)

# A change makes the saved weights unusable: architecture, languages and tags, vocabulary.
COMPATIBILITY_KEYS = ("model", "data.src_lang", "data.tgt_lang", "data.pairs", "data.lang_tag",
                      "data.tokenizer")
SAMPLING_KEYS = ("data.tokenizer.sampling_alpha", "data.tokenizer.nbest_size")
# A change is allowed, but the saved position in the epoch then indexes another batch list.
BATCH_ORDER_KEYS = ("train.batch_tokens", "train.seed", "train.accum_steps",
                    "data.sampling_temperature", *SAMPLING_KEYS)
# May differ between the segments of one run_dir without changing what is trained.
UNCHECKED_KEYS = ("run_dir", "device", "data.cache_dir", "train.resume",
                  "train.save_every_steps")


def _regularisation(problem: str) -> bool:
    """Whether a :func:`config_changes` line names a dropout rate or a subword-sampling key."""
    key = problem.split(":")[0]
    return "dropout" in key or key in SAMPLING_KEYS


def config_changes(ckpt: dict, cfg: DictConfig, keys: tuple[str, ...] | None = None) -> list[str]:
    """``["train.lr: checkpoint has 0.001, now 0.002", ...]``: the settings under ``keys``
    (default: all but :data:`UNCHECKED_KEYS`) that differ from the checkpoint's."""
    saved, now = ckpt.get("config") or {}, to_plain(cfg)
    if keys is None:
        return [p for p in config_diff(saved, now) if p.split(":")[0] not in UNCHECKED_KEYS]
    return [p for key in keys for p in config_diff(config_at(saved, key), config_at(now, key), key)]


def check_compatible(path: str | Path, ckpt: dict, cfg: DictConfig,
                     model: torch.nn.Module | None = None) -> None:
    """Raise CheckpointError, naming every difference, if ``path`` is of another model or
    vocabulary: the :data:`COMPATIBILITY_KEYS` (but regularisation), then, given ``model``,
    every weight shape (a vocabulary change shows as an embedding shape)."""
    problems = [p for p in config_changes(ckpt, cfg, COMPATIBILITY_KEYS)
                if not _regularisation(p)]
    if model is not None and not problems:
        saved_w, now_w = ckpt.get("model") or {}, model.state_dict()
        problems = config_diff({n: tuple(w.shape) for n, w in saved_w.items()},
                               {n: tuple(w.shape) for n, w in now_w.items()}, "weight")
        problems = problems[:4] + ["..."] * (len(problems) > 4)
    if problems:
        raise CheckpointError(f"{path} was written by an incompatible run ({'; '.join(problems)})"
                              ": resume with the original settings, or use another run_dir=...")


@dataclass
class RunRecord:
    """How ``nmt-train`` launched a segment (empty from Python); the configs as YAML."""

    command: str = ""
    overrides: list[str] = field(default_factory=list)
    config_yaml: str | None = None
    hydra_yaml: str | None = None


@dataclass
class RunPlan:
    kind: str                                            # fresh, resume or finished
    checkpoint: dict | None = None                       # the last.pt to resume
    changes: list[str] = field(default_factory=list)     # settings train.resume=force changes
    summary: dict | None = None                          # a finished run's


def plan_run(run_dir: Path, cfg: DictConfig) -> RunPlan:
    """How the run in ``run_dir`` goes on with ``cfg`` (module docstring); writes nothing."""
    last = run_dir / "checkpoints" / "last.pt"
    if not last.is_file():
        return RunPlan("fresh")
    ckpt = load_checkpoint(last)
    changes = config_changes(ckpt, cfg)
    if changes and cfg.train.resume != "force":
        shown = "; ".join(changes[:8]) + ("; ..." if len(changes) > 8 else "")
        raise ConfigError(f"run_dir={run_dir} holds a run with other settings ({shown}): "
                          "resume with the original settings, continue with the new ones by "
                          "train.resume=force, or use another run_dir=... Nothing was written.")
    reason = (ckpt.get("trainer") or {}).get("stop_reason") or ""
    if reason and not changes:
        summary = _read_json(run_dir / "summary.json")
        return RunPlan("finished", summary=summary or {"stop_reason": reason,
                                                       "steps": ckpt.get("step")})
    return RunPlan("resume", checkpoint=ckpt, changes=changes)


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def open_run(cfg: DictConfig, info: DistInfo) -> RunPlan:
    """Rank 0's :func:`plan_run` on every rank, once the ranks agree on one writable
    ``run_dir`` (a finished run is only reported, on stderr)."""
    run_dir, plan = Path(cfg.run_dir), None
    with collective_errors(info, USER_ERRORS):
        dirs = sorted(set(gather_objects(str(run_dir.resolve()), info)))
        if len(dirs) > 1:
            raise ConfigError(f"run_dir differs between the processes ({', '.join(dirs)}): "
                              "under torchrun give hydra.sweep.dir=... without ${now:...}.")
        if info.is_main:
            plan = plan_run(run_dir, cfg)
            if plan.kind != "finished":
                ensure_writable_dir(run_dir, "run_dir")
    plan = broadcast_object(plan, info)
    if plan.kind == "finished" and info.is_main:
        print(f"nmt-train: {run_dir} is finished ({plan.summary.get('stop_reason')}, "
              f"{plan.summary.get('steps')} steps); nothing to do. Train on with a new stop "
              "setting and train.resume=force, or use another run_dir=...", file=sys.stderr)
    return plan


@contextmanager
def logging_to(run_dir: Path, info: DistInfo) -> Iterator[None]:
    """The ``nmt`` logger to the console (+ ``run_dir/train.log`` on rank 0) within the block."""
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    handlers[0].setLevel(logging.INFO if info.is_main else logging.WARNING)
    if info.is_main:
        handlers.append(logging.FileHandler(run_dir / "train.log", encoding="utf-8"))
    for h in handlers:
        h.setFormatter(fmt)
        log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False   # not once more through the root logger (Hydra's)
    try:
        yield
    finally:
        for h in handlers:
            log.removeHandler(h)
            h.close()
        log.propagate = True


def write_record(run_dir: Path, record: RunRecord | None) -> None:
    """Hydra's ``.hydra/{config,hydra,overrides}.yaml`` of this segment (Hydra's own writing
    is off, ``hydra.output_subdir: null``: a refused or finished run writes nothing)."""
    if record is None or record.config_yaml is None:
        return
    out = run_dir / ".hydra"
    write_text_atomic(out / "config.yaml", record.config_yaml)
    if record.hydra_yaml is not None:
        write_text_atomic(out / "hydra.yaml", record.hydra_yaml)
    write_text_atomic(out / "overrides.yaml", OmegaConf.to_yaml(list(record.overrides)))


def timestamp() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def segment(record: RunRecord | None, step: int, machine: dict, world_size: int) -> dict:
    """The ``summary.json`` entry of the segment starting now at ``step``."""
    return {"started": timestamp(), "ended": None, "start_step": step, "end_step": step,
            "command": record.command if record else "", "machine": machine,
            "world_size": world_size}


def write_summary(run_dir: Path, st, stop_reason: str, n_params: int, device: torch.device,
                  info: DistInfo, compiled: bool, speed: dict | None = None) -> dict:
    """``summary.json`` (rank 0 writes it) of all segments; ``st``: the trainer's state;
    ``speed``: model FLOP/s and MFU of the training time (``Throughput.summary``)."""
    first, last = st.segments[0], st.segments[-1]
    started, ended = first["started"][:10], (last["ended"] or last["started"])[:10]
    summary = {   # times: all segments; wall with validation, train without
        "stop_reason": stop_reason, "steps": st.step, "epochs_done": st.epoch, "params": n_params,
        "wall_time_s": round(st.elapsed_s, 2), "train_time_s": round(st.train_s, 2),
        "train_tokens": st.train_tokens,
        "train_tokens_per_s": round(st.train_tokens / max(st.train_s, 1e-9), 1), **(speed or {}),
        "best_bleu": st.best_bleu, "best_step": st.best_step,
        "last": st.history[-1] if st.history else None,
        "peak_rss_mb": round(st.peak_rss_mb, 1), "world_size": info.world_size,
        "device": str(device), "machine": last["machine"],
        "date": started if started == ended else f"{started}..{ended}", "segments": st.segments}
    best = next((h for h in st.history if h["step"] == st.best_step), {})
    if "bleu_directions" in best:   # several directions: the best validation's BLEU of each
        summary["best_bleu_directions"] = best["bleu_directions"]
    if st.links is not None:   # guided alignment: data.alignments, or the teacher's file
        summary["links"] = st.links
    if device.type == "cuda":
        summary["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    if compiled:  # this segment's process: graphs built and seconds compiling
        summary["compile"] = compile_stats()
        log.info("torch.compile: %d graphs, %.1f s compiling", summary["compile"]["graphs"],
                 summary["compile"]["compile_s"])
    log.info("done (%s) | steps %d | params %s | wall %.1f min | train tokens/s %.0f | "
             "best bleu %s at step %s | peak RSS %.0f MiB", stop_reason, st.step,
             f"{n_params:,}", st.elapsed_s / 60, summary["train_tokens_per_s"],
             "n/a" if st.best_bleu is None else f"{st.best_bleu:.2f}", st.best_step,
             st.peak_rss_mb)
    if info.is_main:
        write_json_atomic(run_dir / "summary.json", summary)
    return summary


def load_init_from(cfg: DictConfig) -> dict:
    """``train.init_from``'s checkpoint; CheckpointError unless its model section is ours
    (dropout rates may differ)."""
    path = str(cfg.train.init_from)
    ckpt = load_checkpoint(path)
    diff = [p for p in config_changes(ckpt, cfg, ("model",)) if not _regularisation(p)]
    if diff:
        raise CheckpointError(f"train.init_from={path}: its model config differs from this "
                              f"run's ({'; '.join(diff)}); fine-tuning keeps the architecture.")
    return ckpt


def load_init_weights(model: torch.nn.Module, ckpt: dict, path: str) -> None:
    """Fine-tuning: ``model`` takes the weights ``ckpt`` translates with (its ``model``)."""
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as err:
        raise CheckpointError(f"train.init_from={path}: its weights do not fit this model "
                              f"({err}).") from None
    log.info("fine-tuning: weights and tokenizer from %s (fresh optimizer, schedule, steps)", path)


def prepare_run_data(cfg: DictConfig, plan: RunPlan, init_ckpt: dict | None, last: Path,
                     teacher: Teacher | None = None):
    """The run's :class:`~nmt.data.pipeline.PreparedData`. The tokenizer: a resumed run that
    did not train its own takes ``last.pt``'s, fine-tuning ``train.init_from``'s, else
    ``data.tokenizer.model``'s or a trained one, which must be the one ``last.pt`` saved.
    Guided alignment without ``data.alignments`` trains on the ``teacher``'s links (made by
    the first caller: rank 0, the other ranks then find them cached)."""
    given, ckpt = cfg.data.tokenizer.model, plan.checkpoint
    tokenizer = None
    if ckpt is not None and (cfg.train.init_from or given):
        tokenizer = Tokenizer.from_checkpoint(last, ckpt.get("tokenizer"))
    elif init_ckpt is not None:
        tokenizer = Tokenizer.from_checkpoint(cfg.train.init_from, init_ckpt.get("tokenizer"))
    elif given:
        tokenizer = load_tokenizer_model(str(given), cfg.data.tokenizer, cfg.data.src_lang,
                                         cfg.data.tgt_lang)
    data_cfg = cfg.data
    if needs_teacher(cfg):   # a teacher was given: TrainingHooks.check
        data_cfg = OmegaConf.merge(data_cfg, {"alignments": str(teacher(data_cfg))})
    data = prepare_data(data_cfg, tokenizer)
    if ckpt is not None:
        state = ckpt.get("tokenizer")
        if state is not None and Tokenizer.from_checkpoint(last, state).fingerprint != \
                data.tokenizer.fingerprint:
            raise CheckpointError(f"{last} was trained with another tokenizer than the current "
                                  "data gives (data or data.max_train_pairs changed?): resume "
                                  "with the original data, or use a new run_dir=...")
        if changed := config_changes(ckpt, cfg, BATCH_ORDER_KEYS):
            log.warning("resuming %s with settings that change the batch order (%s): the run "
                        "continues at batch %d of epoch %d of the NEW order, so some pairs of "
                        "this epoch are seen twice or not at all; restore them for an exact "
                        "resume", last, "; ".join(changed), ckpt.get("batch_in_epoch", 0),
                        ckpt.get("epoch", 0))
    if plan.changes:
        log.warning("train.resume=force: continuing %s with changed settings: %s",
                    last.parent.parent, "; ".join(plan.changes))
    if not data.tokenizer.joint and cfg.model.tie_embeddings:
        raise ConfigError("model.tie_embeddings=true needs a joint tokenizer; the given one "
                          "has two vocabularies: set model.tie_embeddings=false.")
    if cfg.data.tokenizer.bt_tag and data.tokenizer.bt_tag_id is None:
        raise ConfigError("data.tokenizer.bt_tag=true, but the tokenizer given (train.init_from's "
                          "or data.tokenizer.model) has no <BT> piece: train a new one.")
    return data

