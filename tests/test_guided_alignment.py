"""Guided alignment: the loss, the word links, the supervised heads, the teacher, the checks.

The loss on a hand-computed case, word links read beside the corpus and mapped to subwords in
batches, the supervised heads as the model's alignment, the unaligned threshold, the eflomal step on
a toy corpus, the checks of the settings."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL

from nmt.checkpoint import upgrade_config
from nmt.config import ConfigError, compose_config, to_plain
from nmt.data.batching import collate
from nmt.data.corpus import CorpusError
from nmt.data.links import AlignmentFormatError, piece_links, subword_links, with_links, word_ids
from nmt.data.pipeline import prepare_data
from nmt.extras.tools.word_alignment import ForcedAlignment, extract_links, word_links
from nmt.models import build_model
from nmt.training.loss import alignment_loss

GUIDED = ["train.alignment_loss_weight=0.05", "model.alignment_heads=1"]


# ------------------------------------------------------------------ the loss
def test_alignment_loss_on_a_hand_computed_2x3_case():
    # one sentence, 2 target positions x 3 source positions: target 0 linked to source 0,
    # target 1 to sources 1 and 2 (gold 1/2 each); a second row has no links at all.
    attention = torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.6, 0.3]],
                              [[0.2, 0.2, 0.6], [0.3, 0.3, 0.4]]], requires_grad=True)
    links = torch.tensor([[0, 0, 0], [0, 1, 1], [0, 1, 2]])
    loss = alignment_loss(attention, links)
    expected = -(math.log(0.5) + 0.5 * math.log(0.6) + 0.5 * math.log(0.3))
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    grad = torch.zeros(2, 2, 3)   # d/dA of -G log A = -G / A on the linked cells, 0 elsewhere
    grad[0, 0, 0], grad[0, 1, 1], grad[0, 1, 2] = -1 / 0.5, -0.5 / 0.6, -0.5 / 0.3
    torch.testing.assert_close(attention.grad, grad)
    # a head equal to the gold costs the gold's entropy (log 2 for target 1's two links); no
    # links, no loss; bf16 weights are computed in float32
    perfect = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]]])
    assert alignment_loss(perfect, links).item() == pytest.approx(math.log(2), rel=1e-6)
    assert alignment_loss(attention, torch.zeros(0, 3, dtype=torch.long)).item() == 0.0
    assert alignment_loss(attention.bfloat16(), links).dtype == torch.float32


# ------------------------------------------------------------------ word links -> subwords
def test_word_links_map_to_every_subword_pair_of_the_linked_words():
    src = ["▁Ein", "▁Fahr", "rad", "fahrer", "▁", "(", "x", "▁)"]   # words 0 1 1 1 2 2 2 3
    tgt = ["▁A", "▁cyc", "list", "▁(x)"]                             # words 0 1 1 2
    cells = subword_links({(0, 0), (1, 1), (2, 2)}, word_ids(src), word_ids(tgt))
    assert cells.dtype == np.int32 and cells.tolist() == [
        [0, 0], [1, 1], [1, 2], [1, 3], [2, 1], [2, 2], [2, 3], [3, 4], [3, 5], [3, 6]]
    assert subword_links(set(), word_ids(src), word_ids(tgt)).shape == (0, 2)
    # the pieces must hold the text's words, else the pair gets no links (None)
    assert piece_links({(0, 0)}, src, tgt, "Ein Fahrradfahrer (x )",
                       "A cyclist (x)").shape == (1, 2)
    assert piece_links({(0, 0)}, src, tgt, "Ein Fahrradfahrer", "A cyclist (x)") is None


def test_links_file_is_read_beside_the_pairs_with_file_and_line_errors(tmp_path):
    pairs = [("a b", "x y z"), ("c", "w")]
    path = tmp_path / "links.txt"
    path.write_text("0-0 1-2 1p1\n0-0\n")
    assert list(with_links(pairs, path)) == [("a b", "x y z", {(0, 0), (1, 2), (1, 1)}),
                                             ("c", "w", {(0, 0)})]
    for text, words in (("0-0\n0-x\n", [f"{path}, line 2", "'0-x'"]),
                        ("0-0\n0-1\n", [f"{path}, line 2", "0-1", "1 target words"]),
                        ("0-0\n", [str(path), "1 lines", "one line of links per pair"]),
                        ("0-0\n0-0\n\n", [str(path), "more lines than the 2 pairs"])):
        path.write_text(text)
        with pytest.raises(AlignmentFormatError) as err:
            list(with_links(pairs, path))
        assert all(w in str(err.value) for w in words) and "\n" not in str(err.value)
    assert len(list(with_links(pairs, path, whole=False))) == 2   # a capped corpus: more is fine
    with pytest.raises(CorpusError, match="missing.txt: file not found"):
        list(with_links(pairs, tmp_path / "missing.txt"))


def _diagonal_links(path, pairs):
    """Word i <-> word i for each pair (a stand-in for an aligner's links)."""
    path.write_text("".join(" ".join(f"{i}-{i}" for i in range(min(len(s.split()), len(t.split()))))
                            + "\n" for s, t in pairs))
    return path


def test_batches_carry_the_subword_links_of_their_rows(tiny_overrides, tiny_corpus, tmp_path):
    src = (tiny_corpus / "train.de").read_text().splitlines()
    tgt = (tiny_corpus / "train.en").read_text().splitlines()
    links = _diagonal_links(tmp_path / "links.txt", list(zip(src, tgt, strict=True)))
    plain = prepare_data(compose_config(tiny_overrides).data)
    data = prepare_data(compose_config(tiny_overrides + [*GUIDED, f"data.alignments={links}"]).data)
    assert collate(plain.train, [0, 1]).links is None          # off: no column, no tensor
    assert data.train.path != plain.train.path               # its own token cache
    rows = [17, 3, 150]
    batch = collate(data.train, rows)
    assert batch.links.dtype == torch.int64 and batch.links.shape[1] == 3
    for r, i in enumerate(rows):
        mine = batch.links[batch.links[:, 0] == r, 1:].tolist()
        s_words = word_ids(data.tokenizer.src_pieces(data.train.src_ids(i)))
        t_words = word_ids(data.tokenizer.tgt_pieces(data.train.tgt_ids(i)))
        n = min(len(src[i].split()), len(tgt[i].split()))
        assert sorted((t_words[t], s_words[s]) for t, s in mine) == sorted(
            (t_words[t], s_words[s]) for t in range(len(t_words)) for s in range(len(s_words))
            if t_words[t] == s_words[s] < n)
        assert all(t < len(t_words) for t, _ in mine)    # never on </s> or padding
    assert batch.to("cpu").links is not None


# ------------------------------------------------------------------ the model's alignment
def test_the_supervised_heads_are_the_models_alignment():
    cfg = compose_config(TINY_MODEL + ["model.heads=4", "model.d_model=16",
                                       "model.decoder_layers=2", "model.alignment_layer=-2",
                                       "model.alignment_heads=1"],
                         validate_fn=None)
    from nmt.models import validate_model

    torch.manual_seed(0)
    model = build_model(validate_model(cfg.model), 20, 20).eval()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt_in = torch.tensor([[2, 10, 11], [2, 12, 0]])
    with torch.no_grad():
        _, align = model(src, src != 0, tgt_in)
        _, every = model(src, src != 0, tgt_in, need_alignment="all")
        _, none = model(src, src != 0, tgt_in, need_alignment=False)
    assert none is None
    torch.testing.assert_close(align, every.cross[:, 0, 0])        # layer -2 = 0, head 0 only
    torch.testing.assert_close(every.alignment, align)
    assert (model.alignment_layer, model.alignment_heads) == (0, 1)


def test_checkpoint_configs_without_the_keys_load_as_unguided():
    plain = to_plain(compose_config([], validate_fn=None))
    del plain["model"]["alignment_heads"], plain["train"]["alignment_loss_weight"]
    del plain["data"]["alignments"]
    up = upgrade_config(plain, 2)
    assert (up.model.alignment_heads, up.train.alignment_loss_weight, up.data.alignments) == \
        (0, 0.0, None)


# ------------------------------------------------------------------ unaligned words
def test_threshold_and_eos_leave_words_unaligned():
    # rows = target subwords (the last predicts </s>), columns = source subwords + </s>
    matrix = np.array([[0.9, 0.05, 0.05],     # target 0 -> source 0 (0.9)
                       [0.3, 0.35, 0.35],     # target 1: flat; its argmax 0.35 < 0.5
                       [0.1, 0.2, 0.7],       # target 2: most weight on </s>
                       [0.0, 0.0, 1.0]])
    item = ForcedAlignment(["▁a", "▁b"], ["▁x", "▁y", "▁z"], [0, 1], [0, 1, 2], 2, 3,
                           np.zeros((1, 1, 4, 3)), matrix)
    assert word_links(item) == {(0, 0), (1, 1), (1, 2)}           # argmax links every word
    assert word_links(item, threshold=0.5) == {(0, 0)}            # >= 0.5 on a real source word
    assert word_links(item, eos_unaligned=True) == {(0, 0), (1, 1)}
    assert extract_links(matrix[:, :-1], "argmax", 0.35) == {(0, 0), (1, 1)}
    # with layer/head given, the raw cross-attention is read, not the model's alignment
    assert word_links(item, layer=0, head=0) == set()


# ------------------------------------------------------------------ settings
@pytest.mark.parametrize(("overrides", "words"), [
    (["data.alignments=links.txt"], ["data.alignments=links.txt", "train.alignment_loss_weight"]),
    (["train.alignment_loss_weight=0.05", "data.alignments=x"], ["model.alignment_heads=1"]),
    ([*GUIDED, "data.alignments=x", "data.tokenizer.sampling_alpha=0.1"], ["sampling_alpha"]),
    (["train.alignment_loss_weight=-1"], ["train.alignment_loss_weight=-1.0"]),
    (["model.alignment_full_context=true"],   # a pass that only guided alignment trains
     ["model.alignment_full_context=true", "train.alignment_loss_weight > 0"]),
])
def test_guided_settings_are_checked(overrides, words, tiny_overrides):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides)
    assert all(w in str(err.value) for w in words)
    # links from the teacher: the trainer needs one when data.alignments is not given, and
    # says so before it reads data or writes a file, also when built directly
    from nmt.runtime import resolve_device
    from nmt.training.distributed import DistInfo
    from nmt.training.trainer import Trainer, train

    refusal = r"needs a teacher hook, which the TrainingHooks given lack: give data.alignments=FILE"
    cfg = compose_config(tiny_overrides + GUIDED)
    with pytest.raises(ConfigError, match=refusal):
        train(cfg)
    with pytest.raises(ConfigError, match=refusal):
        Trainer(cfg, DistInfo(), resolve_device("cpu"))
    assert not Path(cfg.run_dir).exists()
    compose_config(["model=rnn", "train.alignment_loss_weight=0.05", "data.alignments=x"])
    from nmt.models import validate_model

    with pytest.raises(ConfigError, match=r"model.alignment_heads=5 must lie in 0\.\.4"):
        validate_model({**compose_config([], validate_fn=None).model, "alignment_heads": 5})


