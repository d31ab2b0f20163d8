"""One self-contained HTML page to explore attention: ``nmt-plot ... format=html``.

    items = [(i, data[i]) for i in range(10)]          # data = load_alignments(npz)
    Path("attention.html").write_text(attention_page(items), encoding="utf-8")

The page needs no network and no server: its script, style and data are inline. Pick a
sentence, an attention kind (cross, encoder, decoder; ``alignment`` for files written
without ``attention=all``), a layer and a head (each also ``mean``; the page opens on the
last layer's head mean); the heatmap is an
HTML table, one ``td.cell`` per weight (white 0, dark blue 1); hovering a cell shows its
weight and its row and column subwords. The view is kept in the address
(``attention.html#sentence=3&kind=encoder&layer=0&head=mean``), so a link opens it again;
``&cell=R,C`` in such a link also shows that cell's weight, as a hover does.

Data: per sentence and kind, the weights [L,H,R,C] quantised to ``round(w * 65535)`` as
little-endian uint16 in base64 (2.7 characters per weight, error < 1e-5), inside a JSON
``<script type="application/json">`` block. All of test_2016_flickr (1,000 sentences) with
every attention of the 3+3-layer, 4-head reference Transformer makes a page of about
27 MB; pick a range with ``index=START:STOP``.

When the script has drawn a view without error, ``#status`` gets ``data-state="ok"``; an
uncaught error sets ``data-state="error"`` and writes the message there (what the test
reads from Chromium's ``--dump-dom``).
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence

import numpy as np

from nmt.evaluation.alignments import ATTENTION_KINDS, Alignment
from nmt.evaluation.plot import attention_labels


def _encode(weights: np.ndarray) -> str:
    """float weights in 0..1 -> base64 of little-endian uint16 ``round(w * 65535)``."""
    q = np.rint(np.clip(np.asarray(weights, dtype=np.float32), 0.0, 1.0) * 65535.0)
    return base64.b64encode(q.astype("<u2").tobytes()).decode("ascii")


def page_data(items: Sequence[tuple[int, Alignment]]) -> list[dict]:
    """The page's JSON records: per sentence its index, labels and every kind it holds.

    Each kind has ``shape`` [L,H,R,C], ``rows`` / ``cols`` labels
    (:func:`nmt.evaluation.plot.attention_labels`), axis ``names`` and ``data`` (see the
    module docstring). A sentence without stored attention gets ``alignment`` [1,1,T,S].
    """
    records = []
    for index, item in items:
        weights = dict(item.attention) or {"alignment": np.asarray(item.matrix)[None, None]}
        kinds = {}
        for kind in (*ATTENTION_KINDS, "alignment"):
            if kind not in weights:
                continue
            rows, cols, names = attention_labels(kind, item.src, item.tgt)
            w = np.asarray(weights[kind])
            if w.ndim != 4 or w.shape[2:] != (len(rows), len(cols)):
                raise ValueError(f"sentence {index}: {kind} attention shape {w.shape} does not "
                                 f"match {len(rows)} x {len(cols)} labels.")
            kinds[kind] = {"shape": list(w.shape), "rows": rows, "cols": cols,
                           "names": list(names), "data": _encode(w)}
        records.append({"index": int(index), "src": list(item.src), "tgt": list(item.tgt),
                        "kinds": kinds})
    return records


def attention_page(items: Sequence[tuple[int, Alignment]], title: str = "attention") -> str:
    """The whole HTML page (a string) for ``items``: (sentence number, :class:`Alignment`).

    Raises:
        ValueError: no items, or an attention shape that does not match its labels.
    """
    if not items:
        raise ValueError("no sentences to show: give at least one.")
    payload = json.dumps({"title": title, "sentences": page_data(items)},
                         ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("<", "\\u003c")  # "</script>" can never end the block early
    return (_PAGE.replace("__TITLE__", html.escape(title))
            .replace("__STYLE__", _STYLE).replace("__SCRIPT__", _SCRIPT)
            .replace("__DATA__", payload))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>__TITLE__</title>
<style>__STYLE__</style>
</head>
<body>
<header>
  <h1>__TITLE__</h1>
  <div id="controls">
    <label>sentence <select id="sentence"></select></label>
    <label>attention <select id="kind"></select></label>
    <label>layer <select id="layer"></select></label>
    <label>head <select id="head"></select></label>
    <span class="scale"><span>0</span><span class="bar"></span><span>1</span></span>
  </div>
  <p id="texts"></p>
  <p id="axes"></p>
  <p id="info">Hover a cell to read its weight.</p>
</header>
<div id="view"><table id="heatmap"></table></div>
<p id="status" data-state="loading">loading</p>
<script id="data" type="application/json">__DATA__</script>
<script>__SCRIPT__</script>
</body>
</html>
"""

