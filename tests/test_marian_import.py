"""Marian import (nmt/extras/tools/marian/importer.py) beyond tests/test_marian.py's cases.

Every embedding configuration transformers builds, vocabularies OPUS-MT writes (pieces vocab.json
lacks, characters one side lacks), and broken directories refused in one line through the CLI."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")
from test_marian import (  # noqa: E402 - after the skips
    SENTENCES,
    _hf,
    _import,
    _maps,
    build_marian,
    check_logits,
    check_segmentation,
)


@pytest.mark.parametrize("share, tie", [(True, True), (True, False), (False, True), (False, False)])
def test_every_embedding_configuration_imports_exactly(tmp_path, share, tie):
    """share_encoder_decoder_embeddings x tie_word_embeddings (transformers 5 ties nothing
    without the latter: four matrices, the encoder and decoder reading their own), with
    random other options, BPE included: logits within 1e-5 of MarianMTModel's."""
    rng = random.Random(f"{share}{tie}")
    opts = {"joint": rng.random() < 0.5, "scale_embedding": rng.random() < 0.5,
            "activation": rng.choice(["swish", "gelu", "relu"]),
            "model_type": rng.choice(["unigram", "bpe"]), "seed": rng.randrange(100)}
    directory = build_marian(tmp_path / "hf", share=share, tie=tie, **opts)
    model, tok, cfg = _import(directory, tmp_path / "m.pt")
    assert cfg.model.tie_embeddings == (share and tie), opts
    check_segmentation(directory, tok)
    check_logits(directory, model, tok)


def test_pieces_vocab_json_lacks_stay_unused_and_foreign_characters_are_looked_up(tmp_path):
    """OPUS-MT's vocab.json can lack a few SentencePiece pieces: they stay UNUSED (never
    emitted: nmt segments such a word into pieces vocab.json has, where MarianTokenizer gives
    <unk>). A character only the target model has is looked up in vocab.json, as
    MarianTokenizer does; a run of two such characters is one <unk> there, two pieces here."""
    import sentencepiece as spm

    directory = build_marian(tmp_path / "hf", drop=3, tgt_extra=("Жж ж Ж .",) * 3)
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    source = spm.SentencePieceProcessor(model_file=str(directory / "source.spm"))
    lacking = [p for p in map(source.id_to_piece, range(source.get_piece_size()))
               if p not in vocab and not source.is_control(source.piece_to_id(p))
               and not source.is_unknown(source.piece_to_id(p))]
    assert len(lacking) == 3 and "ж" in vocab and source.piece_to_id("ж") == source.unk_id()
    model, tok, _ = _import(directory, tmp_path / "m.pt")
    ids = {p: i for i, p in enumerate(tok.src_pieces(range(tok.src_vocab_size)))}
    assert all(ids[p] >= len(vocab) for p in lacking)   # after vocab.json's, rows Marian lacks
    words = [p.lstrip("▁") for p in lacking]
    texts = [f"Ein {w} ." for w in words]
    for text, piece in zip(texts, lacking, strict=True):
        assert piece in source.encode(text, out_type=str)     # Marian's segmentation has it
        got = tok.encode_src_batch([text])[0]
        assert ids[piece] not in got and 1 not in got and "".join(
            tok.src_pieces(got)).replace("▁", " ").strip() == text
    check_segmentation(directory, tok, SENTENCES + ["Ein Hund ж läuft Ж ."])
    check_logits(directory, model, tok)
    hf, htok = _hf(directory)
    m2n, _ = _maps(directory, tok, hf.config)
    marian = [m2n[i] for i in htok(["Ein жж ."]).input_ids[0]]
    assert marian.count(1) == 1 and tok.encode_src_batch(["Ein жж ."])[0].count(ids["ж"]) == 2


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> Path:
    return build_marian(tmp_path_factory.mktemp("marian") / "hf")


def _spm_bytes(d: Path, name: str) -> bytes:
    return (d / name).read_bytes()


def _break_weight(d: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(d / "model.safetensors"))
    weights["model.encoder.layers.0.fc1.weight"] = torch.zeros(16, 32)   # transposed
    save_file(weights, str(d / "model.safetensors"))


BROKEN = {   # case: (how the copy is broken, what the one line says)
    "garbage source.spm": (lambda d: (d / "source.spm").write_bytes(b"\x93 not a model" * 20),
                           "source.spm: not a SentencePiece model"),
    "truncated target.spm": (lambda d: (d / "target.spm").write_bytes(
        _spm_bytes(d, "target.spm")[:1000]), "target.spm: not a SentencePiece model"),
    "empty source.spm": (lambda d: (d / "source.spm").write_bytes(b""),
                         "source.spm: not a SentencePiece model (the file is empty)"),
    "config.json a list": (lambda d: (d / "config.json").write_text("[1, 2]"),
                           "config.json: holds a JSON list, not an object"),
    "vocab.json a list": (lambda d: (d / "vocab.json").write_text('["</s>", "<unk>"]'),
                          "vocab.json: holds a JSON list, not an object"),
    "vocab.json id a string": (lambda d: (d / "vocab.json").write_text(json.dumps(
        {**json.loads((d / "vocab.json").read_text()), "<unk>": "1"})),
        "vocab.json: '<unk>' -> '1': vocab.json maps each non-empty token to an integer id "
        "of its own"),
    "d_model a string": (lambda d: (d / "config.json").write_text(json.dumps(
        {**json.loads((d / "config.json").read_text()), "d_model": "16"})),
        "config.json: d_model = '16' must be a positive integer"),
    "a weight of the wrong shape": (_break_weight, "model.safetensors: the weight "
                                    "model.encoder.layers.0.fc1.weight has shape [16, 32]; "
                                    "config.json makes it [32, 16]"),
}


@pytest.mark.parametrize("case", [*BROKEN, "out unwritable", "out a directory"])
def test_a_broken_directory_or_out_is_one_line_and_writes_nothing(tmp_path, capsys, marian_dir,
                                                                  case):
    from nmt.cli.import_model import main

    directory = shutil.copytree(marian_dir, tmp_path / "hf")
    out = tmp_path / "outdir" / "m.pt"
    out.parent.mkdir()
    if case in BROKEN:
        BROKEN[case][0](directory)
        expected = BROKEN[case][1]
    elif case == "out unwritable":   # its parent is a file (root writes any directory)
        (tmp_path / "outdir" / "file").write_text("x")
        out = out.parent / "file" / "m.pt"
        expected = "out=" + str(out.parent) + " cannot be written"
    else:
        out.mkdir()
        expected = f"out={out} is a directory"
    capsys.readouterr()
    assert main([f"source={directory}", f"out={out}"]) == 2
    err = capsys.readouterr().err   # one paragraph (wrapped at 100 columns), no traceback
    assert err.startswith("nmt-import: error:") and "Traceback" not in err
    assert expected in " ".join(err.split()), err
    assert sorted(p.name for p in (tmp_path / "outdir").iterdir()) == (
        ["file"] if case == "out unwritable" else ["m.pt"] if case == "out a directory" else [])
