"""Speed at scale: MFU in the log and summary (nmt.training.throughput), static batch shapes
under torch.compile, no host syncs between log steps, and the transformer_base/big presets."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL, TINY_TRAIN

from nmt.config import compose_config
from nmt.models.flops import attention_flops, flop_params
from nmt.runtime import compile_stats
from nmt.training import trainer as trainer_module
from nmt.training.throughput import Throughput
from nmt.training.trainer import Trainer, train


def test_throughput_counts_6n_per_real_token_against_the_peak_of_every_device():
    # A model nmt does not know: its 20 parameters per target token, 6 * 20 * tgt; two
    # batches of rows 0,1 and 2.
    meter = Throughput(torch.nn.Linear(4, 4), torch.device("cpu"), None, 2e-12, world_size=2)
    src, tgt = np.array([3, 4, 5]), np.array([2, 2, 6])
    flops = 6 * 20 * 10
    assert meter.add(src, tgt, [np.array([0, 1]), np.array([2])]) == flops
    assert meter.peak == 4.0                          # 2 FLOP/s per device x 2 devices
    figures = meter.take(seconds=180.0)
    assert meter.name == "mfu" and figures["mfu"] == pytest.approx(flops / 180 / 4)
    assert meter.flops == 0.0 and meter.take(1.0)["mfu"] == 0.0
    assert meter.describe({"model_tflops_per_s": 0.5, "mfu": 0.25}) == " | TFLOP/s 0.5 | mfu 0.25"
    assert meter.describe({"model_tflops_per_s": 0.5}) == " | TFLOP/s 0.5 | mfu n/a"
    assert meter.summary(1920.0, 180.0) == {"mfu": 2.667, "model_tflops_per_s": 1.067e-11,
                                            "peak_tflops": 4e-12, "steady": None}
    # The steady state: from the first log line (compile, graph capture before it) to the last.
    meter.mark(50, 1000, 1e3, 2.0)
    assert meter.steady() is None                     # nothing after the first log line yet
    meter.mark(100, 3000, 2.5e3, 3.0)
    meter.mark(150, 5000, 4e3, 4.5)                   # 4,000 tokens, 3,000 FLOPs in 2.5 s
    steady = {"from_step": 50, "to_step": 150, "tokens_per_s": 1600.0, "mfu": 300.0,
              "model_tflops_per_s": 1.2e-9}
    assert meter.steady() == steady and meter.summary(1920.0, 180.0)["steady"] == steady
    # A CPU without train.peak_tflops divides by a measured matmul rate: not called MFU.
    measured = Throughput(torch.nn.Linear(4, 4), torch.device("cpu"), None, None, world_size=1)
    assert measured.name == "matmul_util" and "matmul_util" in measured.take(1.0)


def test_attention_flops_by_hand():
    """Transformer: 12 d (L_enc S^2 + L_dec (T^2 + T S)) (PaLM, appendix B, per pair);
    the RNN: 6 (attention_dim + memory dim) T S; cross-attention K, V per source token."""
    from nmt.models import build_model

    model = build_model(compose_config(TINY_MODEL).model, 30, 30)   # d 16, 1 + 1 layers
    d, le, ld = model.d_model, len(model.encoder), len(model.decoder)
    src, tgt = np.array([3, 5]), np.array([4, 2])
    assert attention_flops(model, src, tgt) == 12 * d * (le * (9 + 25) + ld * (16 + 4 + 12 + 10))
    enc, dec = flop_params(model)
    kv = sum(p.numel() for layer in model.decoder for p in layer.cross_attn.kv_proj.parameters())
    assert kv == ld * (2 * d * d + 2 * d)
    assert enc == sum(p.numel() for m in (model.encoder, model.encoder_norm)
                      for p in m.parameters()) + kv


def _log_lines(run_dir, kind: str) -> list[str]:
    return [line for line in (run_dir / "train.log").read_text().splitlines()
            if f" {kind} | step" in line]


def test_every_log_line_and_the_summary_carry_model_flops_and_mfu(tiny_overrides, tmp_path):
    cfg = compose_config(tiny_overrides + TINY_MODEL + TINY_TRAIN + [
        "train.max_steps=4", "train.peak_tflops=1e-6"])     # 1 MFLOP/s: an MFU far above 0
    summary = train(cfg)
    lines = _log_lines(tmp_path / "run", "train")
    assert len(lines) == 2 and all(" | TFLOP/s " in x and " | mfu " in x for x in lines)   # given
    mfu = [float(x.split(" | mfu ")[1].split()[0]) for x in lines]
    assert all(m > 0 for m in mfu)
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["peak_tflops"] == 1e-6 and saved["mfu"] == summary["mfu"] > 0
    # The summary's figure is the FLOPs of all steps over the training time (no validation).
    assert saved["mfu"] == pytest.approx(saved["model_tflops_per_s"] / 1e-6, rel=1e-3)
    # The steady state: the steps after the first log line (step 2) up to the last (step 4).
    steady = saved["steady"]
    assert (steady["from_step"], steady["to_step"]) == (2, 4) and steady["tokens_per_s"] > 0
    assert steady["mfu"] == pytest.approx(steady["model_tflops_per_s"] / 1e-6, rel=1e-3)


def _shapes_per_epoch(cfg, epochs: int) -> list[set]:
    """The [B, S] and [B, T] shapes of each epoch's collated training batches."""
    tr = Trainer(cfg, trainer_module.dist.DistInfo(), torch.device("cpu"))
    tr.setup()
    out = []
    for epoch in range(epochs):
        split, batches = tr.epoch_data(epoch)
        out.append({(tuple(b.src.shape), tuple(b.tgt_in.shape))
                    for b in tr._collate_share(split, batches)})
        assert all(len(idx) * max(split.src_lens[idx].max(), split.tgt_lens[idx].max())
                   <= cfg.train.batch_tokens for idx in batches)
    tr.close()
    return out