_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 8px; }
#controls { display: flex; flex-wrap: wrap; gap: 14px; align-items: center; }
#controls select { font: inherit; max-width: 40em; }
.scale { display: inline-flex; gap: 4px; align-items: center; }
.scale .bar { width: 120px; height: 12px; border: 1px solid #999;
  background: linear-gradient(to right, rgb(255,255,255), rgb(8,48,107)); }
#texts { color: #555; margin: 8px 0 4px; }
#info { min-height: 1.4em; margin: 4px 0 10px; font-variant-numeric: tabular-nums; }
#info b { color: #08306b; }
#view { overflow: auto; }
table { border-collapse: collapse; }
td.cell { width: 22px; height: 22px; min-width: 22px; padding: 0; border: 1px solid #fff; }
th { font-weight: normal; white-space: nowrap; padding: 0 4px; }
th.row { text-align: right; }
th.col { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left;
  vertical-align: bottom; padding: 4px 0; width: 22px; }
th.hl { background: #fdd0a2; }
#axes { color: #555; margin: 0; font-style: italic; }
td.cell.hot { outline: 2px solid #e6550d; }
#status { color: #888; font-size: 12px; }
#status[data-state="error"] { color: #b00; font-weight: bold; }
"""

_SCRIPT = r"""
"use strict";
const statusEl = document.getElementById("status");
function fail(message) {
  statusEl.dataset.state = "error";
  statusEl.textContent = "error: " + message;
}
window.onerror = function (message, source, line) { fail(message + " (line " + line + ")"); };
try {
  const DATA = JSON.parse(document.getElementById("data").textContent);
  const S = DATA.sentences;
  const $ = (id) => document.getElementById(id);
  const cache = new Map();
  const state = { sentence: 0, kind: "", layer: "last", head: "mean" };

  function weights(s, kind) {      // Float32Array of L*H*R*C weights, decoded once
    const key = s + "/" + kind;
    if (!cache.has(key)) {
      const bin = atob(S[s].kinds[kind].data);
      const out = new Float32Array(bin.length / 2);
      for (let i = 0; i < out.length; i++) {
        out[i] = (bin.charCodeAt(2 * i) | (bin.charCodeAt(2 * i + 1) << 8)) / 65535;
      }
      cache.set(key, out);
    }
    return cache.get(key);
  }
  function matrix(s, kind, layer, head) {   // R*C weights of one layer/head, or a mean
    const [L, H, R, C] = S[s].kinds[kind].shape;
    const w = weights(s, kind), out = new Float32Array(R * C);
    const layers = layer === "mean" ? [...Array(L).keys()] : [Number(layer)];
    const heads = head === "mean" ? [...Array(H).keys()] : [Number(head)];
    for (const l of layers) for (const h of heads) {
      const base = (l * H + h) * R * C;
      for (let i = 0; i < R * C; i++) out[i] += w[base + i];
    }
    const n = layers.length * heads.length;
    for (let i = 0; i < R * C; i++) out[i] /= n;
    return out;
  }
  function options(select, values, labels, chosen) {
    select.replaceChildren(...values.map((v, i) => {
      const o = document.createElement("option");
      o.value = String(v);
      o.textContent = labels[i];
      return o;
    }));
    select.value = values.map(String).includes(String(chosen)) ? String(chosen) : String(values[0]);
    return select.value;
  }
  function text(pieces) {
    return pieces.filter((p) => p !== "</s>").join("").replace(/\u2581/g, " ").trim();
  }
  function color(w) {              // white (0) -> rgb(8,48,107) (1)
    const mix = (a, b) => Math.round(a + (b - a) * w);
    return "rgb(" + mix(255, 8) + "," + mix(255, 48) + "," + mix(255, 107) + ")";
  }
  function draw() {
    const s = state.sentence, sent = S[s];
    const kinds = Object.keys(sent.kinds);
    state.kind = options($("kind"), kinds, kinds, state.kind);
    const rec = sent.kinds[state.kind];
    const [L, H, R, C] = rec.shape;
    const layers = [...Array(L).keys(), "mean"], heads = [...Array(H).keys(), "mean"];
    if (state.layer === "last") state.layer = L - 1;    // the default: last layer, head mean
    state.layer = options($("layer"), layers, layers.map(String), state.layer);
    state.head = options($("head"), heads, heads.map(String), state.head);
    $("texts").textContent = "source: " + text(sent.src) + "  \u2192  output: " + text(sent.tgt);
    const m = matrix(s, state.kind, state.layer, state.head);
    const table = $("heatmap");
    const head = document.createElement("tr");
    head.appendChild(document.createElement("th"));
    $("axes").textContent = "rows: " + rec.names[0] + " \u00b7 columns: " + rec.names[1] +
                            " \u00b7 each row sums to 1";
    rec.cols.forEach((label, c) => {
      const th = document.createElement("th");
      th.className = "col";
      th.id = "col" + c;
      th.textContent = label;
      head.appendChild(th);
    });
    const rows = [head];
    for (let r = 0; r < R; r++) {
      const tr = document.createElement("tr");
      const th = document.createElement("th");
      th.className = "row";
      th.id = "row" + r;
      th.textContent = rec.rows[r];
      tr.appendChild(th);
      for (let c = 0; c < C; c++) {
        const td = document.createElement("td");
        td.className = "cell";
        td.dataset.r = r;
        td.dataset.c = c;
        td.style.background = color(m[r * C + c]);
        tr.appendChild(td);
      }
      rows.push(tr);
    }
    table.replaceChildren(...rows);
    current = { m, rec, C };
    history.replaceState(null, "", "#sentence=" + sent.index + "&kind=" + state.kind +
                         "&layer=" + state.layer + "&head=" + state.head);
    statusEl.dataset.state = "ok";
    statusEl.textContent = "ok: " + R * C + " cells (" + S.length + " sentence" +
                           (S.length === 1 ? "" : "s") + ")";
  }
  let current = null, lit = [];
  $("heatmap").addEventListener("mouseover", (event) => {
    const td = event.target.closest("td.cell");
    if (!td || !current) return;
    const r = Number(td.dataset.r), c = Number(td.dataset.c);
    lit.forEach((el) => el.classList.remove("hl", "hot"));
    lit = [$("row" + r), $("col" + c), td];
    lit.forEach((el) => el.classList.add(el === td ? "hot" : "hl"));
    const info = $("info");
    info.replaceChildren();
    const b = document.createElement("b");
    b.textContent = current.m[r * current.C + c].toFixed(3);
    info.append("weight ", b, "   " + current.rec.names[0] + " " + r + " \u201c" +
                current.rec.rows[r] + "\u201d \u2192 " + current.rec.names[1] + " " + c +
                " \u201c" + current.rec.cols[c] + "\u201d");
  });

  options($("sentence"), S.map((_, i) => i),
          S.map((x) => x.index + ": " + text(x.src).slice(0, 70)), 0);
  const wanted = new URLSearchParams(location.hash.slice(1));
  if (wanted.has("sentence")) {
    const k = S.findIndex((x) => String(x.index) === wanted.get("sentence"));
    state.sentence = k < 0 ? 0 : k;
    $("sentence").value = String(state.sentence);
  }
  for (const key of ["kind", "layer", "head"]) if (wanted.has(key)) state[key] = wanted.get(key);
  $("sentence").addEventListener("change", (e) => {
    state.sentence = Number(e.target.value);
    draw();
  });
  for (const key of ["kind", "layer", "head"]) {
    $(key).addEventListener("change", (e) => { state[key] = e.target.value; draw(); });
  }
  draw();
  if (wanted.has("cell")) {       // #...&cell=R,C: show that cell's weight, as a hover does
    const [r, c] = wanted.get("cell").split(",");
    const td = document.querySelector(
      'td.cell[data-r="' + Number(r) + '"][data-c="' + Number(c) + '"]');
    if (td) td.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
  }
} catch (err) {
  fail(err && err.message ? err.message : String(err));
}
"""
