"""Marian (OPUS-MT format) export and import measured against transformers (docs/marian.md).

    python scripts/bench_marian.py --checkpoint runs/tf/checkpoints/last.pt [--repeats 3]

(a) export: the checkpoint exported with nmt-export format=marian and loaded in transformers
    (MarianMTModel + MarianTokenizer, greedy generate and batch_decode, what the translation
    pipeline of transformers 4.x does) against nmt's greedy translations (nmt-translate's
    settings) of test_2016_flickr: identical outputs and sacreBLEU of both;
(b) speed: that Marian directory imported back (nmt-import), nmt's decoding against
    transformers' generate on the same weights, 2 threads, greedy and beam 5 (length penalty 0
    in both: the two libraries' penalties differ), fixed maximum length, alternating A/B pairs,
    medians; the outputs must be identical.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def hf_translate(model, tok, sentences, num_beams: int, max_new_tokens, batch: int = 100):
    """Token ids (nmt's: no start, no </s>, no pad) and texts of ``generate``, in input order;
    ``max_new_tokens``: an int or a function of the batch's sentence indices."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    ids, texts = [None] * len(sentences), [None] * len(sentences)
    for start in range(0, len(order), batch):
        idx = order[start:start + batch]
        enc = tok([sentences[i] for i in idx], return_tensors="pt", padding=True)
        limit = max_new_tokens(idx, enc) if callable(max_new_tokens) else max_new_tokens
        with torch.no_grad():
            out = model.generate(**enc, num_beams=num_beams, max_new_tokens=limit, do_sample=False,
                                 length_penalty=0.0, early_stopping=True)
        for i, row, text in zip(idx, out.tolist(), tok.batch_decode(out, skip_special_tokens=True),
                                strict=True):
            row = [t for t in row[1:] if t != model.config.pad_token_id]
            eos = model.config.eos_token_id
            ids[i], texts[i] = (row[: row.index(eos)] if eos in row else row), text
    return ids, texts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data-root", default=os.environ.get(
        "NMT_DATA_ROOT", str(Path(__file__).resolve().parents[1].parent / "shared/data/multi30k")))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import sacrebleu
    import transformers

    from nmt.extras.tools.marian import export_marian, import_marian
    from nmt.inference.translator import Translator, search_settings

    root = Path(args.data_root)
    src = (root / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    ref = (root / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    tmp = Path(tempfile.mkdtemp(prefix="bench_marian_"))
    hf_dir = export_marian(args.checkpoint, tmp / "hf")
    hf = transformers.MarianMTModel.from_pretrained(str(hf_dir)).eval()
    tok = transformers.MarianTokenizer.from_pretrained(str(hf_dir))
    ours = Translator.from_checkpoint(args.checkpoint)
    print(f"host: {os.cpu_count()} CPUs (shared with other jobs), torch {torch.__version__}, "
          f"transformers {transformers.__version__}, threads {args.threads}")

    # (a) nmt-translate's greedy settings (max length 1.5 |x| + 10 per sentence); generate gets
    # the batch's largest limit + 1 (its </s>), so only a sentence that runs to its own
    # limit in nmt could differ.
    t0 = time.perf_counter()
    nmt_out = ours.translate(src, beam_size=1)
    t_nmt = time.perf_counter() - t0
    defaults = search_settings()
    a, b = float(defaults["max_len_a"]), int(defaults["max_len_b"])
    src_ids = ours.tokenizer.encode_src_batch(src)
    t0 = time.perf_counter()
    hf_ids, hf_texts = hf_translate(hf, tok, src, 1, lambda idx, enc: max(
        int(a * (len(src_ids[i]) + 1) + b) for i in idx) + 1)
    t_hf = time.perf_counter() - t0
    same_ids = sum(t.ids == h for t, h in zip(nmt_out, hf_ids, strict=True))
    same_text = sum(t.text == h for t, h in zip(nmt_out, hf_texts, strict=True))
    bleu_nmt = sacrebleu.corpus_bleu([t.text for t in nmt_out], [ref])
    bleu_hf = sacrebleu.corpus_bleu(hf_texts, [ref])
    print(f"(a) export, greedy, {len(src)} test_2016_flickr sentences: identical ids {same_ids}, "
          f"identical texts {same_text}; BLEU nmt {bleu_nmt.score:.2f}, transformers "
          f"{bleu_hf.score:.2f} (sacreBLEU {sacrebleu.__version__}, default 13a, cased)")
    print(f"    one pass each: nmt {t_nmt:.1f} s, transformers {t_hf:.1f} s")
    if args.skip_speed:
        return 0

    # (b) the Marian directory imported back; same weights in both libraries
    imported, _ = import_marian(hf_dir, tmp / "imported.pt")
    back = Translator.from_checkpoint(imported)
    limit = 128
    for beam in (1, 5):
        times = {"nmt": [], "transformers": []}
        outs = {}
        for _ in range(args.repeats):   # alternating A/B pairs
            t0 = time.perf_counter()
            outs["nmt"] = [t.ids for t in back.translate(src, beam_size=beam, length_penalty=0.0,
                                                         max_len_a=0.0, max_len_b=limit)]
            times["nmt"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            outs["transformers"] = hf_translate(hf, tok, src, beam, limit + 1)[0]
            times["transformers"].append(time.perf_counter() - t0)
        # ids: exported vocab.json is nmt's order and the import keeps it
        same = sum(x == y for x, y in zip(outs["nmt"], outs["transformers"], strict=True))
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"(b) beam {beam}: nmt {med['nmt']:.1f} s, transformers {med['transformers']:.1f} s "
              f"(medians of {args.repeats} alternating pairs; all: {times}); transformers/nmt "
              f"{med['transformers'] / med['nmt']:.2f}x; identical outputs {same}/{len(src)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