def test_shape_buckets_give_every_epoch_the_same_few_shapes_within_the_token_budget(
        tiny_overrides):
    base = tiny_overrides + TINY_MODEL + TINY_TRAIN
    eager = _shapes_per_epoch(compose_config(base), 3)
    static = _shapes_per_epoch(compose_config(base + ["train.shape_buckets=3"]), 3)
    assert len(set().union(*eager)) > 6                 # one shape per few batches without
    assert static[0] == static[1] == static[2] and 1 <= len(static[0]) <= 9   # 3 x 3 at most
    for (rows, s_len), (t_rows, t_len) in static[0]:
        assert t_rows == rows == 256 // max(s_len, t_len)      # TINY_TRAIN: 256 tokens
        assert s_len % 8 == 0 and t_len % 8 == 0


def test_compiled_static_shapes_build_no_graph_after_the_first_epoch(tiny_overrides, tmp_path,
                                                                     monkeypatch):
    """``train.compile=true`` with ``train.shape_buckets``: Dynamo's graph count after epoch 1
    stays the same through epoch 2 (no recompiles), and the losses are eager's."""
    graphs_at = {}

    def record(self, epoch_end, stop_reason=""):
        graphs_at[self.state.epoch] = compile_stats()["graphs"]
        return original(self, epoch_end, stop_reason)

    original = Trainer._validate_and_save
    monkeypatch.setattr(Trainer, "_validate_and_save", record)
    base = tiny_overrides + TINY_MODEL + TINY_TRAIN + [
        "model.dropout=0.0", "model.attention_dropout=0.0", "model.activation_dropout=0.0",
        "train.max_epochs=2", "train.eval_every_steps=null", "train.shape_buckets=3",
        "train.batch_tokens=1024"]
    eager = train(compose_config(base + [f"run_dir={tmp_path / 'eager'}"]))
    before = compile_stats()["graphs"]
    graphs_at.clear()
    comp = train(compose_config(base + ["train.compile=true", f"run_dir={tmp_path / 'comp'}"]))
    assert comp["epochs_done"] == 2 and set(graphs_at) == {1, 2}
    assert graphs_at[2] == graphs_at[1] == comp["compile"]["graphs"] > before
    assert comp["last"]["loss"] == pytest.approx(eager["last"]["loss"], rel=1e-2)


