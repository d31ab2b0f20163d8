"""Experiments: Hydra-native CLI (sweeps, --cfg, --info, --help), run-directory rules,
fine-tuning, tokenizer reuse, safe and upgradable checkpoints, summaries across resumes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, write_corpus
from omegaconf import OmegaConf

from nmt.cli.train import main
from nmt.checkpoint import upgrade_config
from nmt.config import ConfigError, compose_config
from nmt.inference.loader import load_for_inference
from nmt.checkpoint import CheckpointError, load_checkpoint

TINY = ["model.d_model=16", "model.heads=2", "model.ff_dim=32", "model.encoder_layers=1",
        "model.decoder_layers=1", "train.batch_tokens=256", "train.log_every_steps=2",
        "train.warmup_steps=4", "train.lr=0.01", "search.max_len_b=5", "search.max_len_a=1.0",
        "device=cpu"]
GOLDEN = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def base(tiny_corpus, cache) -> list[str]:
    return [f"data.root={tiny_corpus}", f"data.cache_dir={cache}", "data.test_split=test",
            "data.tokenizer.vocab_size=120", *TINY]


def _files(run: Path) -> dict[str, tuple[float, str]]:
    """Every file under ``run`` with its mtime and sha256."""
    return {str(p.relative_to(run)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(run.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------ Hydra CLI
def test_multirun_sweep_gives_one_directory_per_job_and_a_table(base, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    status = main(["-m", *base, "train.max_steps=2", "train.eval_every_steps=2",
                   "train.lr=0.001,0.002", "train.warmup_steps=2,4", f"hydra.sweep.dir={sweep}"])
    assert status == 0
    out = capsys.readouterr().out
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["train.lr=0.001,train.warmup_steps=2", "train.lr=0.001,train.warmup_steps=4",
                    "train.lr=0.002,train.warmup_steps=2", "train.lr=0.002,train.warmup_steps=4"]
    for name in jobs:
        job = sweep / name
        cfg = OmegaConf.load(job / "config.yaml")
        lr, warmup = (kv.split("=")[1] for kv in name.split(","))
        assert cfg.run_dir == str(job)
        assert (cfg.train.lr, cfg.train.warmup_steps) == (float(lr), int(warmup))
        overrides = list(OmegaConf.load(job / ".hydra" / "overrides.yaml"))
        assert f"train.lr={lr}" in overrides and f"train.warmup_steps={warmup}" in overrides
        assert json.loads((job / "summary.json").read_text())["steps"] == 2
    # The table at the end of the sweep: one row per job, varying overrides in the rows.
    table = out[out.index("| job |"):].splitlines()
    assert len([row for row in table if row.startswith("| train.lr=")]) == 4
    assert "| train.lr=0.002 train.warmup_steps=4 | 2 |" in out
    again = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "sweep_table.py"), str(sweep)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "| train.lr=0.001 train.warmup_steps=2 | 2 |" in again.stdout


def test_cfg_info_and_help_behave_as_hydra_documents(capsys):
    assert main(["--cfg", "job", "model=rnn", "train.lr=0.005"]) == 0
    job = OmegaConf.create(capsys.readouterr().out)
    assert job.model.name == "rnn" and job.train.lr == 0.005 and "hydra" not in job
    assert main(["--cfg", "hydra"]) == 0
    assert "run:" in capsys.readouterr().out
    assert main(["--info", "defaults"]) == 0
    assert "nmt_train" in capsys.readouterr().out
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "model: rnn, transformer" in out and "multi30k_fr_en" in out
    assert "train.resume=force" in out


@pytest.mark.parametrize(("args", "message"), [
    (["train.nokey=1"], "Could not override 'train.nokey'"),
    (["+train.nokey=1"], "train.nokey is not a setting"),
    (["+nokey=1"], "nokey is not a setting"),
    (["train.betas=[0.9,1.5]"], "train.betas=[0.9, 1.5] must hold two numbers in [0, 1)"),
    (["train.eps=0"], "train.eps=0.0 is impossible"),
    (["train.plateau_factor=1.5"], "train.plateau_factor=1.5 must lie in (0, 1)"),
    (["train.resume=maybe"], "train.resume='maybe' is not one of auto, force"),
])
def test_user_errors_are_one_paragraph_and_status_2(args, message, capsys, tmp_path):
    assert main([*args, f"run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt-train: error:") and message in " ".join(err.split())
    assert "Traceback" not in err


def test_compose_config_keeps_the_callers_hydra_context():
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_module(config_module="nmt.configs", version_base="1.3"):
        assert compose_config(["model=rnn"]).model.name == "rnn"
        assert GlobalHydra.instance().is_initialized()
        assert compose(config_name="config", overrides=["model=rnn"]).model.name == "rnn"


# ------------------------------------------------------------------- run directories
def test_changed_setting_is_refused_before_anything_is_written(base, tmp_path, capsys):
    run = tmp_path / "run"
    args = [*base, "train.max_steps=2", f"run_dir={run}"]
    assert main(args) == 0
    before = _files(run)
    assert main([*args, "train.lr=0.02", "model.dropout=0.3"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "holds a run with other settings" in err
    assert "train.lr: checkpoint has 0.01, now 0.02" in err and "model.dropout: checkpoint has 0.2, now 0.3" in err
    assert _files(run) == before


def test_finished_run_rerun_changes_no_file(base, tmp_path, capsys):
    for stop in (["train.max_steps=3"], ["train.max_minutes=1e-6"]):
        run = tmp_path / stop[0].split("=")[0]
        args = [*base, *stop, f"run_dir={run}"]
        assert main(args) == 0
        before = _files(run)
        assert main(args) == 0                            # finished: nothing to do
        assert _files(run) == before
        assert "nothing to do" in capsys.readouterr().err
    # train.resume=force with a new stop setting trains on; the summary spans both segments.
    run = tmp_path / "train.max_steps"
    assert main([*base, "train.max_steps=5", "train.resume=force", f"run_dir={run}"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 5 and len(summary["segments"]) == 2
    assert [s["end_step"] for s in summary["segments"]] == [3, 5]
    assert summary["segments"][1]["command"].endswith("train.resume=force run_dir=" + str(run))
    assert summary["train_tokens"] > 0 and summary["train_time_s"] > 0
    assert summary["machine"]["cores"] == os.cpu_count() and summary["date"][:4].isdigit()


# ------------------------------------------------------------------------ checkpoints
def test_checkpoints_load_with_weights_only(base, tmp_path):
    run = tmp_path / "run"
    assert main([*base, "train.max_steps=2", f"run_dir={run}"]) == 0
    ckpt = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["step"] == 2 and ckpt["config_version"] == 1
    assert isinstance(ckpt["rng"][0]["numpy"]["state"]["key"], list)


def test_checkpoint_with_code_is_never_unpickled(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch pwned",))

    path = tmp_path / "evil.pt"
    torch.save({"version": 1, "model": Evil()}, path)
    with pytest.raises(CheckpointError, match="holds objects other than plain data"):
        load_checkpoint(path)
    assert not Path("pwned").exists()


def test_checkpoint_of_2026_11_22_loads_and_translates():
    from nmt.inference.search import translate

    expected = json.loads(GOLDEN.with_suffix(".json").read_text(encoding="utf-8"))
    model, tok, cfg = load_for_inference(GOLDEN)
    assert cfg.model.d_model == 32 and cfg.train.resume == "auto"   # a key added since: defaulted
    for name, beam in (("greedy", 1), ("beam3", 3)):
        search = {"beam_size": beam, "length_penalty": 1.0, "max_len_a": 1.5, "max_len_b": 10,
                  "batch_sentences": 10, "n_best": 1}
        hyps = translate(model, tok.encode_src_batch(expected["source"]), search, "cpu")
        assert [tok.decode_tgt(h[0].tokens) for h in hyps] == expected[name]
        assert [h[0].score for h in hyps] == pytest.approx(expected[f"{name}_scores"], abs=1e-3)


def test_upgrade_config_fills_new_keys_and_runs_migrations(monkeypatch):
    import nmt.checkpoint as config

    saved = OmegaConf.to_container(compose_config(["model=rnn"]))
    del saved["model"]["maxout"], saved["train"]["init_from"]       # "older" checkpoint
    for key in ("ema_decay", "keep_best"):                          # added later
        del saved["train"][key]
    del saved["data"]["tokenizer"]["sampling_alpha"], saved["data"]["tokenizer"]["nbest_size"]
    cfg = upgrade_config(saved)
    assert cfg.model.maxout is True and cfg.train.init_from is None
    assert (cfg.train.ema_decay, cfg.train.keep_best) == (None, 5)
    assert (cfg.data.tokenizer.sampling_alpha, cfg.data.tokenizer.nbest_size) == (None, -1)
    # The Transformer's default is a moving average now; a config from before the key ran
    # without one, and says so after the upgrade (a config that sets it keeps its value).
    transformer = OmegaConf.to_container(compose_config(["model=transformer"]))
    assert transformer["train"]["ema_decay"] == 0.999
    assert upgrade_config(transformer).train.ema_decay == 0.999
    del transformer["train"]["ema_decay"]
    assert upgrade_config(transformer).train.ema_decay is None
    # A renamed key: version 1 -> 2 moves train.lr to train.peak_lr (simulated).
    monkeypatch.setattr(config, "CONFIG_VERSION", 2)
    monkeypatch.setitem(config.MIGRATIONS, 1, lambda t: {**t, "train": {
        **{k: v for k, v in t["train"].items() if k != "lr"}, "peak_lr": t["train"]["lr"]}})

    def defaults_v2(name):
        tree = OmegaConf.to_container(compose_config([f"model={name}"], validate_fn=None))
        tree["train"]["peak_lr"] = tree["train"].pop("lr")
        cfg = OmegaConf.create(tree)
        OmegaConf.set_struct(cfg, True)
        return cfg

    monkeypatch.setattr(config, "_defaults_for", defaults_v2)
    with pytest.raises(ConfigError, match="train.lr, which this nmt does not know"):
        upgrade_config({**saved, "train": {**saved["train"], "lr": 0.5}}, version=2)
    assert upgrade_config({**saved, "train": {**saved["train"], "lr": 0.5}}, 1).train.peak_lr == 0.5
    with pytest.raises(ConfigError, match="version 3, newer"):
        upgrade_config(saved, version=3)


# ---------------------------------------------------------------- fine-tuning, tokenizer
def test_fine_tune_from_a_checkpoint_on_a_second_corpus(base, tmp_path, capsys):
    first = tmp_path / "first"
    assert main([*base, "train.max_steps=3", f"run_dir={first}"]) == 0
    second_corpus = write_corpus(tmp_path / "second", {"train": 60, "val": 8, "test": 8})
    for name in ("train", "val"):                    # other sentences than the first corpus
        text = (second_corpus / f"{name}.de").read_text(encoding="utf-8").replace("Hund", "Pferd")
        (second_corpus / f"{name}.de").write_text(text, encoding="utf-8")
    tuned = tmp_path / "tuned"
    args = [a for a in base if not a.startswith("data.root=")] + [
        f"data.root={second_corpus}", f"train.init_from={first / 'checkpoints' / 'last.pt'}",
        "train.max_steps=2", f"run_dir={tuned}"]
    assert main(args) == 0
    start, done = load_checkpoint(first / "checkpoints" / "last.pt"), \
        load_checkpoint(tuned / "checkpoints" / "last.pt")
    assert done["step"] == 2                          # fresh step count and schedule
    assert done["tokenizer"] == start["tokenizer"]    # the checkpoint's tokenizer, not a new one
    assert any(not torch.equal(done["model"][k], start["model"][k]) for k in start["model"])
    assert "fine-tuning: weights and tokenizer from" in (tuned / "train.log").read_text()
    # Another architecture cannot start from those weights.
    assert main([*args[:-1], "model.ff_dim=64", f"run_dir={tmp_path / 'bad'}"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "its model config differs" in err and "model.ff_dim: checkpoint has 32, now 64" in err


def test_tokenizer_model_reuses_a_trained_tokenizer(base, tmp_path, capsys):
    first = tmp_path / "first"
    assert main([*base, "train.max_steps=1", f"run_dir={first}"]) == 0
    first_tok = load_checkpoint(first / "checkpoints" / "last.pt")["tokenizer"]
    for given in (first / "tokenizer", first / "tokenizer" / "spm.model"):
        run = tmp_path / f"reuse_{given.name}"
        assert main([*base, "train.max_steps=1", f"data.tokenizer.model={given}", f"run_dir={run}"]) == 0
        tok = load_checkpoint(run / "checkpoints" / "last.pt")["tokenizer"]
        assert tok["src_model"] == first_tok["src_model"]
    assert main([*base, "train.max_steps=1", f"data.tokenizer.model={tmp_path / 'none.model'}",
                 f"run_dir={tmp_path / 'x'}"]) == 2
    assert "data.tokenizer.model=" in capsys.readouterr().err


# --------------------------------------------------------------------------- DDP
def test_user_error_on_rank_0_ends_every_rank(tiny_overrides, tmp_path):
    from nmt.training.distributed import free_port

    env = {**os.environ, "OMP_NUM_THREADS": "1", "CI": "1", "GLOO_SOCKET_IFNAME": "lo"}
    # Rank 0 finds the corpus missing while preparing data; rank 1 waits for it.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "nmt.cli.train",
           *[o for o in tiny_overrides if not o.startswith("data.root")], *TINY,
           f"data.root={tmp_path / 'missing'}", "train.max_steps=1", f"run_dir={tmp_path / 'ddp'}"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.count("nmt-train: error:") == 1 and "NMT_DATA_ROOT" in proc.stderr


def test_checkpoint_written_before_2026_11_22_still_loads(tmp_path):
    """Older checkpoints stored NumPy's RNG state as an array: loaded under an allowlist of
    NumPy's array reconstruction (data, not code), and the state restores."""
    import random

    import numpy as np

    from nmt.checkpoint import set_rng_state

    path = tmp_path / "old.pt"
    torch.save({"version": 1, "model": {"w": torch.zeros(2)},
                "rng": [{"python": random.getstate(), "numpy": np.random.get_state(),
                         "torch": torch.get_rng_state()}]}, path)
    state = load_checkpoint(path)["rng"][0]
    set_rng_state(state)
    first = np.random.rand()
    set_rng_state(state)
    assert np.random.rand() == first
