"""nmt/cli/common.py in process: user errors, search settings, engine and checkpoint keys."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from nmt.cli.common import (
    check_engine,
    checkpoint_paths,
    decode_settings,
    exit_on_user_error,
    print_error,
    run_task,
    user_error_types,
)
from nmt.config import ConfigError, SamplingSchema, SearchSchema, compose_config
from nmt.data.corpus import CorpusError


def _evaluate_cfg(*overrides: str):
    return compose_config(list(overrides), config_name="evaluate", validate_fn=None)


def test_user_errors_exit_2_with_one_paragraph_and_bugs_propagate(capsys):
    assert {ConfigError, CorpusError} <= set(user_error_types())
    for err in (ConfigError("beam_size=0 must be >= 1"), CorpusError("a.de, line 3: bad")):
        def fail(err=err):
            raise err

        assert exit_on_user_error("nmt-x", fail) == 2
        printed = capsys.readouterr().err
        assert printed.startswith("nmt-x: error:") and "Traceback" not in printed
    assert exit_on_user_error("nmt-x", lambda: None) == 0

    def boom(cfg):
        raise RuntimeError("bug")

    with pytest.raises(RuntimeError, match="bug"):
        run_task(OmegaConf.create({}), boom, prog="x", validate_fn=None)


def test_a_run_validates_its_config_once(monkeypatch, tmp_path, capsys):
    """run_app validates a plain run and its task function takes that config on (nmt-evaluate:
    one validate_decoding); each job of a sweep (-m) is validated in its task function."""
    from nmt.cli import common
    from nmt.cli import evaluate as cli_evaluate

    checks, runs, decoding = [], [], []
    check, validate_decoding = cli_evaluate._check, common.validate_decoding
    monkeypatch.setattr(cli_evaluate, "_check", lambda cfg: checks.append(cfg) or check(cfg))
    monkeypatch.setattr(cli_evaluate, "_run", runs.append)
    monkeypatch.setattr(common, "validate_decoding",
                        lambda settings: decoding.append(1) or validate_decoding(settings))
    assert cli_evaluate.main(["checkpoint=x.pt", "beam_size=3"]) == 0
    assert (len(checks), len(decoding), len(runs)) == (1, 1, 1) and runs[0] is checks[0]
    assert runs[0].beam_size == 3 and common._checked is None
    monkeypatch.chdir(tmp_path)
    assert cli_evaluate.main(["-m", "checkpoint=x.pt", "beam_size=1,2",
                              f"hydra.sweep.dir={tmp_path / 'sweep'}"]) == 0
    assert [r.beam_size for r in runs[1:]] == [1, 2] and len(checks) == len(decoding) == 3
    assert cli_evaluate.main(["checkpoint=x.pt", "beam_size=0"]) == 2   # before Hydra runs
    assert "beam_size=0 must be" in capsys.readouterr().err and len(runs) == 3


def test_checkpoint_error_is_a_user_error_once_its_module_is_loaded():
    from nmt.checkpoint import CheckpointError

    assert CheckpointError in user_error_types()


def test_print_error_keeps_long_paths_whole(capsys):
    path = "/tmp/pytest-of-someone/" + "x" * 120 + "/out.txt"
    print_error("nmt-x", f"out={path}:\n  cannot be written")
    assert path in capsys.readouterr().err


def test_decode_settings_are_the_schema_fields_with_the_yaml_defaults():
    from nmt.inference.translator import search_settings

    cfg = _evaluate_cfg("checkpoint=x.pt", "beam_size=3", "top_p=0.5")
    settings = decode_settings(cfg)
    names = [f.name for schema in (SearchSchema, SamplingSchema)
             for f in dataclasses.fields(schema)]
    # decoding=mbr: nmt.extras.decoding.mbr
    assert list(settings) == names and cfg.decoding == "search"
    assert settings["beam_size"] == 3 and settings["top_p"] == 0.5
    defaults = search_settings()                    # the Python API's: the same YAML files
    assert {k: settings[k] for k in ("n_best", "seed", "temperature")} == \
        {k: defaults[k] for k in ("n_best", "seed", "temperature")}
    search_names = [f.name for f in dataclasses.fields(SearchSchema)]
    assert list(decode_settings(cfg, (SearchSchema,))) == search_names


def test_checkpoint_paths_one_file_or_an_ensemble():
    assert checkpoint_paths(_evaluate_cfg("checkpoint=a.pt")) == "a.pt"
    assert checkpoint_paths(_evaluate_cfg("checkpoint=[a.pt]")) == "a.pt"
    assert checkpoint_paths(_evaluate_cfg("checkpoint=[a.pt,b.pt]")) == ["a.pt", "b.pt"]
    with pytest.raises(ConfigError, match="checkpoint"):
        checkpoint_paths(_evaluate_cfg("checkpoint=[]"))


@pytest.mark.parametrize("overrides, key", [
    ([], "checkpoint"),
    (["engine=ctranslate2"], "model_dir"),
    (["engine=ctranslate2", "model_dir=d", "checkpoint=x.pt"], "checkpoint"),
    (["engine=ctranslate2", "model_dir=d", "weights=trained"], "weights"),
    (["checkpoint=x.pt", "model_dir=d"], "model_dir"),
])
def test_check_engine_names_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key):
        check_engine(_evaluate_cfg(*overrides))


def test_check_engine_accepts_either_input():
    check_engine(_evaluate_cfg("checkpoint=x.pt"))
    check_engine(_evaluate_cfg("engine=ctranslate2", "model_dir=d"))
