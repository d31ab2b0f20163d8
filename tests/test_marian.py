"""Hugging Face Marian (OPUS-MT) import and export (nmt/extras/tools/marian/).

Random MarianMTModels built here (SentencePiece models trained on a few hundred Multi30k lines, else
the generated corpus), compared with transformers: logits, greedy and beam search, the round trip,
the pipeline, the clear errors, and the nmt tools on an imported model."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
import torch
from conftest import make_pairs

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
import sentencepiece as spm  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ["Ein Hund läuft über die Straße .", "Zwei Männer spielen Fußball im Park .",
             "Eine Frau mit einem roten Hut sitzt auf einer Bank ."]


def _texts(n: int = 300) -> tuple[list[str], list[str]]:
    """Few hundred (de, en) lines of Multi30k's train split, else of the generated corpus."""
    root = Path(os.environ.get("NMT_DATA_ROOT", REPO_ROOT.parent / "shared" / "data" / "multi30k"))
    if (root / "train.de").is_file():
        de = (root / "train.de").read_text(encoding="utf-8").splitlines()[:n]
        en = (root / "train.en").read_text(encoding="utf-8").splitlines()[:n]
        return de, en
    pairs = make_pairs(n, seed=0)
    return [d for d, _ in pairs], [e for _, e in pairs]


def _spm(texts: list[str], size: int, model_type: str = "unigram", **extra) -> bytes:
    out = io.BytesIO()   # Marian's layout: SentencePiece's default ids (<unk> 0, <s> 1, </s> 2)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=out,
                                   model_type=model_type, vocab_size=size, hard_vocab_limit=False,
                                   character_coverage=1.0, minloglevel=2, num_threads=1, **extra)
    return out.getvalue()


def _pieces(model: bytes) -> list[str]:
    sp = spm.SentencePieceProcessor(model_proto=model)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())
            if not (sp.is_control(i) or sp.is_unknown(i))]


def build_marian(directory: Path, *, joint: bool = False, scale_embedding: bool = True,
                 activation: str = "swish", codes: tuple[str, ...] = (), tie: bool = True,
                 share: bool | None = None, seed: int = 0, d_model: int = 16,
                 model_type: str = "unigram", drop: int = 0, tgt_extra: tuple[str, ...] = ()
                 ) -> Path:
    """A random MarianMTModel + MarianTokenizer saved as save_pretrained writes them: vocab.json
    as OPUS-MT's (</s> 0, <unk> 1, ..., <pad> last, the decoder start; without the ``drop`` longest
    pieces only the source model has), every weight random (LayerNorms, biases, final_logits_bias
    and the decoder-start row included). ``tie``: tie_word_embeddings, ``share`` (None: ``tie``):
    share_encoder_decoder_embeddings; ``tgt_extra``: lines only the target model learns."""
    de, en = _texts()
    src = _spm(de + en if joint else de, 200, model_type)
    tgt = src if joint else _spm(en + list(tgt_extra), 180, model_type)
    tokens = ["</s>", "<unk>", *[f">>{c}<<" for c in codes]]
    dropped = sorted(set(_pieces(src)) - set(_pieces(tgt)), key=lambda p: (-len(p), p))[:drop]
    for p in _pieces(src) + _pieces(tgt):
        if p not in tokens and p not in dropped:
            tokens.append(p)
    tokens.append("<pad>")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}),
                                          encoding="utf-8")
    (directory / "source.spm").write_bytes(src)
    (directory / "target.spm").write_bytes(tgt)
    tok = transformers.MarianTokenizer(str(directory / "source.spm"), str(directory / "target.spm"),
                                       str(directory / "vocab.json"), source_lang="de",
                                       target_lang="en")
    tok.save_pretrained(str(directory))
    pad = len(tokens) - 1
    config = transformers.MarianConfig(
        vocab_size=len(tokens), d_model=d_model, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, activation_function=activation, scale_embedding=scale_embedding,
        max_position_embeddings=256, pad_token_id=pad, decoder_start_token_id=pad,
        eos_token_id=0, forced_eos_token_id=0, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, share_encoder_decoder_embeddings=tie if share is None else share,
        tie_word_embeddings=tie)
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "layer_norm.weight" in name else 0.0, 0.2 if "norm" in name else 0.5)
        model.final_logits_bias.normal_(0.0, 1.0)
    model.save_pretrained(str(directory))
    return directory