# ------------------------------------------------------------------ eflomal
def test_eflomal_step_on_a_toy_corpus(tiny_overrides, monkeypatch):
    pytest.importorskip("eflomal")
    from nmt.extras.training import teacher

    assert teacher.tokens("Hi, you.") == (["hi", ",", "you", "."], [0, 0, 1, 1])
    cfg = compose_config(tiny_overrides, validate_fn=None)
    path = teacher.prepare_links(cfg.data)
    assert path == teacher.links_path(cfg.data) and path.parent.name == "alignments"
    src = (cfg.data.root + "/train.de", cfg.data.root + "/train.en")
    pairs = list(zip(*(open(f, encoding="utf-8").read().splitlines() for f in src), strict=True))
    links = [set(x) for _, _, x in with_links(pairs, path)]      # one valid line per pair
    # eflomal samples (unseeded): robust facts only. The generated pairs end with " ." on both
    # sides, and word-for-word captions get about a link per word.
    last = [(len(s.split()) - 1, len(t.split()) - 1) in x
            for (s, t), x in zip(pairs, links, strict=True)]
    assert sum(last) / len(pairs) > 0.9
    assert 0.7 < sum(map(len, links)) / sum(len(t.split()) for _, t in pairs) < 1.5
    monkeypatch.setattr(teacher, "align_pairs", lambda *a, **k: 1 / 0)
    assert teacher.prepare_links(cfg.data) == path           # cached: eflomal not run
    # the teacher's symmetrization is a setting, and part of the key
    other = compose_config(tiny_overrides + ["data.teacher_symmetrize=intersection"],
                           validate_fn=None)
    assert teacher.links_path(other.data) != path
    # another eflomal version: another cache file (its links may differ)
    monkeypatch.setattr(teacher.importlib.metadata, "version", lambda name: "0.0.1")
    assert teacher.links_path(cfg.data) != path


