"""Trainer, in process: stop conditions, the plateau schedule, AdamW, precisions, compile, the
weight average, subword sampling, kept checkpoints, cooldown, and what a checkpoint holds.
The CLI runs (every artefact, SIGKILL and resume, user errors) are in
tests/e2e/test_train_cli.py."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL, TINY_RNN, TINY_TRAIN, tiny_model_and_batch, train

from nmt.checkpoint import CONFIG_VERSION, load_checkpoint
from nmt.cli.train import main
from nmt.config import ConfigError, compose_config
from nmt.inference.translator import load_for_inference

# A dim-16 Transformer: a training step takes milliseconds. Dropout stays on (0.1) so the
# resume test also checks that the dropout RNG is restored.


def test_early_stopping_and_time_budget_end_the_run(overrides, tmp_path):
    args = overrides[:-1] + TINY_MODEL + TINY_TRAIN
    # BLEU cannot improve on 0 after one step; patience 1 stops at the second validation.
    summary = train(compose_config(args + ["train.eval_every_steps=1",
                                           "train.early_stopping_patience=1",
                                           f"run_dir={tmp_path / 'early'}"]))
    assert summary["stop_reason"].startswith("early stopping") and summary["steps"] == 2
    summary = train(compose_config(args + ["train.max_minutes=1e-6",
                                           f"run_dir={tmp_path / 'time'}"]))
    assert summary["stop_reason"] == "max_minutes=1e-06 reached" and summary["steps"] == 1
    assert load_checkpoint(tmp_path / "time" / "checkpoints" / "last.pt")["step"] == 1


# The RNN of the schedule and optimizer tests (a step takes milliseconds).

def test_rnn_plateau_schedule_halves_lr_after_patience_validations_without_gain(overrides,
                                                                                 tmp_path):
    # Outputs of length 0 (search.max_len_*=0) score BLEU 0 at every validation: the first
    # sets the best, every later one is "no gain". Patience 2: the lr halves after the
    # validations of steps 3 and 5 (2 and 4 without gain), from the next step on.
    run = tmp_path / "plateau"
    summary = train(compose_config(overrides[:-1] + TINY_RNN + [
        "train.schedule=plateau", "train.lr=0.001", "train.warmup_steps=0",
        "train.plateau_patience=2", "train.plateau_factor=0.5", "train.eval_every_steps=1",
        "train.max_steps=6", "search.max_len_a=0", "search.max_len_b=0", f"run_dir={run}"]))
    assert summary["steps"] == 6
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    assert [v["bleu"] for v in last["trainer"]["history"]] == [0.0] * 6
    expected = [1e-3, 1e-3, 1e-3, 5e-4, 5e-4, 2.5e-4]                  # lr of steps 1..6

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    lrs = events.Scalars("train/lr")
    assert [e.step for e in lrs] == list(range(1, 7))
    assert [e.value for e in lrs] == pytest.approx(expected, rel=1e-6)
    log = (run / "train.log").read_text()
    assert [float(ln.split("| lr ")[1].split(" ")[0]) for ln in log.splitlines()
            if "train | step" in ln] == pytest.approx(expected, rel=1e-6)
    assert log.count("validation BLEU did not improve for 2 validations") == 2
    # The checkpoint carries the reduced rate: the optimizer holds step 6's lr, the schedule
    # the scale 1/4 that a resumed run goes on from.
    assert last["optimizer"]["param_groups"][0]["lr"] == pytest.approx(2.5e-4)
    assert last["scheduler"] == {"kind": "plateau", "scale": 0.25}
    # ... and the RNN did train.
    losses = [e.value for e in events.Scalars("train/loss")]
    assert losses[-1] < losses[0]


def test_adamw_decays_weights_decoupled_from_the_gradient(overrides, tmp_path):
    """AdamW (Loshchilov & Hutter 2019): p <- p - lr * wd * p - lr * adam_step(grad). One step
    with weight decay 0.5 and one without, from the same weights and batch: they differ by
    exactly -lr * 0.5 * p0 (Adam with an L2 term would move the decay through adam_step)."""
    args = overrides[:-1] + TINY_RNN + ["train.optimizer=adamw", "train.lr=0.01",
                                        "train.warmup_steps=0", "train.max_steps=1"]
    train(compose_config(args + ["train.weight_decay=0.5", f"run_dir={tmp_path / 'wd'}"]))
    train(compose_config(args + ["train.weight_decay=0.0", f"run_dir={tmp_path / 'no_wd'}"]))
    wd = load_checkpoint(tmp_path / "wd" / "checkpoints" / "last.pt")
    no_wd = load_checkpoint(tmp_path / "no_wd" / "checkpoints" / "last.pt")

    group = wd["optimizer"]["param_groups"][0]
    assert group["weight_decay"] == 0.5 and group["decoupled_weight_decay"] is True
    assert group["lr"] == pytest.approx(0.01)
    assert len(wd["optimizer"]["state"]) == len(group["params"]) == len(wd["model"])
    assert all(set(s) == {"step", "exp_avg", "exp_avg_sq"}
               for s in wd["optimizer"]["state"].values())

    from nmt.models import build_model

    cfg = compose_config(args)
    torch.manual_seed(cfg.train.seed)                 # the trainer's initialisation
    init = build_model(cfg.model, 120, 120).state_dict()
    for name, p0 in init.items():
        torch.testing.assert_close(wd["model"][name] - no_wd["model"][name], -0.01 * 0.5 * p0,
                                   atol=1e-6, rtol=0, msg=name)
    assert max(p.abs().max().item() for p in init.values()) > 0.1    # a visible decay


def test_bf16_autocast_trains_on_cpu_and_fp16_needs_cuda(overrides, tmp_path, capsys,
                                                          monkeypatch):
    """precision=bf16 runs the CPU autocast path (the one CUDA uses with bf16) end to end, and
    warns on a CPU that only emulates bf16; fp16 (loss scaling) is for CUDA and is refused
    elsewhere with one paragraph."""
    import math

    from nmt import runtime as runtime_module
    from nmt.runtime import autocast_dtype
    from nmt.training import harness as harness_module

    assert isinstance(harness_module.cpu_has_bf16(), bool)
    for module in (harness_module, runtime_module):                         # a CPU without it
        monkeypatch.setattr(module, "cpu_has_bf16", lambda: False)

    run = tmp_path / "bf16"
    args = overrides[:-1] + TINY_MODEL + TINY_TRAIN + ["train.max_steps=4",
                                                       "train.eval_every_steps=2",
                                                       "train.precision=bf16", f"run_dir={run}"]
    summary = train(compose_config(args))
    assert summary["steps"] == 4 and math.isfinite(summary["last"]["loss"])
    log_text = " ".join((run / "train.log").read_text().split())
    assert "bfloat16 autocast" in log_text
    assert "CPU without native bf16 (AVX-512 BF16 or AMX)" in log_text
    ckpt = load_checkpoint(run / "checkpoints" / "last.pt")
    assert ckpt["scaler"] is None and all(v.dtype == torch.float32 for v in ckpt["model"].values()
                                          if v.is_floating_point())
    cpu = torch.device("cpu")
    assert autocast_dtype("auto", cpu) is None and autocast_dtype("bf16", cpu) == torch.bfloat16
    assert autocast_dtype("fp32", cpu) is None
    monkeypatch.setattr(runtime_module, "cpu_has_bf16", lambda: True)      # AMX / AVX-512 BF16
    assert autocast_dtype("auto", cpu) == torch.bfloat16 and autocast_dtype("fp32", cpu) is None
    assert main(overrides[:-1] + TINY_MODEL + TINY_TRAIN + [
        "train.max_steps=1", "train.precision=fp16", "device=cpu",
        f"run_dir={tmp_path / 'fp16'}"]) == 2
    assert "train.precision=fp16 needs a CUDA device" in " ".join(capsys.readouterr().err.split())


def test_fp16_loss_scaling_path_and_its_checkpointed_state(overrides, tmp_path, monkeypatch):
    """The fp16 path (GradScaler: scale, unscale before clipping, step, update) run on CPU by
    pretending fp16 is the autocast dtype here; its scaler state is checkpointed and a
    killed-and-resumed run equals an uninterrupted one."""
    import nmt.training.harness as harness_mod

    monkeypatch.setattr(harness_mod, "autocast_dtype", lambda precision, device: torch.float16)
    base = overrides[:-1] + TINY_MODEL + TINY_TRAIN + [
        "train.batch_tokens=1024", "train.max_steps=6", "train.eval_every_steps=3",
        "train.keep_last=1", "device=cpu"]
    full = train(compose_config(base + [f"run_dir={tmp_path / 'full'}"]))
    ckpt = load_checkpoint(tmp_path / "full" / "checkpoints" / "last.pt")
    assert full["steps"] == 6 and ckpt["scaler"]["scale"] > 0
    # Resume from the step-3 checkpoint: same weights and scaler state at step 6.
    part = base[:-1] + ["train.max_steps=3", "device=cpu"]
    train(compose_config(part + [f"run_dir={tmp_path / 'resumed'}"]))
    train(compose_config(base + ["train.resume=force", f"run_dir={tmp_path / 'resumed'}"]))
    resumed = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")
    assert resumed["scaler"] == ckpt["scaler"]
    for name, value in ckpt["model"].items():
        torch.testing.assert_close(resumed["model"][name], value, atol=1e-6, rtol=0, msg=name)


@pytest.mark.parametrize("model", ["transformer", "rnn"])
def test_compiled_training_checkpoints_like_eager_and_resumes(overrides, tmp_path, model):
    """train.compile=true: same losses as eager (dropout off), plain state_dict keys (no
    ``_orig_mod.``), a bounded number of graphs over batches of different shapes, and a
    resumed compiled run continues from the eager-compatible checkpoint. The RNN trains with
    R-Drop (its doubled batches through the compiled model)."""
    tiny = TINY_MODEL if model == "transformer" else [
        "model=rnn", "model.emb_dim=8", "model.encoder_hidden=8", "model.decoder_hidden=8",
        "model.attention_dim=8", "model.output_dim=8", "train.consistency=rdrop"]
    base = overrides[:-1] + tiny + TINY_TRAIN + [
        "model.dropout=0.0", "train.max_steps=6", "train.eval_every_steps=6"]
    eager = train(compose_config(base + [f"run_dir={tmp_path / 'eager'}"]))
    comp = train(compose_config(base + ["train.compile=true", f"run_dir={tmp_path / 'comp'}"]))
    assert 1 <= comp["compile"]["graphs"] <= 8 and comp["compile"]["compile_s"] > 0
    assert comp["last"]["loss"] == pytest.approx(eager["last"]["loss"], rel=1e-2)
    a, b = (load_checkpoint(tmp_path / f"{name}/checkpoints/last.pt")["model"]
            for name in ("eager", "comp"))
    assert list(a) == list(b) and not any(k.startswith("_orig_mod") for k in b)
    resumed = train(compose_config(base[:-2] + ["train.max_steps=8", "train.eval_every_steps=6",
                                                 "train.compile=true", "train.resume=force",
                                                 f"run_dir={tmp_path / 'comp'}"]))
    assert resumed["steps"] == 8 and len(resumed["segments"]) == 2


def _valid_nll(weights: dict, cfg) -> float:
    """Per-token NLL of the validation split under ``weights`` (one batch, fp32)."""
    from nmt.data.batching import collate
    from nmt.data.pipeline import prepare_data
    from nmt.data.vocab import PAD_ID
    from nmt.models import build_model
    from nmt.training.loss import label_smoothed_nll

    data = prepare_data(cfg.data)
    model = build_model(cfg.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size)
    model.load_state_dict(weights)
    model.eval()
    batch = collate(data.valid, range(len(data.valid)))
    with torch.no_grad():
        logits, _ = model(batch.src, batch.src_mask, batch.tgt_in, need_alignment=False)
        _, nll_sum = label_smoothed_nll(logits, batch.tgt_out, 0.1, PAD_ID)
    return nll_sum.item() / batch.n_tgt_tokens


def test_the_weight_average_is_validated_checkpointed_translated_and_fine_tuned_from(
        overrides, tmp_path):
    from nmt.runtime import resolve_device
    from nmt.training.distributed import DistInfo
    from nmt.training.trainer import Trainer

    args = overrides[:-1] + TINY_MODEL + TINY_TRAIN + [
        "train.max_steps=4", "train.eval_every_steps=2", "train.ema_decay=0.5", "device=cpu"]
    cfg = compose_config(args + [f"run_dir={tmp_path / 'ema'}"])
    train(cfg)
    last = load_checkpoint(tmp_path / "ema" / "checkpoints" / "last.pt")
    ema, trained = last["model"], last["train_model"]
    assert any(not torch.equal(ema[k], trained[k]) for k in ema)
    # Validation scored the average ("model"), not the trained weights.
    nll = last["trainer"]["history"][-1]["nll"]
    assert _valid_nll(ema, cfg) == pytest.approx(nll, rel=1e-5)
    assert _valid_nll(trained, cfg) != pytest.approx(nll, rel=1e-3)
    # Inference and fine-tuning take the average.
    model, _, _ = load_for_inference(tmp_path / "ema" / "checkpoints" / "best.pt")
    best = load_checkpoint(tmp_path / "ema" / "checkpoints" / "best.pt")["model"]
    for name, value in model.state_dict().items():
        assert torch.equal(value, best[name]), name
    # ... unless asked for the trained weights behind it (nmt-evaluate weights=trained).
    raw, _, _ = load_for_inference(tmp_path / "ema" / "checkpoints" / "last.pt", weights="trained")
    for name, value in raw.state_dict().items():
        assert torch.equal(value, trained[name]), name
    with pytest.raises(ConfigError, match="weights='ema': use inference or trained"):
        load_for_inference(tmp_path / "ema" / "checkpoints" / "last.pt", weights="ema")
    init_from = tmp_path / "ema" / "checkpoints" / "last.pt"
    tuned = compose_config(args + [f"train.init_from={init_from}", f"run_dir={tmp_path / 'tuned'}"])
    trainer = Trainer(tuned, DistInfo(), resolve_device("cpu"))
    try:
        trainer.setup()
        for name, value in trainer.model.state_dict().items():
            assert torch.equal(value, ema[name]), name
            assert torch.equal(trainer.ema.model.state_dict()[name], ema[name]), name
    finally:
        trainer.close()


def test_subword_sampling_draws_each_training_epoch_and_leaves_validation_alone(overrides,
                                                                                tmp_path):
    from nmt.data.pipeline import load_split
    from nmt.extras.training import hooks
    from nmt.runtime import resolve_device
    from nmt.training.distributed import DistInfo
    from nmt.training.trainer import Trainer

    cfg = compose_config(overrides[:-1] + TINY_MODEL + TINY_TRAIN + [
        "data.tokenizer.sampling_alpha=0.5", "device=cpu", f"run_dir={tmp_path / 'run'}"])
    trainer = Trainer(cfg, DistInfo(), resolve_device("cpu"), hooks=hooks(cfg))
    try:
        trainer.setup()
        tok, best = trainer.tokenizer, trainer.train_split
        epochs = [trainer.epoch_data(e)[0] for e in (0, 1)]
        n = len(best)
        for e, split in enumerate(epochs):
            assert sum(split.src_ids(i) != best.src_ids(i) for i in range(n)) > n // 2
            assert [tok.decode_tgt(split.src_ids(i)) for i in range(n)] == best.src_texts()
            rows = np.sort(np.concatenate(trainer.epoch_data(e)[1]))
            assert rows.tolist() == list(range(n))       # each pair once, by sampled lengths
            widths = [max(split.src_lens[b].max(), split.tgt_lens[b].max()) * len(b)
                      for b in trainer.epoch_data(e)[1]]
            assert max(widths) <= cfg.train.batch_tokens
        assert sum(epochs[0].src_ids(i) != epochs[1].src_ids(i) for i in range(n)) > n // 2
        # Validation (and test) keep the best segmentation.
        for split in (trainer.valid_sets[0].split, load_split(cfg.data, "test", tok)):
            assert [split.src_ids(i) for i in range(len(split))] == \
                tok.encode_src_batch(split.src_texts())
    finally:
        trainer.close()


def test_kept_step_checkpoints_and_averaging_the_best(overrides, tmp_path, monkeypatch, capsys):
    """200 pairs at 1024 tokens: 7 batches per epoch. eval_every_steps=4 and max_steps=13
    validate at steps 4, 8, 12 and 13 (the end; epoch ends validate only with
    eval_every_steps=null); the scripted validation BLEU below decides which step files stay.
    Half the validation interval (4 // 2 = 2 steps) keeps 12 and 13 from both counting among
    the keep_last=2 newest (13, 8); keep_best=2 adds the best two, 4 and 12 (6.0 each);
    best.pt is step 4, the first to reach 6.0. The resume points of save_every_steps=3 (steps
    3, 6 and 9; 12 validates) replace last.pt alone and leave no step file."""
    import nmt.training.trainer as trainer_mod
    from nmt.checkpoint import CheckpointManager
    from nmt.cli import average as cli_average

    bleu = {4: 6.0, 8: 2.0, 12: 6.0, 13: 4.0}

    def scripted(self):
        return {"loss": 1.0, "nll": 1.0, "ppl": 2.718, "bleu": bleu[self.state.step]}

    saved, save = [], CheckpointManager.save

    def recorded(self, ckpt, step, *args, resume_point=False, **kwargs):
        last = save(self, ckpt, step, *args, resume_point=resume_point, **kwargs)
        saved.append((step, resume_point, load_checkpoint(last)["step"]))
        return last

    monkeypatch.setattr(trainer_mod.Trainer, "validate", scripted)
    monkeypatch.setattr(CheckpointManager, "save", recorded)
    run = tmp_path / "run"
    train(compose_config(overrides[:-1] + TINY_MODEL + TINY_TRAIN + [
        "train.batch_tokens=1024", "train.eval_every_steps=4", "train.max_steps=13",
        "train.save_every_steps=3", "train.keep_last=2", "train.keep_best=2", "device=cpu",
        f"run_dir={run}"]))
    assert saved == [(3, True, 3), (4, False, 4), (6, True, 6), (8, False, 8), (9, True, 9),
                     (12, False, 12), (13, False, 13)]
    ckpts = run / "checkpoints"
    last = load_checkpoint(ckpts / "last.pt")
    assert [h["step"] for h in last["trainer"]["history"]] == [4, 8, 12, 13]
    assert sorted(p.name for p in ckpts.iterdir()) == [
        "best.pt", "last.pt", "step_12.pt", "step_13.pt", "step_4.pt", "step_8.pt"]
    assert load_checkpoint(ckpts / "best.pt")["step"] == 4
    assert {s: load_checkpoint(ckpts / f"step_{s}.pt")["valid_bleu"] for s in (4, 8, 12, 13)} \
        == {4: 6.0, 8: 2.0, 12: 6.0, 13: 4.0}

    assert cli_average.main([f"run_dir={run}", "best=2"]) == 0
    assert "step_4.pt, step_12.pt" in capsys.readouterr().out
    averaged = load_checkpoint(ckpts / "avg_best2.pt")["model"]
    a, b = (load_checkpoint(ckpts / f"step_{s}.pt")["model"] for s in (4, 12))
    for name, value in averaged.items():
        torch.testing.assert_close(value, (a[name] + b[name]) / 2, atol=1e-7, rtol=0, msg=name)
    assert cli_average.main([f"run_dir={run}", "last=3"]) == 0
    assert "step_8.pt, step_12.pt, step_13.pt" in capsys.readouterr().out


def test_epoch_ends_validate_when_eval_every_steps_is_null(overrides, tmp_path, monkeypatch):
    """eval_every_steps=null (the default): a validation at each epoch end (7 batches per
    epoch) and at the end, none in between; log_figures=false: no figure in TensorBoard."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    train(compose_config(overrides[:-1] + TINY_MODEL + TINY_TRAIN + [
        "train.batch_tokens=1024", "train.eval_every_steps=null", "train.max_steps=16",
        "train.log_figures=false", "search.max_len_b=2", "device=cpu", f"run_dir={run}"]))
    history = load_checkpoint(run / "checkpoints" / "last.pt")["trainer"]["history"]
    assert [h["step"] for h in history] == [7, 14, 16]
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert events.Tags()["images"] == [] and "valid/bleu" in events.Tags()["scalars"]


