"""Config composition and validation: defaults in one place, clear errors for bad values."""

import pytest
from omegaconf.errors import ReadonlyConfigError

from nmt.config import ConfigError, compose_config, validate_search


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


@pytest.mark.parametrize(("preset", "pairs", "run_dir"), [
    ("multi30k_multi", ["de-en", "fr-en", "cs-en", "en-de", "en-fr", "en-cs"],
     "runs/transformer_de-en+fr-en+cs-en+en-de+en-fr+en-cs"),
    ("multi30k_x_en", ["de-en", "fr-en", "cs-en"], "runs/transformer_de-en+fr-en+cs-en")])
def test_multilingual_presets(preset, pairs, run_dir):
    cfg = compose_config([f"data={preset}"])
    assert list(cfg.data.pairs) == pairs and (cfg.data.src_lang, cfg.data.tgt_lang) == ("de", "en")
    assert (cfg.data.lang_tag, cfg.data.sampling_temperature, cfg.run_dir) == \
        ("source", 5.0, run_dir)
    assert compose_config([]).data.pairs is None                 # bilingual by default
    assert compose_config(["data.pairs=[de-en]"]).run_dir == "runs/transformer_de_en"


def test_data_root_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("NMT_DATA_ROOT", "/some/where")
    assert compose_config([]).data.root == "/some/where"
    assert compose_config(["data.root=elsewhere"]).data.root == "elsewhere"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["train.max_steps=abc"], "train.max_steps"),
        (["data.tokenizer.joint=false"], "data.tokenizer.joint"),
        (["train.schedule=cosine"], "train.schedule"),
        (["train.label_smoothing=1.5"], "train.label_smoothing"),
        (["search.n_best=3"], "search.n_best"),
        (["train.nokey=1"], "train.nokey"),
        (["train.ema_decay=1.0"], "train.ema_decay"),
        (["train.ema_decay=0"], "train.ema_decay"),
        (["train.keep_best=-1"], "train.keep_best"),
        (["train.eps=0"], "train.eps"),
        (["train.plateau_factor=1.5"], "train.plateau_factor"),
        (["train.consistency=rdop"], "train.consistency"),
        (["train.consistency_alpha=-1"], "train.consistency_alpha"),
        (["train.cutoff_p=1.0"], "train.cutoff_p"),
        (["data.tokenizer.sampling_alpha=-0.1"], "data.tokenizer.sampling_alpha"),
        (["data.tokenizer.type=bpe", "data.tokenizer.sampling_alpha=1.0"],
         "data.tokenizer.sampling_alpha"),
        (["data.tokenizer.nbest_size=1"], "data.tokenizer.nbest_size"),
        (["data.src_lang=en"], "data.src_lang"),
        (["device=tpu"], "device"),
        (["data.pairs=[de_en]"], "data.pairs"),
        (["data.pairs=[de-de]"], "data.pairs"),
        (["data.pairs=[de-en,fr-en,de-en]"], "data.pairs"),
        (["data.pairs=[]"], "data.pairs"),
        (["data.pairs=[fr-en,cs-en]"], "data.pairs"),            # no default direction de-en
        (["data.pairs=[de-en,fr-en]", "data.tokenizer.joint=false", "model.tie_embeddings=false"],
         "data.tokenizer.joint"),
        (["data.pairs=[de-en,fr-en]", "data.alignments=links.txt",
          "train.alignment_loss_weight=0.1", "model.alignment_heads=1"], "guided alignment"),
        (["data.pairs=[de-en,fr-en]", "data.tokenizer.sampling_alpha=0.1"],
         "data.tokenizer.sampling_alpha"),
        (["data.lang_tag=middle"], "data.lang_tag"),
        (["data.sampling_temperature=0"], "data.sampling_temperature"),
        (["data.tokenizer.character_coverage=0.9"], "data.tokenizer.character_coverage"),
        (["data.tokenizer.character_coverage=1.5"], "data.tokenizer.character_coverage"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides)
    assert key in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("value", "bound"), [("nan", "a finite number >= 0"), ("-0.5", ">= 0"),
                                              ("inf", "a finite number >= 0")])
def test_length_penalty_is_finite_and_not_negative(value, bound):
    with pytest.raises(ConfigError) as err:
        compose_config([f"search.length_penalty={value}"])
    assert str(err.value) == f"search.length_penalty={value} must be {bound}."
    assert validate_search({**compose_config([]).search, "length_penalty": 0.0}).length_penalty == 0


@pytest.mark.parametrize("key, bound", [
    ("train.lr", "> 0"), ("train.max_minutes", "> 0"), ("train.clip_grad_norm", ">= 0"),
    ("data.max_len_ratio", "> 0"), ("data.sampling_temperature", "> 0"),
    ("data.tokenizer.sampling_alpha", ">= 0"),
    ("data.tokenizer.character_coverage", "in [0.98, 1]")])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_nan_and_inf_are_refused_naming_the_key(key, bound, value):
    with pytest.raises(ConfigError) as err:
        compose_config([f"{key}={value}"])
    assert str(err.value).startswith(f"{key}={value} must be a finite number {bound}")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("overrides", "alpha"), [
    ([], None),                                                    # no regulariser: no weight
    (["train.consistency=rdrop"], 5.0),                            # R-Drop, eq. 3
    (["train.consistency=simcut"], 3.0),                           # SimCut, IWSLT
    (["data=multi30k_multi", "train.consistency=crossconst"], 0.25),   # CrossConST's authors
    (["data=multi30k_multi", "train.consistency=crossconst", "train.consistency_alpha=1.5"], 1.5),
])
def test_consistency_alpha_follows_the_method_unless_set(overrides, alpha):
    assert compose_config(overrides).train.consistency_alpha == alpha


def test_unknown_group_option_is_a_config_error():
    with pytest.raises(ConfigError, match="model/foo"):
        compose_config(["model=foo"])


def test_config_is_read_only():
    cfg = compose_config([])
    with pytest.raises(ReadonlyConfigError):
        cfg.train.lr = 1.0