def test_the_teachers_symmetrizations_come_from_one_eflomal_run():
    pytest.importorskip("eflomal")
    from conftest import make_pairs

    from nmt.extras.training.teacher import align_pairs

    methods = ("forward", "reverse", "intersection", "union", "grow-diag", "grow-diag-final-and")
    out = align_pairs(make_pairs(60, 4), methods)
    for k in range(60):
        f, r = out["forward"][k], out["reverse"][k]
        assert out["intersection"][k] == f & r and out["union"][k] == f | r
        assert f & r <= out["grow-diag"][k] <= out["grow-diag-final-and"][k] <= f | r
    assert any(f != r for f, r in zip(out["forward"], out["reverse"], strict=True))


# ------------------------------------------------------------------ CTranslate2
def test_ctranslate2_export_carries_the_supervised_head(tmp_path, caplog):
    pytest.importorskip("ctranslate2")
    import json

    from conftest import REPO_ROOT, make_pairs

    import nmt
    from nmt.data.tokenizer import Tokenizer
    from nmt.extras.tools.ctranslate2 import CTranslate2Translator, build_spec, export

    ckpt = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"
    tok = Tokenizer.from_state_dict(torch.load(ckpt, weights_only=True)["tokenizer"])
    cfg = compose_config(["model.d_model=32", "model.heads=4", "model.ff_dim=48",
                          "model.encoder_layers=1", "model.decoder_layers=3",
                          "model.alignment_layer=-2", "model.alignment_heads=1"])
    torch.manual_seed(5)
    model = build_model(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size).eval()
    spec = build_spec(model, tok, cfg.model, 64)
    assert (int(spec.decoder.alignment_layer.numpy()),
            int(spec.decoder.alignment_heads.numpy())) == (1, 1)
    out = export(nmt.Translator(model, tok, cfg), tmp_path / "ct2")
    assert json.loads((out / "nmt_export.json").read_text())["alignment"] == \
        {"layer": 1, "heads": 1, "num_heads": 4, "full_context": False}
    src = [s for s, _ in make_pairs(6, 9)]
    ours = nmt.Translator(model, tok, cfg).translate(src, beam_size=1, max_len_a=0.0, max_len_b=8)
    theirs = CTranslate2Translator.from_dir(out, intra_threads=1).translate(
        src, beam_size=1, max_len_a=0.0, max_len_b=8)
    for a, b in zip(ours, theirs, strict=True):   # CTranslate2's alignment: the same one head
        assert a.ids == b.ids
        np.testing.assert_allclose(b.alignment, a.alignment, atol=1e-3)
    assert not caplog.records
    # a full-context model: CTranslate2 has no such pass, so it says so and records the flag
    model.alignment_full_context = True
    full = export(nmt.Translator(model, tok, cfg), tmp_path / "ct2_full")
    assert json.loads((full / "nmt_export.json").read_text())["alignment"]["full_context"]
    (record,) = caplog.records
    assert record.levelname == "WARNING" and "causal heads'" in record.getMessage()