def test_cooldown_decays_the_lr_to_zero_at_the_end_of_the_step_or_time_budget(overrides, tmp_path,
                                                                              monkeypatch):
    """train.cooldown: the schedule times min(1, (1 - p) / c), p the budget's progress, read
    back from the lr the trainer logged for every step."""
    import math

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def logged_lrs(run):
        events = EventAccumulator(str(run / "tensorboard"))
        events.Reload()
        return [(e.step, e.value) for e in events.Scalars("train/lr")]

    def base(s):                                  # inverse_sqrt, lr 0.01, warmup 2
        return 0.01 * min(s / 2, math.sqrt(2 / s))

    args = overrides[:-1] + TINY_MODEL + TINY_TRAIN + ["train.warmup_steps=2",
                                                       "train.log_every_steps=1"]
    run = tmp_path / "steps"
    summary = train(compose_config(args + ["train.max_steps=8", "train.cooldown=0.5",
                                           f"run_dir={run}"]))
    assert summary["steps"] == 8
    expected = [base(s) * min(1.0, (1 - s / 8) / 0.5) for s in range(1, 9)]
    assert expected[:4] == pytest.approx([base(s) for s in range(1, 5)]) and expected[-1] == 0.0
    lrs = logged_lrs(run)
    assert [s for s, _ in lrs] == list(range(1, 9))
    assert [v for _, v in lrs] == pytest.approx(expected, rel=1e-6, abs=1e-12)

    # A one-minute budget on an injected clock that advances 6 s per optimizer step (and not
    # at all in setup or validation): the time check after step s finds s / 10 of the budget
    # used, so step s trains at progress (s - 1) / 10, and the budget ends after step 10.
    import types

    import nmt.training.harness as harness_mod
    import nmt.training.progress as progress_mod
    import nmt.training.trainer as trainer_mod

    clock = [0.0]
    real_step = trainer_mod.Trainer.train_step

    def step_taking_6_s(self, *args, **kwargs):
        clock[0] += 6.0
        return real_step(self, *args, **kwargs)

    for module in (harness_mod, progress_mod, trainer_mod):
        monkeypatch.setattr(module, "time", types.SimpleNamespace(
            **{**vars(module.time), "perf_counter": lambda: clock[0]}))
    monkeypatch.setattr(trainer_mod.Trainer, "train_step", step_taking_6_s)
    run = tmp_path / "minutes"
    summary = train(compose_config(args + ["train.max_minutes=1", "train.cooldown=0.9",
                                           "train.eval_every_steps=1000", f"run_dir={run}"]))
    assert summary["stop_reason"] == "max_minutes=1.0 reached" and summary["steps"] == 10
    expected = [base(s) * min(1.0, (1 - (s - 1) / 10) / 0.9) for s in range(1, 11)]
    assert expected[1] == pytest.approx(base(2)) and expected[2] < base(3)   # from 10% on
    lrs = logged_lrs(run)
    assert [s for s, _ in lrs] == list(range(1, 11))
    assert [v for _, v in lrs] == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_checkpoints_hold_plain_data_only(overrides, tmp_path):
    """torch.load(weights_only=True) reads a checkpoint: NumPy's RNG key is a list."""
    run = tmp_path / "run"
    train(compose_config(overrides[:-1] + TINY_MODEL + TINY_TRAIN + ["train.max_steps=2",
                                                                     f"run_dir={run}"]))
    ckpt = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["step"] == 2 and ckpt["config_version"] == CONFIG_VERSION
    assert isinstance(ckpt["rng"][0]["numpy"]["state"]["key"], list)



