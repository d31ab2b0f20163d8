"""Shared pytest fixtures.

Data fixtures (reuse them instead of writing corpora by hand):

``tiny_corpus``     a directory with ``{train,val,test}.{de,en}``: 200 / 20 / 20 generated,
                    word-for-word parallel German-English pairs with umlauts and ß
                    ("Ein großer Hund läuft über die Straße ." / "A big dog runs across the
                    street ."). Deterministic; small enough to train a dim-8 model in seconds.
``tiny_overrides``  Hydra overrides pointing ``data`` at ``tiny_corpus`` with a private
                    cache dir and a small vocabulary (unigram, 120 pieces, joint).
``tiny_cfg``        ``compose_config(tiny_overrides)``: a validated full config; compose your
                    own with ``compose_config(tiny_overrides + ["model=rnn", ...])``.
``multi30k_root``   path of the real Multi30k files (``$NMT_DATA_ROOT`` or
                    ``<repo>/../shared/data/multi30k``); the test is skipped when absent.

Helpers (plain functions): ``make_pairs``, ``write_corpus``, ``train_tokenizer(tok_cfg,
pairs, cache_dir)`` for a tokenizer of a list of pairs, ``tiny_transformer(root, n_test)``
for a dim-16 model with its config and tokenizer (checkpoint fixtures build on it), and
``fit_pairs(model, pairs)`` to make a tiny model learn a few id pairs by heart.
"""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tests use tiny models, which run fastest on one thread (and up to 10x slower with
    two when other processes share the 2 cores); subprocesses inherit OMP_NUM_THREADS=1."""
    import torch

    before, env_before = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    yield
    torch.set_num_threads(before)
    if env_before is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = env_before

# Parallel phrase lists: (German, English), combined position by position.
_SUBJECTS = [("Ein großer Hund", "A big dog"), ("Eine kleine Katze", "A small cat"),
             ("Ein junger Mann", "A young man"), ("Eine ältere Frau", "An older woman"),
             ("Zwei Mädchen", "Two girls"), ("Ein Junge", "A boy"),
             ("Drei Männer", "Three men"), ("Ein müder Arbeiter", "A tired worker")]
_VERBS = [("läuft", "runs"), ("springt", "jumps"), ("geht", "walks"), ("spielt", "plays"),
          ("wartet", "waits"), ("tanzt", "dances")]
_PLACES = [("über die Straße", "across the street"), ("im Park", "in the park"),
           ("am Strand", "on the beach"), ("vor dem Gebäude", "in front of the building"),
           ("neben dem Fluss", "next to the river"), ("auf der Brücke", "on the bridge"),
           ("in der Küche", "in the kitchen"), ("durch den Schnee", "through the snow")]
_EXTRAS = [("", ""), (" mit einem Ball", " with a ball"), (" bei Sonnenschein", " in the sunshine"),
           (" früh am Morgen", " early in the morning")]


def make_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` generated (German, English) sentence pairs, deterministic in ``seed``."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        (sd, se), (vd, ve) = rng.choice(_SUBJECTS), rng.choice(_VERBS)
        (pd, pe), (xd, xe) = rng.choice(_PLACES), rng.choice(_EXTRAS)
        pairs.append((f"{sd} {vd} {pd}{xd} .", f"{se} {ve} {pe}{xe} ."))
    return pairs


def write_corpus(root: Path, sizes: dict[str, int] | None = None) -> Path:
    """Write ``{split}.de`` / ``{split}.en`` files under ``root``; returns ``root``."""
    sizes = sizes or {"train": 200, "val": 20, "test": 20}
    root.mkdir(parents=True, exist_ok=True)
    for seed, (split, n) in enumerate(sizes.items()):
        pairs = make_pairs(n, seed)
        (root / f"{split}.de").write_text("".join(p[0] + "\n" for p in pairs), encoding="utf-8")
        (root / f"{split}.en").write_text("".join(p[1] + "\n" for p in pairs), encoding="utf-8")
    return root


def write_multilingual_corpus(root: Path, sizes: dict[str, int] | None = None,
                              fr_every: int = 1) -> Path:
    """:func:`write_corpus` plus a line-aligned ``{split}.fr`` (the English words in reverse
    order, a stand-in language): de, en and fr, 3-way parallel. ``fr_every`` = k keeps every
    k-th French line, the others blank (dropped from training: an unbalanced en-fr)."""
    write_corpus(root, sizes)
    for split in (sizes or {"train": 200, "val": 20, "test": 20}):
        lines = (root / f"{split}.en").read_text(encoding="utf-8").splitlines()
        fr = [" ".join(reversed(line.split())) if i % fr_every == 0 or split != "train" else ""
              for i, line in enumerate(lines)]
        (root / f"{split}.fr").write_text("".join(f + "\n" for f in fr), encoding="utf-8")
    return root


def train_tokenizer(tok_cfg, pairs: list[tuple[str, str]], cache_dir: Path):
    """The (de, en) tokenizer of ``data.tokenizer`` settings ``tok_cfg`` (a dict or a config)
    trained on ``pairs``, cached under ``cache_dir`` by a hash of the pairs."""
    from omegaconf import OmegaConf

    from nmt.data.tokenizer import tokenizer_from_pairs

    data_hash = hashlib.sha256(repr(pairs).encode()).hexdigest()
    return tokenizer_from_pairs(OmegaConf.create(tok_cfg), "de", "en", lambda: iter(pairs),
                                cache_dir, data_hash)


def tiny_transformer(root: Path, n_test: int):
    """A dim-16, one-layer Transformer over a generated corpus under ``root``: writes
    ``root/corpus`` (100 train pairs, ``n_test`` test pairs), trains a 100-piece tokenizer
    into ``root/cache`` and returns ``(cfg, tokenizer, model)`` (model freshly initialized
    from torch's current RNG state)."""
    from nmt.config import compose_config
    from nmt.data.corpus import iter_parallel, split_fingerprint
    from nmt.data.tokenizer import tokenizer_from_pairs
    from nmt.models import build_model

    corpus = write_corpus(root / "corpus", {"train": 100, "test": n_test})
    cfg = compose_config([f"data.root={corpus}", f"data.cache_dir={root / 'cache'}",
                          "data.test_split=test", "data.tokenizer.vocab_size=100",
                          "model.d_model=16", "model.heads=2", "model.ff_dim=32",
                          "model.encoder_layers=1", "model.decoder_layers=1"])
    tok = tokenizer_from_pairs(cfg.data.tokenizer, "de", "en",
                               lambda: iter_parallel(cfg.data, "train"),
                               cfg.data.cache_dir, split_fingerprint(cfg.data, "train"))
    return cfg, tok, build_model(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size)


def fit_pairs(model, pairs: list[tuple[list[int], list[int]]], steps: int = 200,
              lr: float = 1e-2) -> float:
    """Train ``model`` (build it without dropout) on ``pairs`` of (source ids, target ids),
    both without EOS, by ``steps`` full-batch Adam steps on the cross-entropy; leaves it in
    eval mode and returns the last training loss. Seed the model's initialisation yourself;
    the training itself draws no random numbers. A tiny model learns 5-10 short pairs
    (loss < 0.01) in 200 steps, about a second on one core."""
    import torch
    import torch.nn.functional as F

    from nmt.data.batching import make_src_batch
    from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID

    src, mask = make_src_batch([s for s, _ in pairs])
    width = max(len(t) for _, t in pairs) + 1
    tgt_in = torch.full((len(pairs), width), PAD_ID)
    tgt_out = torch.full((len(pairs), width), PAD_ID)
    for i, (_, t) in enumerate(pairs):
        tgt_in[i, : len(t) + 1] = torch.tensor([BOS_ID] + list(t))
        tgt_out[i, : len(t) + 1] = torch.tensor(list(t) + [EOS_ID])
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        logits, _ = model(src, mask, tgt_in, need_alignment=False)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                               ignore_index=PAD_ID)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return loss.item()