# ------------------------------------------------------------------ full target context
def test_full_context_alignment_sees_the_whole_target_and_only_it():
    from nmt.models.transformer import DecoderLayer

    torch.manual_seed(0)
    layer = DecoderLayer(16, 2, 32, 0.0, 0.0, 0.0, "relu", False).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    src_mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    # the causal mask given as tgt_mask is the reference pass: the future mask all true
    future = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    for a, b in zip(layer(x, memory, src_mask, True),
                    layer(x, memory, src_mask, True, tgt_mask=future), strict=True):
        if a is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    cfg = compose_config(TINY_MODEL + GUIDED + ["model.decoder_layers=2", "model.alignment_layer=0",
                                                "data.alignments=x"])
    model = build_model(cfg.model, 30, 30).eval()
    src, tgt = torch.randint(4, 30, (2, 6)), torch.randint(4, 30, (2, 5))
    src_mask = torch.ones(2, 6, dtype=torch.bool)
    logits, causal = model(src, src_mask, tgt)
    model.alignment_full_context = True
    logits_full, full = model(src, src_mask, tgt)
    # the logits: the causal decoder's (its alignment layer fused now: rounding apart)
    torch.testing.assert_close(logits, logits_full, rtol=0, atol=1e-5)
    assert not torch.allclose(full[:, :-1], causal[:, :-1], atol=1e-4)  # rows see the future
    # one token (no future) or the pass itself: the causal alignment
    torch.testing.assert_close(model(src, src_mask, tgt[:, :1])[1], causal[:, :1], rtol=0,
                               atol=1e-6)
    # padding is no context: a sentence's rows equal its unpadded pass
    padded = torch.cat([tgt, torch.zeros(2, 3, dtype=torch.long)], 1)
    torch.testing.assert_close(model(src, src_mask, padded)[1][:, :5], full, rtol=0, atol=1e-6)
    torch.testing.assert_close(model(src, src_mask, tgt, need_alignment="all")[1].alignment, full)