def _hf(directory: Path):
    model = transformers.MarianMTModel.from_pretrained(str(directory)).eval()
    return model, transformers.MarianTokenizer.from_pretrained(str(directory))


def _maps(directory: Path, tokenizer, hf_config) -> tuple[dict[int, int], torch.Tensor]:
    """(Marian id -> nmt id, nmt column of each Marian id) by piece names; Marian's decoder
    start is nmt's <s>, its >>xx<< tokens nmt's <2xx>."""
    from nmt.data.vocab import BOS_ID

    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    names = {p: k for k, p in enumerate(tokenizer.src_pieces(range(tokenizer.src_vocab_size)))}
    m2n = {i: names[f"<2{t[2:-2]}>" if t.startswith(">>") else t] for t, i in vocab.items()
           if t != "<pad>" or hf_config.pad_token_id != hf_config.decoder_start_token_id}
    m2n[hf_config.decoder_start_token_id] = BOS_ID
    return m2n, torch.tensor([m2n[i] for i in range(len(vocab))])


def _import(directory: Path, out: Path, **kw):
    from nmt.extras.tools.marian import import_marian
    from nmt.inference.translator import load_for_inference

    import_marian(directory, out, **kw)
    return load_for_inference(out)


def check_logits(directory: Path, model, tok, sentences=SENTENCES[:2],
                 targets=("A dog runs across the street .", "Two men play football .")) -> None:
    """nmt's logits (its columns in Marian's order) equal MarianMTModel's to 1e-5 of their
    largest magnitude; nmt's rows Marian lacks change no softmax sum."""
    hf, htok = _hf(directory)
    m2n, cols = _maps(directory, tok, hf.config)
    enc = htok(list(sentences), return_tensors="pt", padding=True)
    tgt = htok(text_target=list(targets), return_tensors="pt", padding=True).input_ids
    start = hf.config.decoder_start_token_id
    dec_in = torch.cat([torch.full((len(targets), 1), start), tgt[:, :-1]], 1)
    src, mask = enc.input_ids, enc.attention_mask.bool()
    with torch.no_grad():
        ref = hf(input_ids=src, attention_mask=mask.long(), decoder_input_ids=dec_in).logits
        full, _ = model(src.clone().apply_(m2n.get).masked_fill(~mask, 0), mask,
                        dec_in.clone().apply_(m2n.get), need_alignment=False)
    ours = full[..., cols]          # nmt's columns in Marian's order
    real = tgt != hf.config.pad_token_id
    scale = ref[real].abs().max()
    assert ((ours - ref)[real].abs().max() / scale) < 1e-5, "logits differ beyond fp32 tolerance"
    assert full.size(-1) > len(cols) or hf.config.pad_token_id != start
    assert torch.allclose(torch.logsumexp(full, -1), torch.logsumexp(ours, -1), rtol=1e-6)


def check_segmentation(directory: Path, tok, sentences=SENTENCES) -> None:
    """MarianTokenizer's ids are nmt's source ids (+ </s>), mapped."""
    hf, htok = _hf(directory)
    m2n, _ = _maps(directory, tok, hf.config)
    enc = htok(list(sentences), return_tensors="pt", padding=True)
    for row, mask, ids in zip(enc.input_ids.tolist(), enc.attention_mask.tolist(),
                              tok.encode_src_batch(sentences), strict=True):
        assert [m2n[i] for i, m in zip(row, mask, strict=True) if m] == ids + [3]


