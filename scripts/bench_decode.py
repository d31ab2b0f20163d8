"""Decoding speed: greedy and beam-5 translation of a whole split.

    python scripts/bench_decode.py checkpoint=runs/tf/checkpoints/best.pt split=test_2016_flickr
    python scripts/bench_decode.py random=transformer        # untrained reference-size model

Arguments are the overrides of configs/evaluate.yaml (checkpoint, split, data.root, device,
length_penalty, max_len_a, max_len_b, batch_sentences) plus:

* ``random=transformer|rnn``: instead of a checkpoint, a randomly initialised model of the
  reference config (configs/model/*.yaml) with the tokenizer that ``nmt-train`` would use
  for the default data config (``nmt.data.pipeline.prepare_data``: the same cache entry, trained on
  Multi30k train if not cached). Untrained models rarely emit EOS early, so
  their outputs run to the maximum length: a pessimistic measurement.
* ``repeats=N`` (default 1): run each search N times, report the median time.
* ``threads=N``: torch.set_num_threads(N) (default: torch's choice).
* ``ctranslate2=auto|true|false`` (default auto: true when ``ctranslate2`` is installed and
  the model is a Transformer): also time the CTranslate2 engine on the same model, exported
  into a temporary directory as float32 and as int8 (:mod:`nmt.extras.tools.ctranslate2`), with
  ``intra_threads`` = torch's thread count and ``inter_threads=1``, the same sentences, batch
  settings and searches. Within each repeat the engines run in turn (PyTorch, CTranslate2
  float32, CTranslate2 int8), so a slower or faster spell of a shared machine hits them alike.

Times and target-token counts are those :func:`nmt.evaluation.evaluate.evaluate_split`
reports (``seconds``: tokenization, search and detokenization; not model loading nor BLEU;
``n_tgt_tokens``: output subwords incl. EOS). The last line
is ``key=value`` pairs: greedy_sents_per_s, greedy_seconds, beam5_sents_per_s,
beam5_seconds, beam5_tgt_tokens_per_s, beam5_mean_len, ... (BLEU too, for reference), and
with CTranslate2 the same figures prefixed ``ct2_fp32_`` and ``ct2_int8_``
(``ct2_fp32_greedy_sents_per_s``, ``ct2_fp32_beam5_sents_per_s``,
``ct2_int8_beam5_sents_per_s``, ...).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import torch
from omegaconf import OmegaConf

from nmt.cli.common import decode_settings, exit_on_user_error
from nmt.config import ConfigError, SearchSchema, compose_config, validate_search
from nmt.runtime import resolve_device


def _pop(argv: list[str], key: str, default: str | None) -> str | None:
    for arg in list(argv):
        if arg.startswith(f"{key}="):
            argv.remove(arg)
            return arg.split("=", 1)[1]
    return default


def random_model(name: str, device):
    """An untrained reference-size model and the tokenizer nmt-train builds for the default
    data config."""
    from nmt.data.pipeline import prepare_data
    from nmt.models import build_model

    cfg = compose_config([f"model={name}"])
    tokenizer = prepare_data(cfg.data).tokenizer
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    return model.to(device).eval(), tokenizer, cfg


def ctranslate2_engines(translator, use: str, tmp: Path, device) -> list[tuple[str, object]]:
    """``[("ct2_fp32_", ...), ("ct2_int8_", ...)]``: the model exported into ``tmp`` and loaded
    with CTranslate2 (intra_threads = torch's threads, inter_threads = 1), or ``[]``.

    Raises:
        ConfigError: ``use`` is ``true`` but CTranslate2 is missing or the model is no Transformer.
    """
    import importlib.util

    if use == "false":
        return []
    name = translator.config.model.name
    if use == "auto" and (importlib.util.find_spec("ctranslate2") is None or name != "transformer"):
        return []
    from nmt.extras.tools.ctranslate2 import CTranslate2Translator, export

    engines = []
    for quantization in ("float32", "int8"):
        out = export(translator, tmp / quantization, quantization=quantization)
        engine = CTranslate2Translator.from_dir(out, device, intra_threads=torch.get_num_threads(),
                                                inter_threads=1)
        engines.append((f"ct2_{quantization.replace('float', 'fp')}_", engine))
    print(f"CTranslate2: exported float32 and int8 to {tmp}, {torch.get_num_threads()} intra "
          "threads, 1 inter thread", flush=True)
    return engines


def timings(engines: list[tuple[str, object]], src: list[str], ref: list[str], settings: dict,
            repeats: int) -> dict[str, object]:
    """Greedy and beam-5 figures of every engine: ``{prefix + key: value}``.

    Each search runs ``repeats`` times per engine, the engines in turn within each repeat;
    times are medians (:func:`nmt.evaluation.evaluate.evaluate_split`'s ``seconds``).
    """
    from nmt.evaluation.evaluate import evaluate_split

    fields: dict[str, object] = {"n_sentences": len(src)}
    for label, beam in (("greedy", 1), ("beam5", 5)):
        search = dict(settings, beam_size=beam, n_best=1)
        runs: dict[str, list[float]] = {prefix: [] for prefix, _ in engines}
        last: dict[str, dict] = {}
        for _ in range(repeats):
            for prefix, engine in engines:
                last[prefix] = evaluate_split(engine, src, ref, search,
                                              score_references=False).scores
                runs[prefix].append(last[prefix]["seconds"])
        for prefix, _ in engines:
            seconds = statistics.median(runs[prefix])
            n_tok = last[prefix]["n_tgt_tokens"]  # deterministic search: the same in every run
            fields.update({
                f"{prefix}{label}_seconds": round(seconds, 2),
                f"{prefix}{label}_sents_per_s": round(len(src) / seconds, 1),
                f"{prefix}{label}_tgt_tokens_per_s": round(n_tok / seconds, 1),
                f"{prefix}{label}_mean_len": round(n_tok / max(len(src), 1), 1),
                f"{prefix}{label}_bleu": round(last[prefix]["bleu"], 2),
            })
            print(f"{prefix or 'pytorch_'}{label}: {seconds:.2f} s (runs: "
                  f"{', '.join(f'{r:.2f}' for r in runs[prefix])}), "
                  f"{len(src) / seconds:.1f} sentences/s, {n_tok / seconds:.0f} target tokens/s, "
                  f"mean output length {n_tok / max(len(src), 1):.1f} subwords incl. EOS, "
                  f"BLEU {last[prefix]['bleu']:.2f}", flush=True)
    return fields


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    random_name = _pop(argv, "random", None)
    repeats = int(_pop(argv, "repeats", "1"))
    threads = _pop(argv, "threads", None)
    use_ct2 = _pop(argv, "ctranslate2", "auto")
    if random_name and not any(a.startswith("checkpoint=") for a in argv):
        argv.append(f"checkpoint=random_{random_name}")
    if threads:
        torch.set_num_threads(int(threads))

    def check(cfg):
        if OmegaConf.is_missing(cfg, "checkpoint"):
            raise ConfigError("give checkpoint=PATH or random=transformer|rnn.")
        if use_ct2 not in ("auto", "true", "false"):
            raise ConfigError(f"ctranslate2={use_ct2} must be auto, true or false.")
        validate_search(decode_settings(cfg, (SearchSchema,)))
        return cfg

    def run(cfg) -> int:
        from nmt.cli.evaluate import load_texts
        from nmt.inference.translator import Translator

        device = resolve_device(cfg.device)
        if random_name:
            translator = Translator(*random_model(random_name, device), device=device)
        else:
            translator = Translator.from_checkpoint(cfg.checkpoint, device)
        model = translator.model
        name, src, ref = load_texts(cfg, translator.config)
        print(f"model: {random_name or cfg.checkpoint} ({model.num_parameters():,} parameters), "
              f"split {name}: {len(src)} sentences, device {device}, "
              f"{torch.get_num_threads()} threads", flush=True)
        engines = [("", translator)]
        with tempfile.TemporaryDirectory(prefix="bench_decode_ct2_") as tmp:
            engines += ctranslate2_engines(translator, use_ct2, Path(tmp), device)
            fields = timings(engines, src, ref, decode_settings(cfg, (SearchSchema,)), repeats)
        print(" ".join(f"{k}={v}" for k, v in fields.items()))
        return 0

    return exit_on_user_error("bench_decode.py", lambda: run(
        compose_config(argv, config_name="evaluate", validate_fn=check)))


if __name__ == "__main__":
    raise SystemExit(main())