@pytest.fixture
def tiny_corpus(tmp_path: Path) -> Path:
    """Directory with ``{train,val,test}.{de,en}`` (200 / 20 / 20 pairs, umlauts included)."""
    return write_corpus(tmp_path / "corpus")


@pytest.fixture
def tiny_overrides(tiny_corpus: Path, tmp_path: Path) -> list[str]:
    """Overrides for ``compose_config``: tiny corpus, private cache, 120-piece joint vocab,
    run_dir under ``tmp_path``."""
    return [f"data.root={tiny_corpus}", f"data.cache_dir={tmp_path / 'cache'}",
            "data.test_split=test", "data.tokenizer.vocab_size=120",
            f"run_dir={tmp_path / 'run'}"]


@pytest.fixture
def tiny_cfg(tiny_overrides: list[str]):
    """Validated full config (default model) on the tiny corpus."""
    from nmt.config import compose_config

    return compose_config(tiny_overrides)


@pytest.fixture
def multi30k_root() -> Path:
    """Real Multi30k directory; skips the test when it is not on this machine."""
    root = Path(os.environ.get("NMT_DATA_ROOT", REPO_ROOT.parent / "shared" / "data" / "multi30k"))
    if not (root / "train.de").is_file():
        pytest.skip(f"Multi30k not found at {root} (set NMT_DATA_ROOT)")
    return root


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free right now, for torchrun's ``--master_port``, which
    needs a number: another process may take it before torchrun binds it. A server of ours
    binds port 0 and reports the port it got (nmt-serve: ``serve.port=0``)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# A dim-16 one-layer Transformer and a few-step training on the tiny corpus. The plain path:
# fp32 (exact comparisons; `auto` is bf16 on a CPU with AMX) and no moving average (the
# Transformer recipe's 0.999 would keep a few-step run at its initial weights).
TINY_MODEL = ["model.d_model=16", "model.heads=2", "model.ff_dim=32", "model.encoder_layers=1",
              "model.decoder_layers=1"]
TINY_TRAIN = ["train.batch_tokens=256", "train.log_every_steps=2", "train.warmup_steps=4",
              "train.lr=0.01", "train.early_stopping_patience=null", "search.max_len_b=5",
              "search.max_len_a=1.0", "train.precision=fp32", "train.ema_decay=null"]


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """One tokenizer/token cache for the module (the tiny corpus is the same in every test)."""
    return tmp_path_factory.mktemp("nmt_cache")

TINY_RNN = ["model=rnn", "model.emb_dim=8", "model.encoder_hidden=8", "model.decoder_hidden=16",
            "model.attention_dim=16", "model.output_dim=16", "train.batch_tokens=256",
            "train.log_every_steps=1", "train.early_stopping_patience=null", "device=cpu",
            "train.precision=fp32", "train.ema_decay=null"]   # the plain path, as TINY_TRAIN


def tiny_model_and_batch(model: str, dropout: float):
    """A tiny model (``dropout`` on the embeddings, residuals and activations; none on the
    attention weights, which SDPA drops internally) and a hand-made batch of 3 pairs."""
    import torch

    from nmt.config import compose_config
    from nmt.data.batching import Batch, make_src_batch, make_tgt_batch
    from nmt.models import build_model

    if model == "transformer":
        args = TINY_MODEL + [f"model.dropout={dropout}", "model.attention_dropout=0.0",
                             f"model.activation_dropout={dropout}"]
    else:
        args = TINY_RNN[:6] + [f"model.dropout={dropout}"]
    torch.manual_seed(0)
    net = build_model(compose_config(args).model, 30, 30).train()
    src, src_mask = make_src_batch([[5, 9, 7], [12], [8, 8, 20, 21]])
    tgt_in, tgt_out, _ = make_tgt_batch([[4, 6], [10, 11, 12], [13]])
    return net, Batch(src, src_mask, tgt_in, tgt_out, 11, 9)



@pytest.fixture
def overrides(tiny_overrides, shared_cache) -> list[str]:
    """``tiny_overrides`` with the module-wide cache (run_dir stays last)."""
    return [o for o in tiny_overrides if not o.startswith("data.cache_dir=")][:-1] + \
        [f"data.cache_dir={shared_cache}", tiny_overrides[-1]]


def train(cfg):
    """:func:`nmt.training.trainer.train` with the config's hooks
    (:func:`nmt.extras.training.hooks`), as ``nmt-train`` and ``nmt.train()`` pass them."""
    from nmt.extras.training import hooks
    from nmt.training.trainer import train as run

    return run(cfg, hooks=hooks(cfg))