SYNCING = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__")


def test_no_host_sync_inside_a_step_or_between_log_steps(tiny_overrides, monkeypatch):
    """Counts the calls that wait for the device (``.item()``, ``.tolist()``, ``.cpu()``, ...,
    and on CUDA every synchronizing call, ``torch.cuda.set_sync_debug_mode``): none inside a
    training step, none outside one but at log (every 3rd) and validation steps."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    calls: list[tuple[bool, int, str]] = []        # (inside a step, steps done, method)
    where = {"step": False, "trainer": None}
    for name in SYNCING:
        method = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _method=method, **kwargs):
            tr = where["trainer"]
            if tr is not None:
                calls.append((where["step"], tr.state.step, _name))
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    original = Trainer.train_step

    def step(self, *args, **kwargs):
        where["trainer"], where["step"] = self, True
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            try:
                return original(self, *args, **kwargs)
            finally:
                if device == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
                where["step"] = False
                calls.extend((True, self.state.step, f"{w.filename}:{w.lineno}") for w in caught
                             if "synchroniz" in str(w.message))

    monkeypatch.setattr(Trainer, "train_step", step)
    summary = train(compose_config(tiny_overrides + TINY_MODEL + TINY_TRAIN + [
        f"device={device}", "train.log_every_steps=3", "train.eval_every_steps=1000",
        "train.max_steps=7", "train.batch_tokens=128"]))
    assert summary["steps"] == 7 and summary["epochs_done"] == 0    # no epoch-end validation
    assert [c for c in calls if c[0]] == []
    assert {c[1] for c in calls} <= {3, 6, 7}       # log steps 3 and 6; the last validates


@pytest.mark.parametrize("preset", ["transformer_base", "transformer_big"])
def test_wmt_presets_take_two_accumulated_steps_on_cpu(tiny_overrides, preset):
    """``model=<preset>`` (and its ``train=`` recipe, chosen with it): Vaswani Table 3 shapes,
    Adam(0.9, 0.98), warmup 4,000, 3 accumulated batches per step (about 25k tokens per
    update at the preset's batch_tokens; 64 here: the tiny corpus has batches, big is fast)."""
    cfg = compose_config(tiny_overrides + [f"model={preset}", "train.batch_tokens=64",
                                           "train.precision=fp32", "device=cpu"])
    big = preset == "transformer_big"
    assert (cfg.model.d_model, cfg.model.heads, cfg.model.ff_dim) == \
        ((1024, 16, 4096) if big else (512, 8, 2048))
    assert (cfg.model.encoder_layers, cfg.model.decoder_layers, cfg.model.dropout) == \
        (6, 6, 0.3 if big else 0.1)
    assert cfg.model.tie_embeddings and list(cfg.train.betas) == [0.9, 0.98]
    assert cfg.train.warmup_steps == 4000 and cfg.train.accum_steps == 3
    assert 24000 <= compose_config([f"model={preset}"]).train.batch_tokens * 3 <= 26000
    tr = Trainer(cfg, trainer_module.dist.DistInfo(), torch.device("cpu"))
    tr.setup()
    split, batches = tr.epoch_data(0)
    before = [p.detach().clone() for p in tr.params]
    for k in range(2):
        sums, grad_norm, tokens = tr.train_step(batches[3 * k: 3 * k + 3], split=split)
        tr.state.step += 1
        assert tokens == sum(int(split.tgt_lens[i].sum()) for i in batches[3 * k: 3 * k + 3])
        assert all(torch.isfinite(v) for v in sums.values()) and float(grad_norm) > 0
    assert tr.schedule.last_lr == pytest.approx(cfg.train.lr * 2 / 4000)   # linear warmup
    assert all(not torch.equal(a, p) for a, p in zip(before, tr.params, strict=True))
    tr.close()