@pytest.mark.parametrize("kind", ["separate_scaled", "joint_unscaled_gelu", "untied"])
def test_import_segmentation_and_logits_match_transformers(tmp_path, kind):
    opts = {"separate_scaled": {}, "untied": {"tie": False},
            "joint_unscaled_gelu": {"joint": True, "scale_embedding": False, "activation": "gelu"}}
    directory = build_marian(tmp_path / "hf", **opts[kind])
    model, tok, cfg = _import(directory, tmp_path / "m.pt")
    assert tok.joint and cfg.model.norm == "post" and cfg.model.final_logits_bias
    assert cfg.model.tie_embeddings == (kind != "untied")
    check_segmentation(directory, tok)
    check_logits(directory, model, tok)


class ScoredForcedEOS(transformers.LogitsProcessor):
    """nmt's convention at the length limit (nmt/inference/search.py): only EOS, its log-prob
    kept; transformers' ``forced_eos_token_id`` scores it 0, so beams that reach the limit
    would rank otherwise. ``max_length`` counts the decoder start."""

    def __init__(self, max_length: int, eos: int):
        self.max_length, self.eos = max_length, eos

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.size(-1) == self.max_length - 1:
            scores[:, torch.arange(scores.size(-1)) != self.eos] = -torch.inf
        return scores


def _generate_ids(hf, enc, m2n, k: int, length: int) -> list[list[int]]:
    """``generate``'s ids (nmt's, by ``m2n``) at nmt's settings: at most ``length`` tokens
    before EOS, length penalty 0, fairseq's stopping rule, EOS forced and scored as nmt does."""
    pad, eos = hf.config.pad_token_id, hf.config.eos_token_id
    out = hf.generate(**enc, num_beams=k, length_penalty=0.0, max_new_tokens=length + 1,
                      do_sample=False, early_stopping=True, bad_words_ids=[[pad]], eos_token_id=eos,
                      forced_eos_token_id=None, logits_processor=transformers.LogitsProcessorList(
                          [ScoredForcedEOS(length + 2, eos)]))
    hyps = [[i for i in row[1:] if i != pad] for row in out.tolist()]
    return [[m2n[i] for i in (h[: h.index(eos)] if eos in h else h)] for h in hyps]


@pytest.mark.parametrize("to_the_limit", [False, True])
def test_greedy_and_beam_match_generate(tmp_path, to_the_limit):
    """Token for token, with hypotheses ending before the limit (a likelier </s>) or a random
    model decoding 40 sentences to the limit, where the forced </s> is scored."""
    from nmt.inference.translator import Translator

    directory = build_marian(tmp_path / "hf", seed=1)
    hf, htok = _hf(directory)
    sentences = _texts(340)[0][300:] if to_the_limit else SENTENCES + [
        "Ein Mann .", "Kinder spielen am Strand mit einem Ball ."]
    enc = htok(sentences, return_tensors="pt", padding=True)
    identity = {i: i for i in range(len(hf.final_logits_bias[0]))}
    base = hf.final_logits_bias[0, 0].item()
    for boost in [] if to_the_limit else torch.arange(5.0, 9.0, 0.25).tolist():
        with torch.no_grad():
            hf.final_logits_bias[0, 0] = base + boost
        if len({len(h) for h in _generate_ids(hf, enc, identity, 5, 15)}) > 1:
            break
    lengths = [len(h) for h in _generate_ids(hf, enc, identity, 5, 15)]
    assert sum(n == 15 for n in lengths) > 30 if to_the_limit else len(set(lengths)) > 1
    hf.save_pretrained(str(directory))
    _import(directory, tmp_path / "m.pt")
    tr = Translator.from_checkpoint(tmp_path / "m.pt")
    m2n, _ = _maps(directory, tr.tokenizer, hf.config)
    for k in (1, 5):
        ref = _generate_ids(hf, enc, m2n, k, length=15)
        got = tr.translate(sentences, beam_size=k, length_penalty=0.0, max_len_a=0.0, max_len_b=15)
        assert [t.ids for t in got] == ref, f"beam {k}"


