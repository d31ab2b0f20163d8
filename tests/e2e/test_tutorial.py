"""docs/tutorial.md runs: every ```python block, in order, in one namespace.

The blocks run as written, with one change for speed: ``nmt.train`` gets extra overrides
that shrink the training to a tiny model on a generated corpus (and a private run_dir),
and ``runs/tutorial`` points there.
"""

from __future__ import annotations

import re

import pytest
from conftest import REPO_ROOT, write_corpus

import nmt

pytestmark = pytest.mark.slow

TUTORIAL = REPO_ROOT / "docs" / "tutorial.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(encoding="utf-8"), re.S)


def test_tutorial_code_blocks_run(tmp_path, monkeypatch):
    blocks = python_blocks()
    assert len(blocks) >= 8
    corpus = write_corpus(tmp_path / "corpus", {"train": 200, "val": 12, "test_2016_flickr": 12})
    run_dir = tmp_path / "tutorial"
    real_train = nmt.train
    seen: list[list[str]] = []

    def small_train(overrides):
        seen.append(list(overrides))
        return real_train([o for o in overrides if not o.startswith("run_dir=")] + [
            f"data.root={corpus}", f"data.cache_dir={tmp_path / 'cache'}",
            "data.tokenizer.vocab_size=100", "model.d_model=16", "model.heads=2",
            "model.ff_dim=32", "model.encoder_layers=1", "model.decoder_layers=1",
            "train.max_steps=6", "train.batch_tokens=400", "search.max_len_b=5",
            "device=cpu", f"run_dir={run_dir}"])

    monkeypatch.setattr(nmt, "train", small_train)
    namespace: dict = {}
    for i, block in enumerate(blocks):
        code = block.replace("runs/tutorial", str(run_dir))
        exec(compile(code, f"{TUTORIAL}:block{i + 1}", "exec"), namespace)   # noqa: S102
    assert seen and "train.max_minutes=5" in seen[0]
    assert (run_dir / "alignment.png").is_file()
    assert len(namespace["result"].hypotheses) == 3
