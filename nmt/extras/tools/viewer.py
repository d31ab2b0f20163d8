"""One self-contained HTML page to explore attention: ``nmt-plot ... format=html``.

    items = [(i, data[i]) for i in range(10)]          # data = load_alignments(npz)
    Path("attention.html").write_text(attention_page(items), encoding="utf-8")

The page needs no network and no server: its script and style (the package file
``viewer.html``) and its data are inline. Pick a sentence, an attention kind (cross, encoder,
decoder; ``alignment`` for files written without ``attention=all``), a layer and a head (each
also ``mean``; the page opens on the last layer's head mean); hovering a cell of the heatmap
(an HTML table, white 0, dark blue 1) shows its weight and its row and column subwords. The
address keeps the view (``attention.html#sentence=3&kind=encoder&layer=0&head=mean``, and
``&cell=R,C`` shows that cell's weight as a hover does).

Data: the weights [L,H,R,C] of each sentence and kind as uint16 ``round(w * 65535)`` in base64
(error < 1e-5); all of test_2016_flickr with every attention is ~27 MB (use ``index=A:B``).
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from importlib.resources import files

import numpy as np

from nmt.evaluation.alignments import ATTENTION_KINDS, Alignment, attention_labels


def _encode(weights: np.ndarray) -> str:
    """float weights in 0..1 -> base64 of little-endian uint16 ``round(w * 65535)``."""
    q = np.rint(np.clip(np.asarray(weights, dtype=np.float32), 0.0, 1.0) * 65535.0)
    return base64.b64encode(q.astype("<u2").tobytes()).decode("ascii")


def page_data(items: Sequence[tuple[int, Alignment]]) -> list[dict]:
    """Per (sentence number, :class:`Alignment`) its ``index``, ``src`` and ``tgt`` labels and
    per kind its ``shape`` [L,H,R,C], ``rows`` / ``cols`` labels, axis ``names`` and ``data``
    (see the module docstring); without stored attention, ``alignment`` [1,1,T,S]."""
    records = []
    for index, item in items:
        weights = dict(item.attention) or {"alignment": np.asarray(item.matrix)[None, None]}
        kinds = {}
        for kind in (k for k in (*ATTENTION_KINDS, "alignment") if k in weights):
            rows, cols, names = attention_labels(kind, item.src, item.tgt)
            kinds[kind] = {"shape": list(np.shape(weights[kind])), "rows": rows, "cols": cols,
                           "names": list(names), "data": _encode(weights[kind])}
        records.append({"index": int(index), "src": list(item.src), "tgt": list(item.tgt),
                        "kinds": kinds})
    return records


def attention_page(items: Sequence[tuple[int, Alignment]], title: str = "attention",
                   serve: dict | None = None) -> str:
    """The whole HTML page for ``items`` (sentence number, :class:`Alignment`), at least one;
    with ``serve`` (``{"beam_size": default, "key": whether /v1 needs an API key,
    "tgt_lang": default, "targets": the model's target languages}``) the
    ``nmt-serve`` page instead: a text box whose translations (``POST /v1/translate`` with
    ``alignment``, records as :func:`page_data`'s plus ``translation``, ``links`` and
    ``marks``) are added to the sentences; ``#text=...&go=1`` fills in and submits it."""
    payload = json.dumps({"title": title, "sentences": page_data(items), "serve": serve},
                         ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("<", "\\u003c")  # "</script>" can never end the block early
    page = files("nmt.extras.tools").joinpath("viewer.html").read_text(encoding="utf-8")
    return page.replace("__TITLE__", html.escape(title)).replace("__DATA__", payload)