def _nmt_checkpoint(root: Path, *overrides: str, seed: int = 0, tags: tuple[str, ...] = ()) -> Path:
    """A random post-norm nmt Transformer checkpoint (tiny corpus, its tokenizer; ``tags``: a
    joint one with these language tags)."""
    from conftest import write_corpus

    from nmt.checkpoint import CHECKPOINT_VERSION, CONFIG_VERSION, save_atomic
    from nmt.config import compose_config, to_plain
    from nmt.data.corpus import iter_parallel, split_fingerprint
    from nmt.data.tokenizer import tokenizer_from_pairs
    from nmt.models import build_model

    corpus = write_corpus(root / "corpus", {"train": 100, "test": 5})
    small = [] if "model=rnn" in overrides else [
        "model.d_model=16", "model.heads=2", "model.ff_dim=32", "model.norm=post",
        "model.encoder_layers=2", "model.decoder_layers=2"]
    cfg = compose_config([f"data.root={corpus}", f"data.cache_dir={root / 'cache'}",
                          "data.test_split=test", "data.tokenizer.vocab_size=100", *small,
                          *overrides])
    if tags:
        from nmt.data.tokenizer import Tokenizer, train_sentencepiece

        texts = [s for lang in ("de", "en")
                 for s in (corpus / f"train.{lang}").read_text().splitlines()]
        tok = Tokenizer(train_sentencepiece(texts, "unigram", 100, 1.0, symbols=tags))
    else:
        tok = tokenizer_from_pairs(cfg.data.tokenizer, "de", "en",
                                   lambda: iter_parallel(cfg.data, "train"),
                                   cfg.data.cache_dir, split_fingerprint(cfg.data, "train"))
    torch.manual_seed(seed)
    model = build_model(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.normal_(1.0 if name.endswith("norm.weight") else 0.0, 0.2)
        if getattr(model, "final_logits_bias", None) is not None:
            model.final_logits_bias.normal_(0.0, 1.0)
            model.final_logits_bias[1] = -50.0   # never <unk>: its text differs (HF drops it)
    path = root / "nmt.pt"
    save_atomic({"version": CHECKPOINT_VERSION, "config_version": CONFIG_VERSION,
                 "config": to_plain(cfg), "tokenizer": tok.state_dict(),
                 "model": model.state_dict(), "step": 0}, path)
    return path


@pytest.mark.parametrize("overrides", [
    (), ("model.activation=silu", "model.final_logits_bias=true", "model.scale_embedding=false"),
    ("model.tie_embeddings=false",)])
def test_round_trip_nmt_marian_nmt_is_bit_for_bit(tmp_path, overrides):
    from nmt.checkpoint import load_checkpoint
    from nmt.extras.tools.marian import export_marian, import_marian

    path = _nmt_checkpoint(tmp_path, *overrides)
    export_marian(path, tmp_path / "hf")
    import_marian(tmp_path / "hf", tmp_path / "back.pt")
    a, b = load_checkpoint(path), load_checkpoint(tmp_path / "back.pt")
    assert a["model"].keys() == b["model"].keys()
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    for key in ("d_model", "heads", "ff_dim", "activation", "tie_embeddings", "norm",
                "scale_embedding", "final_logits_bias", "encoder_layers", "decoder_layers"):
        assert a["config"]["model"][key] == b["config"]["model"][key], key
    from nmt.data.tokenizer import Tokenizer
    ta, tb = Tokenizer.from_state_dict(a["tokenizer"]), Tokenizer.from_state_dict(b["tokenizer"])
    assert ta.src_pieces(range(ta.src_vocab_size)) == tb.src_pieces(range(tb.src_vocab_size))
    texts = SENTENCES + ["Ein großer Hund läuft über die Straße ."]
    assert ta.encode_src_batch(texts) == tb.encode_src_batch(texts)
    assert ta.encode_tgt_batch(texts) == tb.encode_tgt_batch(texts)


def test_export_loads_in_transformers_and_translates_as_nmt(tmp_path):
    """MarianTokenizer gives nmt's ids, generate nmt's greedy ids, and the Auto classes +
    generate + batch_decode (transformers 5 removed pipeline("translation")) nmt's texts."""
    from nmt.extras.tools.marian import export_marian
    from nmt.inference.translator import Translator

    path = _nmt_checkpoint(tmp_path, "model.final_logits_bias=true", seed=3)
    export_marian(path, tmp_path / "hf")
    tr = Translator.from_checkpoint(path)
    hf, htok = _hf(tmp_path / "hf")
    sentences = ["Ein großer Hund läuft über die Straße .", "Zwei Mädchen tanzen im Park ."]
    enc = htok(sentences, return_tensors="pt", padding=True)
    assert [ids + [3] for ids in tr.tokenizer.encode_src_batch(sentences)] == [
        [i for i, m in zip(r, mm, strict=True) if m] for r, mm in
        zip(enc.input_ids.tolist(), enc.attention_mask.tolist(), strict=True)]
    ours = tr.translate(sentences, beam_size=1, max_len_a=0.0, max_len_b=12)
    identity = {i: i for i in range(tr.tokenizer.src_vocab_size)}
    assert _generate_ids(hf, enc, identity, 1, 12) == [t.ids for t in ours]
    auto = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "hf")).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    got = tokenizer.batch_decode(auto.generate(**batch, num_beams=1, max_new_tokens=13),
                                 skip_special_tokens=True)
    assert got == [t.text for t in ours]