def test_cuda_graphs_only_for_one_rank_without_accumulation():
    """train.compile's mode: CUDA graphs need static shapes on CUDA, one rank, accum_steps 1."""
    from nmt.training.harness import compile_mode

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    t = SimpleNamespace(shape_buckets=8, accum_steps=1)
    assert compile_mode(t, cuda, 1) == "reduce-overhead"
    assert compile_mode(t, cpu, 1) is None
    assert compile_mode(t, cuda, 2) is None
    assert compile_mode(SimpleNamespace(shape_buckets=8, accum_steps=3), cuda, 1) is None
    assert compile_mode(SimpleNamespace(shape_buckets=0, accum_steps=1), cuda, 1) is None


def test_compiled_accumulation_gives_the_eager_gradients():
    """Two micro-batches of different shapes accumulated through the compiled model and the
    compiled loss (as train.compile with train.accum_steps=2 runs on the CPU: no CUDA graphs)
    give the gradients that the same micro-batches give eagerly."""
    from nmt.data.batching import Batch, make_src_batch, make_tgt_batch
    from nmt.training.loss import compiled_label_smoothed_nll, label_smoothed_nll, objective

    net, first = tiny_model_and_batch("transformer", dropout=0.0)
    src, src_mask = make_src_batch([[5, 9, 7, 6, 6], [12, 13]])
    tgt_in, tgt_out, _ = make_tgt_batch([[4, 6, 7, 8], [10]])
    batches = [first, Batch(src, src_mask, tgt_in, tgt_out, 9, 7)]
    t = SimpleNamespace(label_smoothing=0.1, alignment_loss_weight=0.0)
    grads = []
    for model, loss in ((net, label_smoothed_nll),
                        (net.compiled(None), compiled_label_smoothed_nll())):
        net.zero_grad()
        for batch in batches:
            objective(model, batch, t, cross_entropy=loss)[0].backward()
        grads.append({n: p.grad.clone() for n, p in net.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5, msg=name)
