"""The learner's path, measured: the nmt modules that one training step and one beam search
of each model (the Transformer, the Bahdanau RNN) run, each with its lines (whole files, as
``wc -l`` counts them), and their total.

    python scripts/learner_path.py          # the table; tests/test_learner_path.py checks it

What counts (README "Reading order", docs/architecture.md): with each model's default config
(a tiny model and a generated corpus: which modules run matters here, not how long),
the harness is set up outside the trace: data pipeline and tokenizer, run directory, logging,
the trainer's setup. The trace then covers ``Trainer.train_step`` on one group of batches
(collate, the objective, forward and backward, clipping, the schedule, the optimizer step,
the weight average) and ``beam_search`` on a batch of ``make_src_batch``. A module is on the
path when its code runs there (``sys.settrace``), or when code that runs there reads a name it
defines (the ids of :mod:`nmt.data.vocab`, which hold no code).
"""

from __future__ import annotations

import ast
import random
import sys
import tempfile
import threading
import types
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import nmt  # noqa: E402

PACKAGE = Path(nmt.__file__).resolve().parent
_WORDS = [("ein", "a"), ("hund", "dog"), ("katze", "cat"), ("mann", "man"), ("läuft", "runs"),
          ("springt", "jumps"), ("im", "in the"), ("park", "park"), ("schnee", "snow")]


def write_corpus(root: Path, seed: int = 0) -> Path:
    """``{train,val,test}.{de,en}`` of generated word-for-word pairs (64 / 8 / 8) under ``root``."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 64), ("val", 8), ("test", 8)):
        pairs = [[rng.choice(_WORDS) for _ in range(rng.randint(2, 6))] for _ in range(n)]
        for side, lang in enumerate(("de", "en")):
            lines = (" ".join(w[side] for w in p) + " .\n" for p in pairs)
            (root / f"{split}.{lang}").write_text("".join(lines), encoding="utf-8")
    return root


def names_by_line(source: str) -> dict[int, set[str]]:
    """Per line of ``source``, the names that its expressions read (``ast.Name`` loads), each
    also under the first line of its statement (a line event may come on either). From the
    syntax tree, so no Python version's bytecode or line table enters."""
    out: dict[int, set[str]] = {}

    def visit(node: ast.AST, statement: int) -> None:
        if isinstance(node, ast.stmt):
            statement = node.lineno
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            for line in (node.lineno, statement):
                out.setdefault(line, set()).add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child, statement)

    visit(ast.parse(source), 1)
    return out


def globals_by_line(code: types.CodeType, names: dict[int, set[str]]) -> dict[int, set[str]]:
    """Per line, the names of ``names`` (:func:`names_by_line` of ``code``'s file) that
    ``code`` reads as globals: in its ``co_names``, not among its locals, cells or frees (the
    lines of other code in the file are kept: a frame's line events name its own lines)."""
    local = set(code.co_varnames) | set(code.co_cellvars) | set(code.co_freevars)
    wanted = set(code.co_names) - local
    return {line: found for line, read in names.items() if (found := read & wanted)}


class PathTracer:
    """Records the nmt files whose code runs, and those whose names running code reads."""

    def __init__(self) -> None:
        self.files: set[Path] = set()
        self._lines: dict[types.CodeType, dict[int, set[str]]] = {}
        self._names: dict[str, dict[int, set[str]]] = {}
        self._imports: dict[str, dict[str, str]] = {}

    def _imported_from(self, module: str) -> dict[str, str]:
        """``from nmt.x import NAME`` of a module's source: NAME -> nmt.x."""
        if module not in self._imports:
            tree = ast.parse(Path(sys.modules[module].__file__).read_text(encoding="utf-8"))
            self._imports[module] = {a.asname or a.name: node.module for node in ast.walk(tree)
                                     if isinstance(node, ast.ImportFrom) and node.module
                                     and node.module.startswith("nmt") for a in node.names}
        return self._imports[module]

    def _read(self, frame: types.FrameType, name: str) -> None:
        value = frame.f_globals.get(name)
        if value is None or isinstance(value, types.ModuleType):
            return
        owner = getattr(value, "__module__", None) if callable(value) else None
        if owner is None:   # a constant: the module it was imported from
            owner = self._imported_from(frame.f_globals["__name__"]).get(name)
        if owner is not None and owner.split(".")[0] == "nmt" and owner in sys.modules:
            self.files.add(Path(sys.modules[owner].__file__).resolve())

    def _trace(self, frame: types.FrameType, event: str, arg) -> Callable | None:
        path = Path(frame.f_code.co_filename)
        if not path.is_absolute() or PACKAGE not in path.parents:
            return None
        self.files.add(path)
        if event == "line":
            code = frame.f_code
            if code not in self._lines:
                if code.co_filename not in self._names:
                    self._names[code.co_filename] = names_by_line(path.read_text(encoding="utf-8"))
                self._lines[code] = globals_by_line(code, self._names[code.co_filename])
            for name in self._lines[code].get(frame.f_lineno, ()):
                self._read(frame, name)
        return self._trace

    def run(self, fn: Callable, *args, **kwargs):
        """``fn(*args, **kwargs)`` under the trace (this thread and any it starts)."""
        sys.settrace(self._trace)
        threading.settrace(self._trace)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.settrace(None)
            threading.settrace(None)


# Each model's default config, made tiny: which modules run matters here, not how long.
MODELS = {"transformer": ["model.d_model=16", "model.heads=2", "model.ff_dim=32",
                          "model.encoder_layers=2", "model.decoder_layers=2"],
          "rnn": ["model=rnn", "model.emb_dim=16", "model.encoder_hidden=16",
                  "model.decoder_hidden=16", "model.attention_dim=16"]}


def trace_learner_path(workdir: str | Path) -> dict[str, int]:
    """The learner's path (module docstring) of both models, runs under ``workdir``: each
    module's path relative to the repository (``nmt/...py``) and its line count, by path."""
    from nmt.config import compose_config
    from nmt.data.batching import make_src_batch
    from nmt.inference.search import beam_search
    from nmt.runtime import resolve_device
    from nmt.training.distributed import DistInfo
    from nmt.training.trainer import Trainer

    workdir = Path(workdir)
    corpus = write_corpus(workdir / "corpus")
    tracer = PathTracer()
    for name, model in MODELS.items():
        cfg = compose_config([f"data.root={corpus}", f"data.cache_dir={workdir / 'cache'}",
                              "data.test_split=test", "data.tokenizer.vocab_size=32",
                              f"run_dir={workdir / name}", "device=cpu",
                              "train.log_figures=false", *model])
        trainer = Trainer(cfg, DistInfo(), resolve_device("cpu"))
        try:
            trainer.setup()
            split, batches = trainer.epoch_data(0)
            src_ids = trainer.tokenizer.encode_src_batch(["ein hund läuft im park .", "katze ."])
            tracer.run(trainer.train_step, batches[:1], split)
            tracer.run(beam_search, trainer.model, *make_src_batch(src_ids), beam_size=3,
                       length_penalty=1.0, max_len_a=1.2, max_len_b=5)
        finally:
            trainer.close()
    return {str(p.relative_to(PACKAGE.parent)): p.read_bytes().count(b"\n")   # as wc -l
            for p in sorted(tracer.files)}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="nmt-learner-path-") as tmp:
        counts = trace_learner_path(tmp)
    for name, n in counts.items():
        print(f"{n:7d} {name}")
    print(f"{sum(counts.values()):7d} total")


if __name__ == "__main__":
    main()