def test_a_target_tag_model_exports_its_one_tag_as_forced_bos(tmp_path, capsys):
    """data.lang_tag=target with one target language: the tag is generation_config's
    forced_bos_token_id (scored 0 in both), so generate gives the tag, then nmt's output. Two
    target languages, and importing such an export, are refused in one line."""
    from nmt.cli.export import main as export_main
    from nmt.cli.import_model import main as import_main
    from nmt.extras.tools.marian import export_marian
    from nmt.inference.translator import Translator

    path = _nmt_checkpoint(tmp_path, "data.pairs=[de-en,fr-en]", "data.lang_tag=target",
                           "model.final_logits_bias=true", seed=4, tags=("<2en>", "<2fr>"))
    export_marian(path, tmp_path / "hf")
    tr = Translator.from_checkpoint(path)
    hf, htok = _hf(tmp_path / "hf")
    tag = tr.tokenizer.tag_id("en")
    assert hf.generation_config.forced_bos_token_id == tag
    sentences = ["Ein großer Hund läuft über die Straße .", "Zwei Mädchen tanzen im Park ."]
    identity = {i: i for i in range(tr.tokenizer.src_vocab_size)}
    ref = _generate_ids(hf, htok(sentences, return_tensors="pt", padding=True), identity, 1, 13)
    ours = tr.translate(sentences, beam_size=1, max_len_a=0.0, max_len_b=12)
    assert [h[0] for h in ref] == [tag, tag] and [h[1:] for h in ref] == [t.ids for t in ours]
    msg = _cli_error(capsys, import_main,
                     [f"source={tmp_path / 'hf'}", f"out={tmp_path / 'back.pt'}"])
    assert f"generation_config.json: forced_bos_token_id = {tag}: a forced first token" in msg
    two = _nmt_checkpoint(tmp_path / "two", "data.pairs=[de-en,de-fr]", "data.lang_tag=target",
                          tags=("<2en>", "<2fr>"))
    msg = _cli_error(capsys, export_main,
                     [f"checkpoint={two}", "format=marian", f"out_dir={tmp_path / 'e'}"])
    assert "data.lang_tag=target with target languages en, fr: a Marian model forces one" in msg


def _cli_error(capsys, main, argv) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(("nmt-import: error:", "nmt-export: error:")) and "Traceback" not in err
    return " ".join(err.split())


