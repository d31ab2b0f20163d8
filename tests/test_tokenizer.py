"""SentencePiece tokenizer: special ids, round trip with umlauts, persistence, hash-keyed cache."""

from __future__ import annotations

import logging
import pickle

import pytest
from conftest import train_tokenizer
from omegaconf import OmegaConf

from nmt.config import ConfigError
from nmt.data import tokenizer as tok_mod
from nmt.data.corpus import CorpusError, iter_text_pair
from nmt.data.tokenizer import Tokenizer
from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def _cfg(**kw):
    base = {"type": "unigram", "vocab_size": 120, "character_coverage": 1.0, "joint": True,
            "input_sentence_size": 1000}
    return OmegaConf.create({**base, **kw})


@pytest.fixture
def train_texts(tiny_corpus):
    pairs = list(iter_text_pair(tiny_corpus / "train.de", tiny_corpus / "train.en"))
    return [s for s, _ in pairs], [t for _, t in pairs]


def _train(tok_cfg, src, tgt, cache_dir):
    return train_tokenizer(tok_cfg, list(zip(src, tgt, strict=True)), cache_dir)


def encode_src(tok, text):
    return tok.encode_src_batch([text])[0]


def decode_src(tok, ids):
    """Source ids -> text (the pieces joined: SentencePiece's decoding without unknowns)."""
    return "".join(tok.src_pieces(ids)).replace("\u2581", " ").strip()


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
@pytest.mark.parametrize("joint", [True, False])
def test_round_trip_with_umlauts(tmp_path, train_texts, model_type, joint):
    src, tgt = train_texts
    tok = _train(_cfg(type=model_type, joint=joint), src, tgt,
                                  tmp_path / "cache")
    assert tok.joint is joint
    for text in ["Eine ältere Frau läuft über die Straße früh am Morgen .",
                 "Zwei Mädchen tanzen durch den Schnee ."] + src[:20]:
        ids = encode_src(tok, text)
        assert ids and all(i > EOS_ID for i in ids)  # no specials added, nothing unknown
        assert decode_src(tok, ids) == text
    assert [tok.decode_tgt(ids) for ids in tok.encode_tgt_batch(tgt[:20])] == tgt[:20]


def test_special_ids_pieces_and_decode_cleanup(tmp_path, train_texts):
    tok = _train(_cfg(), *train_texts, tmp_path)
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert tok.tgt_pieces([PAD_ID, UNK_ID, BOS_ID, EOS_ID]) == ["<pad>", "<unk>", "<s>", "</s>"]
    ids = tok.encode_tgt_batch(["A big dog runs ."])[0]
    assert "".join(tok.tgt_pieces(ids)).replace("\u2581", " ").strip() == "A big dog runs ."
    # BOS and PAD are dropped, decoding stops at the first EOS.
    assert tok.decode_tgt([BOS_ID, *ids, EOS_ID, *ids, PAD_ID]) == "A big dog runs ."
    assert tok.decode_tgt([EOS_ID, *ids]) == ""
    # nmt_nfkc normalisation: extra spaces collapse.
    assert tok.decode_tgt(tok.encode_tgt_batch(["  A   big dog "])[0]) == "A big dog"
    assert tok.src_vocab_size == tok.tgt_vocab_size == 120


def test_state_dict_and_save_load(tmp_path, train_texts):
    src, tgt = train_texts
    for joint in (True, False):
        tok = _train(_cfg(joint=joint), src, tgt, tmp_path / "c")
        state = pickle.loads(pickle.dumps(tok.state_dict()))
        assert not any(isinstance(v, str) and "/" in v for v in state.values())  # no paths
        again = Tokenizer.from_state_dict(state)
        tok.save(tmp_path / f"saved{joint}")
        loaded = Tokenizer.load(tmp_path / f"saved{joint}")
        for other in (again, loaded):
            assert other.joint is joint
            assert other.fingerprint == tok.fingerprint
            assert other.encode_src_batch(src[:3]) == tok.encode_src_batch(src[:3])
            assert other.encode_tgt_batch(tgt[:3]) == tok.encode_tgt_batch(tgt[:3])
            assert other.settings["vocab_size"] == 120
    with pytest.raises(FileNotFoundError, match="no tokenizer saved"):
        Tokenizer.load(tmp_path / "nowhere")


def test_cache_hit_and_invalidation(tmp_path, train_texts, monkeypatch):
    src, tgt = train_texts
    pairs = list(zip(src, tgt, strict=True))
    first = tok_mod.tokenizer_from_pairs(_cfg(), "de", "en", lambda: iter(pairs), tmp_path, "h1")
    assert len(list((tmp_path / "tokenizers").iterdir())) == 1

    def no_training(*args, **kwargs):
        raise AssertionError("the tokenizer was retrained although it is cached")

    with monkeypatch.context() as m:
        m.setattr(tok_mod, "train_sentencepiece", no_training)
        # the same data hash and settings: a cache hit that never reads the pairs
        again = tok_mod.tokenizer_from_pairs(_cfg(), "de", "en", no_training, tmp_path, "h1")
        assert again.fingerprint == first.fingerprint
    # other data or other settings -> a new model
    tok_mod.tokenizer_from_pairs(_cfg(), "de", "en", lambda: iter(pairs[:-1]), tmp_path, "h2")
    tok_mod.tokenizer_from_pairs(_cfg(type="bpe"), "de", "en", lambda: iter(pairs), tmp_path, "h1")
    assert len(list((tmp_path / "tokenizers").iterdir())) == 3


