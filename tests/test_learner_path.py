"""The learner's path (scripts/learner_path.py): every nmt module that one training step and
one beam search of each model run is in the reading order of README.md and of
docs/architecture.md, both pages give the trace's total, and the path, whole files, stays
within 2,100 lines."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from conftest import REPO_ROOT

BUDGET = 2_100


def _learner_path():
    spec = importlib.util.spec_from_file_location("learner_path",
                                                  REPO_ROOT / "scripts" / "learner_path.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reading_order(doc: Path, heading: str) -> list[str]:
    """The ``nmt/...py`` paths named in the numbered list of section ``heading`` of ``doc``."""
    section = doc.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1]
    section = re.split(r"\n#+ ", section, maxsplit=1)[0]
    items = re.findall(r"^\d+\. .*(?:\n {3}.*)*", section, flags=re.M)
    return [path for item in items for path in re.findall(r"`(nmt/[\w/]+\.py)`", item)]


def test_reading_order_is_parsed_from_a_numbered_list(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# x\n\n## Reading order\n\nIntro `nmt/a.py`.\n\n1. `nmt/b.py`: one\n"
                   "   and `nmt/c/d.py`.\n2. `nmt/e.py`\n\nSkip `nmt/f.py`.\n\n## Next\n\n"
                   "1. `nmt/g.py`\n", encoding="utf-8")
    assert reading_order(doc, "## Reading order") == ["nmt/b.py", "nmt/c/d.py", "nmt/e.py"]


def test_every_module_of_a_step_and_a_search_is_in_the_reading_order(tmp_path):
    counts = _learner_path().trace_learner_path(tmp_path)
    # what the step and the search certainly run: the trace is not empty
    for module in ("nmt/training/trainer.py", "nmt/training/loss.py", "nmt/training/optim.py",
                   "nmt/models/transformer.py", "nmt/models/rnn.py", "nmt/models/attention.py",
                   "nmt/inference/search.py", "nmt/data/batching.py", "nmt/data/vocab.py"):
        assert module in counts, module
    assert all(n == (REPO_ROOT / m).read_bytes().count(b"\n") for m, n in counts.items())
    for doc, heading in ((REPO_ROOT / "README.md", "## Reading order"),
                         (REPO_ROOT / "docs" / "architecture.md", "### Reading order")):
        listed = reading_order(doc, heading)
        missing = sorted(set(counts) - set(listed))
        assert not missing, f"{doc.name}'s reading order lacks {missing}, which the path runs"
    total = sum(counts.values())
    assert total <= BUDGET, f"the learner's path is {total} lines, over {BUDGET}: {counts}"
    for doc in (REPO_ROOT / "README.md", REPO_ROOT / "docs" / "architecture.md"):
        figure = re.search(r"From attention to a trained model in ([\d,]+) lines",
                           doc.read_text(encoding="utf-8"))
        assert figure and int(figure[1].replace(",", "")) == total, (doc.name, total)


SOURCE = '''\
LIMIT = 3


def scaled(xs, factor=LIMIT):
    total = len(
        xs)
    return min(xs[0], LIMIT) * factor, total


def shadowed(LIMIT):
    return LIMIT
'''


def test_globals_by_line_come_from_the_syntax_tree_not_the_line_table():
    # no bytecode line table is read: the same exact answer on every Python that
    # requires-python allows (3.13's dis gives ``starts_line`` as a bool, 3.12 a line number)
    module = _learner_path()
    names = module.names_by_line(SOURCE)
    assert names == {4: {"LIMIT"}, 5: {"len", "xs"}, 6: {"xs"},
                     7: {"min", "LIMIT", "factor", "xs", "total"}, 11: {"LIMIT"}}
    code = compile(SOURCE, "m.py", "exec")
    scaled, shadowed = (c for c in code.co_consts if hasattr(c, "co_names"))
    def own(code, first, last):   # the lines of one code object (a line event names its own)
        return {k: v for k, v in module.globals_by_line(code, names).items() if first <= k <= last}

    assert own(scaled, 5, 7) == {5: {"len"}, 7: {"min", "LIMIT"}}
    assert own(shadowed, 11, 11) == {}   # a parameter, not the global
    assert own(code, 1, 4) == {4: {"LIMIT"}}   # the default, read at def time