def test_clear_errors(tmp_path, capsys):
    from nmt.cli.export import main as export_main
    from nmt.cli.import_model import main as import_main

    directory = build_marian(tmp_path / "hf")
    out = f"out={tmp_path / 'x.pt'}"

    def edit_config(**changes):
        cfg = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps({**cfg, **changes}))
        return cfg

    original = edit_config(model_type="bart", architectures=["BartForConditionalGeneration"])
    msg = _cli_error(capsys, import_main, [f"source={directory}", out])
    assert "config.json: model_type/architectures" in msg
    for change, key in (({"normalize_before": True}, "normalize_before"),
                        ({"add_bias_logits": True}, "add_bias_logits"),
                        ({"activation_function": "gelu_new"}, "activation_function"),
                        ({"decoder_ffn_dim": 64}, "encoder_ffn_dim/decoder_ffn_dim")):
        (directory / "config.json").write_text(json.dumps({**original, **change}))
        msg = _cli_error(capsys, import_main, [f"source={directory}", out])
        assert f"config.json: {key}" in msg, msg
    (directory / "config.json").write_text(json.dumps(original))
    from safetensors.torch import load_file, save_file
    weights = load_file(str(directory / "model.safetensors"))
    save_file({**weights, "model.encoder.layernorm_embedding.weight": torch.ones(16)},
              str(directory / "model.safetensors"))
    assert "layernorm_embedding" in _cli_error(capsys, import_main, [f"source={directory}", out])
    save_file(weights, str(directory / "model.safetensors"))
    (directory / "target.spm").unlink()
    assert "target.spm: missing" in _cli_error(capsys, import_main, [f"source={directory}", out])
    msg = _cli_error(capsys, import_main, [f"source={tmp_path / 'nope'}", out])
    assert "no such Marian directory" in msg
    # export: the RNN and a pre-norm Transformer are refused in one line naming the key
    path = _nmt_checkpoint(tmp_path / "pre", "model.norm=pre")
    msg = _cli_error(capsys, export_main,
                     [f"checkpoint={path}", "format=marian", f"out_dir={tmp_path / 'e1'}"])
    assert "model.norm=pre" in msg
    rnn = _nmt_checkpoint(tmp_path / "rnn", "model=rnn")
    msg = _cli_error(capsys, export_main,
                     [f"checkpoint={rnn}", "format=marian", f"out_dir={tmp_path / 'e2'}"])
    assert "only a Transformer exports" in msg


def test_multilingual_target_tokens_map_exactly(tmp_path):
    from nmt.inference.translator import Translator

    directory = build_marian(tmp_path / "hf", joint=True, codes=("fra", "deu"), seed=2)
    _, tok, cfg = _import(directory, tmp_path / "m.pt")
    assert list(cfg.data.pairs) == ["de-deu", "de-fra"] and cfg.data.lang_tag == "source"
    hf, htok = _hf(directory)
    m2n, _ = _maps(directory, tok, hf.config)
    tr = Translator.from_checkpoint(tmp_path / "m.pt")
    enc = htok([f">>fra<< {s}" for s in SENTENCES], return_tensors="pt", padding=True)
    vocab = json.loads((directory / "vocab.json").read_text())
    assert enc.input_ids[0, 0].item() == vocab[">>fra<<"]
    got = tr.translate(SENTENCES, beam_size=1, max_len_a=0.0, max_len_b=10, tgt_lang="fra")
    assert [t.ids for t in got] == _generate_ids(hf, enc, m2n, 1, 10)