def test_small_corpus_gives_smaller_vocab_with_warning(tmp_path, train_texts, caplog):
    src, tgt = train_texts
    with caplog.at_level(logging.WARNING, logger="nmt.data"):
        tok = _train(_cfg(vocab_size=5000), src, tgt, tmp_path)
    assert 4 < tok.src_vocab_size < 5000
    assert "asked for vocab_size=5000" in caplog.text
    with pytest.raises(CorpusError, match="all empty"):
        _train(_cfg(), ["", " "], ["", ""], tmp_path)


def test_too_small_vocab_is_one_config_error_naming_the_key(tmp_path, train_texts):
    src, tgt = train_texts
    with pytest.raises(ConfigError, match=r"data\.tokenizer\.vocab_size=5 is too small") as err:
        _train(_cfg(vocab_size=5), src, tgt, tmp_path)
    msg = str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert "\n" not in msg and ".cc(" not in msg                 # no C++ trace
    need = int(msg.split("Set data.tokenizer.vocab_size=")[1].split()[0])
    assert need > 5                                              # the advice works:
    tok = _train(_cfg(vocab_size=need), src, tgt, tmp_path)
    assert tok.src_vocab_size >= need


# ------------------------------------------------------------------ bounded sample
def test_sample_is_bounded_deterministic_and_in_stream_order():
    pairs = [(f"s{i}", f"t{i}") for i in range(1000)]
    sample, total = tok_mod.sample_pairs(iter(pairs), 10, seed=0)
    assert total == 1000 and len(sample) == 10
    assert tok_mod.sample_pairs(iter(pairs), 10, seed=0) == (sample, 1000)
    assert tok_mod.sample_pairs(iter(pairs), 10, seed=1)[0] != sample
    positions = [int(s[1:]) for s, _ in sample]
    assert positions == sorted(positions) and all(pairs[p] == (f"s{p}", f"t{p}") for p in positions)
    # golden values (Algorithm L with random.Random(0)): a change of the sampler changes models
    sampled = tok_mod.sample_pairs(iter(pairs[:20]), 3, seed=0)[0]
    assert [int(s[1:]) for s, _ in sampled] == [2, 12, 18]
    # a stream that fits is kept whole, in order
    assert tok_mod.sample_pairs(iter(pairs[:10]), 10) == (pairs[:10], 10)
    assert tok_mod.sample_pairs(iter(pairs[:4]), 10) == (pairs[:4], 4)
    assert tok_mod.sample_pairs(iter([]), 3) == ([], 0)


def test_sample_is_uniform_and_reads_the_whole_stream():
    n, k, trials = 20, 5, 2000
    counts = [0] * n
    for seed in range(trials):
        for s, _ in tok_mod.sample_pairs(((str(i), "") for i in range(n)), k, seed=seed)[0]:
            counts[int(s)] += 1
    expected = trials * k / n                                   # 500, sd about 19
    assert all(abs(c - expected) < 80 for c in counts), counts

    def broken_at_the_end():
        yield from (("a", "b") for _ in range(50))
        raise CorpusError("train.de, line 51: invalid UTF-8")

    with pytest.raises(CorpusError, match="line 51"):
        tok_mod.sample_pairs(broken_at_the_end(), 5)


@pytest.mark.parametrize("joint", [True, False])
def test_tokenizer_trains_on_a_bounded_sample(tmp_path, train_texts, monkeypatch, caplog, joint):
    src, tgt = train_texts                                      # 200 pairs
    seen = []
    real = tok_mod.train_sentencepiece

    def spy(texts, *args):
        seen.append(list(texts))
        return real(texts, *args)

    monkeypatch.setattr(tok_mod, "train_sentencepiece", spy)
    with caplog.at_level(logging.INFO, logger="nmt.data"):
        small = _train(_cfg(joint=joint, input_sentence_size=60), src, tgt, tmp_path / "a")
    assert "training on a sample of" in caplog.text
    if joint:                                                   # 30 pairs, both sides
        assert [len(x) for x in seen] == [60]
        assert set(zip(seen[0][:30], seen[0][30:], strict=True)) <= set(zip(src, tgt, strict=True))
    else:                                                       # 60 pairs per side
        assert [len(x) for x in seen] == [60, 60]
    # deterministic: another cache directory trains the same model from the same sample
    first, seen[:] = list(seen), []
    again = _train(_cfg(joint=joint, input_sentence_size=60), src, tgt, tmp_path / "b")
    assert again.fingerprint == small.fingerprint and seen == first
    # the bound is part of the cache key; a bound above the corpus size trains on all of it
    seen[:] = []
    whole = _train(_cfg(joint=joint, input_sentence_size=400), src, tgt, tmp_path / "a")
    assert seen == ([src + tgt] if joint else [src, tgt])
    assert len(list((tmp_path / "a" / "tokenizers").iterdir())) == 2
    assert whole.fingerprint != small.fingerprint
