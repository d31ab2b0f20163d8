"""Config composition and validation: defaults in one place, clear errors for bad values."""

import pytest
from omegaconf.errors import ReadonlyConfigError

from nmt.config import ConfigError, compose_config


def test_defaults_compose_and_follow_the_model():
    cfg = compose_config([])
    assert cfg.model.name == "transformer"
    assert cfg.train.schedule == "inverse_sqrt"  # train/transformer.yaml follows model=transformer
    assert list(cfg.train.betas) == [0.9, 0.98]
    rnn = compose_config(["model=rnn"])
    assert rnn.model.name == "rnn"
    assert rnn.train.schedule == "plateau"
    assert rnn.run_dir == "runs/rnn_de_en"


@pytest.mark.parametrize("direction", ["de_en", "en_de", "fr_en", "en_fr", "cs_en", "en_cs"])
def test_every_multi30k_direction_composes(direction):
    cfg = compose_config([f"data=multi30k_{direction}"])
    src, tgt = direction.split("_")
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == (src, tgt)
    assert cfg.data.test_split == "test_2016_flickr"


def test_data_root_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("NMT_DATA_ROOT", "/some/where")
    assert compose_config([]).data.root == "/some/where"
    assert compose_config(["data.root=elsewhere"]).data.root == "elsewhere"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=foo"], "Could not find 'model/foo'"),
        (["train.max_steps=abc"], "train.max_steps"),
        (["model.heads=3"], "not divisible by model.heads=3"),
        (["model.encoder_layers=0"], "model.encoder_layers=0 is impossible"),
        (["model=rnn", "model.decoder_hidden=0"], "model.decoder_hidden=0 is impossible"),
        (["data.tokenizer.joint=false"], "needs one vocabulary for both sides"),
        (["train.schedule=cosine"], "train.schedule='cosine' is not one of"),
        (["train.label_smoothing=1.5"], "train.label_smoothing=1.5 must lie in [0, 1)"),
        (["search.n_best=3"], "search.n_best=3 exceeds search.beam_size=1"),
        (["train.nokey=1"], "train.nokey"),
        (["train.ema_decay=1.0"], "train.ema_decay=1.0 must lie in (0, 1)"),
        (["train.ema_decay=0"], "train.ema_decay=0.0 must lie in (0, 1)"),
        (["train.keep_best=-1"], "train.keep_best=-1 is impossible"),
        (["data.tokenizer.sampling_alpha=-0.1"],
         "data.tokenizer.sampling_alpha=-0.1 is impossible"),
        (["data.tokenizer.type=bpe", "data.tokenizer.sampling_alpha=1.0"],
         "must lie in [0, 1) with data.tokenizer.type=bpe"),
        (["data.tokenizer.nbest_size=1"], "data.tokenizer.nbest_size=1 samples nothing"),
    ],
)
def test_bad_values_name_the_key(overrides, message):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_config_is_read_only():
    cfg = compose_config([])
    with pytest.raises(ReadonlyConfigError):
        cfg.train.lr = 1.0