@pytest.mark.slow
def test_tools_and_fine_tuning_on_an_imported_model(tmp_path, capsys):
    """nmt-translate/nmt-evaluate's alignments, nmt-plot, nmt-align, CTranslate2 export and
    fine-tuning (train.init_from keeps the imported tokenizer) on an imported model."""
    from conftest import write_corpus

    from nmt.cli.align import main as align_main
    from nmt.cli.import_model import main as import_main
    from nmt.cli.plot import main as plot_main
    from nmt.cli.train import main as train_main
    from nmt.data.tokenizer import Tokenizer
    from nmt.evaluation.alignments import save_alignments  # noqa: F401 - the evaluator's writer
    from nmt.inference.translator import Translator

    directory = build_marian(tmp_path / "hf")
    ckpt = tmp_path / "m.pt"
    assert import_main(["format=marian", f"source={directory}", f"out={ckpt}"]) == 0
    printed = capsys.readouterr().out
    overrides = printed.split("nmt-train ", 1)[1].replace(" data=...", "").split()
    corpus = write_corpus(tmp_path / "corpus", {"train": 40, "val": 4, "test": 4})
    src, tgt = tmp_path / "s.de", tmp_path / "t.en"
    src.write_text("\n".join(SENTENCES[:2]) + "\n")
    tgt.write_text("A dog runs .\nTwo men play .\n")
    assert align_main([f"checkpoint={ckpt}", f"src_file={src}", f"tgt_file={tgt}",
                       f"out={tmp_path / 'links.txt'}",
                       f"attention_out={tmp_path / 'att.npz'}"]) == 0
    assert len((tmp_path / "links.txt").read_text().splitlines()) == 2
    assert plot_main([f"alignments={tmp_path / 'att.npz'}", "index=0",
                      f"out={tmp_path / 'fig.png'}"]) == 0
    assert (tmp_path / "fig.png").stat().st_size > 1000
    pytest.importorskip("ctranslate2")
    from nmt.extras.tools.ctranslate2 import CTranslate2Translator, export

    export(ckpt, tmp_path / "ct2")
    ct2 = CTranslate2Translator.from_dir(tmp_path / "ct2")
    opts = {"beam_size": 1, "max_len_b": 10, "max_len_a": 0.0}
    ours = Translator.from_checkpoint(ckpt).translate(SENTENCES, **opts)
    assert [t.ids for t in ct2.translate(SENTENCES, **opts)] == [t.ids for t in ours]
    run = tmp_path / "ft"
    assert train_main([f"train.init_from={ckpt}", *overrides, f"data.root={corpus}",
                       "data.src_lang=de", "data.tgt_lang=en", "data.test_split=test",
                       f"data.cache_dir={tmp_path / 'cache'}", f"run_dir={run}",
                       "train.max_steps=2", "train.batch_tokens=256"]) == 0
    fine = Translator.from_checkpoint(run / "checkpoints" / "last.pt").tokenizer
    assert fine.fingerprint == Tokenizer.from_checkpoint(ckpt, __import__("torch").load(
        ckpt, weights_only=True)["tokenizer"]).fingerprint


def test_readme_marian_block_runs(tmp_path, capsys):
    """The nmt-* lines of the README's Marian block (paths moved to tmp_path) run."""
    import re
    import shlex

    from nmt.cli import export, import_model, translate

    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"### Hugging Face Marian.*?```bash\n(.*?)```", text, re.S).group(1)
    lines = [ln.split("#")[0].strip() for ln in block.splitlines() if ln.startswith("nmt-")]
    assert [ln.split()[0] for ln in lines] == ["nmt-import", "nmt-translate", "nmt-export"]
    directory = build_marian(tmp_path / "hf")
    (tmp_path / "in.de").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    swap = {"opus-mt-de-en/": str(directory), "opus.pt": str(tmp_path / "opus.pt"),
            "< input.de": f"input={tmp_path / 'in.de'} output={tmp_path / 'out.en'} max_len_b=5",
            "runs/tf/checkpoints/best.pt": str(_nmt_checkpoint(tmp_path / "nmt")),
            "runs/tf/hf": str(tmp_path / "exported")}
    tools = {"nmt-import": import_model.main, "nmt-translate": translate.main,
             "nmt-export": export.main}
    for line in lines:
        for old, new in swap.items():
            line = line.replace(old, new)
        tool, *args = shlex.split(line)
        assert tools[tool](args) == 0, capsys.readouterr().err
    assert len((tmp_path / "out.en").read_text(encoding="utf-8").splitlines()) == len(SENTENCES)
    assert (tmp_path / "exported" / "model.safetensors").is_file()
    hint = capsys.readouterr().out.split("translate with transformers: ")[1].strip()   # runs
    scope = {"texts": SENTENCES, "AutoTokenizer": transformers.AutoTokenizer,
             "AutoModelForSeq2SeqLM": transformers.AutoModelForSeq2SeqLM}
    exec(hint.replace("tok.batch_decode(", "got = tok.batch_decode("), scope)
    assert len(scope["got"]) == len(SENTENCES) and "pipeline" not in hint
