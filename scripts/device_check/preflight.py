"""The device check's preflight: the imports the steps need and their versions against
pyproject.toml (exit 5), a CUDA device (exit 6; a dry run needs none), the Multi30k de/en files
(exit 7). Writes what it found to a JSON file (the key line's gpu, torch and python; the
check's torchrun step reads the GPU count) after each finding: a preflight stopped by its time
limit (the steps go on) leaves what it had found.

    python scripts/device_check/preflight.py DRY(0|1) DATA_ROOT OUT_JSON     (from the repository)
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import platform
import re
import sys
from pathlib import Path

# (module, its distribution) of what the steps import; nmt itself comes from the checkout.
MODULES = [("torch", "torch"), ("numpy", "numpy"), ("omegaconf", "omegaconf"),
           ("hydra", "hydra-core"), ("antlr4", "antlr4-python3-runtime"), ("yaml", "pyyaml"),
           ("sentencepiece", "sentencepiece"), ("sacrebleu", "sacrebleu"),
           ("pyarrow", "pyarrow"), ("tqdm", "tqdm"), ("matplotlib", "matplotlib"),
           ("torch.utils.tensorboard", "tensorboard"), ("pytest", "pytest"),
           ("xdist", "pytest-xdist"), ("nmt.cli.train", None), ("nmt.cli.evaluate", None)]
SPLITS = ("train", "val", "test_2016_flickr")
PREP = ("carry what is missing: `bash scripts/device_prep.sh` on the CPU machine makes the "
        "wheels in device_wheels/ (docs/speed.md, the device check)")


def requirements(pyproject: str) -> dict[str, str]:
    """``{distribution: minimum version}`` of pyproject.toml's ``dependencies = [...]``."""
    block = re.search(r"^dependencies = \[(.*?)^\]", pyproject, re.S | re.M)
    return dict(re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)', block.group(1) if block else ""))


def check_imports(needs: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``(versions, problems)``: each of :data:`MODULES` imported, its version against ``needs``."""
    problems, versions = [], {}
    for module, dist in MODULES:
        try:
            importlib.import_module(module)
        except Exception as err:  # noqa: BLE001 - every failed import is a finding
            first = (str(err).strip().splitlines() or [""])[0]
            problems.append(f"cannot import {module} ({type(err).__name__}: {first})")
            continue
        if dist is None:
            continue
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = "?"
            continue
        if dist in needs:
            from packaging.version import Version

            if Version(versions[dist]) < Version(needs[dist]):
                problems.append(f"{dist} {versions[dist]} is older than pyproject.toml's "
                                f">={needs[dist]}")
    if any(p.startswith("cannot import nmt") for p in problems):
        problems.append("nmt itself does not import: the checkout is broken, or a package "
                        "above is missing")
    if any(not p.startswith("cannot import nmt") for p in problems):
        problems.append(PREP)
    return versions, problems


def check_data(root: Path) -> tuple[dict[str, int], list[str]]:
    """``(lines per file, problems)`` of the de/en files of :data:`SPLITS` under ``root``:
    each present, not empty, and both sides of a split as long."""
    lines, problems = {}, []
    for split in SPLITS:
        for lang in ("de", "en"):
            path = root / f"{split}.{lang}"
            if path.is_file() and path.stat().st_size > 0:
                with path.open("rb") as f:
                    lines[path.name] = sum(1 for _ in f)
            else:
                problems.append(f"{path} is missing or empty")
        de, en = lines.get(f"{split}.de"), lines.get(f"{split}.en")
        if de is not None and en is not None and de != en:
            problems.append(f"{root}/{split}.de has {de} lines, {split}.en {en}")
    return lines, problems


def cuda_info() -> dict:
    """The first CUDA device's name, count, capability, memory (MiB) and NCCL version."""
    import torch

    props = torch.cuda.get_device_properties(0)
    try:
        nccl = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a torch without NCCL: the nccl step says more
        nccl = None
    return {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(),
            "capability": f"{props.major}.{props.minor}", "gpu_mib": props.total_memory >> 20,
            "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl}


def main(argv: list[str]) -> int:
    dry, root, out = argv[0] == "1", Path(argv[1]), Path(argv[2])
    info: dict = {"python": platform.python_version()}

    def save() -> None:
        out.write_text(json.dumps(info, indent=2) + "\n")

    def done(code: int, *lines: str) -> int:
        save()
        for line in lines:
            print("preflight: " + line)
        return code

    save()
    versions, problems = check_imports(requirements(Path("pyproject.toml").read_text()))
    info["versions"] = versions
    save()
    print("versions: python " + info["python"] + ", "
          + ", ".join(f"{k} {v}" for k, v in versions.items()))
    if problems:
        return done(5, *problems)
    import torch

    info.update(torch=torch.__version__, cuda=torch.version.cuda, gpu="-", gpus=0)
    if torch.cuda.is_available():
        info.update(cuda_info())
        save()
        print(f"cuda: {info['gpu']} x{info['gpus']}, capability {info['capability']}, "
              f"{info['gpu_mib']} MiB, torch {torch.__version__}, CUDA {torch.version.cuda}, "
              f"NCCL {info['nccl']}")
    elif not dry:
        return done(6, f"no CUDA device: torch {torch.__version__} (CUDA {torch.version.cuda}) "
                    "sees none; --dry-run runs the steps on the CPU")
    lines, problems = check_data(root)
    info["data"] = {"root": str(root), **lines}
    if problems:
        return done(7, *problems, "copy Multi30k there with `bash scripts/device_prep.sh` "
                    "(data/multi30k, carried) or set NMT_DATA_ROOT")
    print(f"data: {root}: " + ", ".join(f"{k} {v}" for k, v in lines.items() if k.endswith(".de"))
          + " lines")
    return done(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
