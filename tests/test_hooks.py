"""The training hooks (nmt.training.hooks): hooks(cfg) builds exactly what a config asks for,
and TrainingHooks.check refuses each mismatch in one line, before anything is read or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.config import ConfigError, compose_config, is_guided
from nmt.extras.training import hooks
from nmt.extras.training.consistency import Consistency
from nmt.extras.training.subword_sampling import SubwordSampling
from nmt.extras.training.teacher import prepare_links
from nmt.training.hooks import NO_HOOKS, TrainingHooks, needs_teacher

GUIDED = ["train.alignment_loss_weight=0.05", "model.alignment_heads=1"]
SAMPLED = ["data.tokenizer.sampling_alpha=0.5"]


def test_hooks_builds_what_the_config_asks_for(tiny_overrides):
    assert hooks(compose_config(tiny_overrides)) == NO_HOOKS == TrainingHooks()
    built = hooks(compose_config(tiny_overrides + ["train.consistency=rdrop", *SAMPLED]))
    assert isinstance(built.regulariser, Consistency)
    assert isinstance(built.resampler, SubwordSampling) and built.teacher is None
    guided = compose_config(tiny_overrides + GUIDED)
    assert is_guided(guided.train) and needs_teacher(guided)
    assert hooks(guided) == TrainingHooks(teacher=prepare_links)
    given = compose_config(tiny_overrides + GUIDED + ["data.alignments=links.txt"])
    assert is_guided(given.train) and not needs_teacher(given) and hooks(given) == NO_HOOKS


@pytest.mark.parametrize(("overrides", "given", "message"), [
    (["train.consistency=simcut"], {},
     "train.consistency=simcut needs a regulariser hook, which the TrainingHooks given lack: "
     "build them with nmt.extras.training.hooks(cfg), as nmt-train and nmt.train() do."),
    ([], {"regulariser": object()},
     "train.consistency=none takes no regulariser hook, but the TrainingHooks given have one: "
     "build them with"),
    (SAMPLED, {}, "data.tokenizer.sampling_alpha=0.5 needs a resampler hook"),
    ([], {"resampler": object()}, "data.tokenizer.sampling_alpha=None takes no resampler hook"),
    (GUIDED, {},
     "train.alignment_loss_weight=0.05 with data.alignments=None needs a teacher hook, which the "
     "TrainingHooks given lack: give data.alignments=FILE, or build them with"),
    ([*GUIDED, "data.alignments=links.txt"], {"teacher": prepare_links},
     "train.alignment_loss_weight=0.05 with data.alignments=links.txt takes no teacher hook"),
])
def test_each_mismatch_is_one_config_error(overrides, given, message, tiny_overrides):
    cfg = compose_config(tiny_overrides + overrides)
    with pytest.raises(ConfigError) as err:
        TrainingHooks(**given).check(cfg)
    assert str(err.value).startswith(message)
    assert not Path(cfg.run_dir).exists() and not Path(cfg.data.cache_dir).exists()


def test_a_run_checks_its_hooks_once(tiny_overrides, tmp_path, monkeypatch):
    """nmt.train() builds its Trainer before it opens the run directory: the Trainer's check is
    the run's only one."""
    from conftest import TINY_MODEL, TINY_TRAIN

    from nmt.training.trainer import train

    calls = []
    check = TrainingHooks.check
    monkeypatch.setattr(TrainingHooks, "check", lambda self, cfg: calls.append(check(self, cfg)))
    cfg = compose_config([o for o in tiny_overrides if not o.startswith("run_dir=")]
                         + TINY_MODEL + TINY_TRAIN + ["train.max_steps=1",
                                                      f"run_dir={tmp_path / 'run'}"])
    assert train(cfg)["steps"] == 1 and len(calls) == 1
