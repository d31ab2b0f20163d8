"""nmt.runtime: atomic files, the writable-directory check, the oneDNN cache bound, machine info."""

import json
import os

import pytest

from nmt.config import ConfigError
from nmt.runtime import (
    ONEDNN_CACHE_CAPACITY,
    atomic_path,
    bound_onednn_cache,
    ensure_writable_dir,
    gpu_peak_tflops,
    machine_info,
    peak_flops,
    train_flops,
    write_json_atomic,
    write_text_atomic,
)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out" / "scores.json"
    write_json_atomic(path, {"bleu": 1.0})
    with pytest.raises(KeyboardInterrupt), atomic_path(path) as tmp:
        tmp.write_text("half a file")
        raise KeyboardInterrupt
    assert json.loads(path.read_text()) == {"bleu": 1.0}
    assert os.listdir(path.parent) == ["scores.json"]


def test_files_get_the_umask_permissions_and_directories_are_replaced_whole(tmp_path):
    write_text_atomic(tmp_path / "a.txt", "x")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o666 & ~umask
    for content in ("old", "new"):
        with atomic_path(tmp_path / "tok", directory=True) as tmp:
            (tmp / content).write_text(content)
    assert os.listdir(tmp_path / "tok") == ["new"]
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "tok"]


def test_an_unwritable_directory_is_a_config_error_naming_the_key(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="out_dir="):
        ensure_writable_dir(blocker / "sub", "out_dir")
    assert ensure_writable_dir(tmp_path / "new" / "dir", "out_dir").is_dir()


def test_onednn_cache_is_bounded_unless_the_user_set_it(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    assert bound_onednn_cache() is True
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(ONEDNN_CACHE_CAPACITY)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "7")
    assert bound_onednn_cache() is False and os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "7"


def test_machine_info_names_what_the_figures_depend_on():
    info = machine_info()
    assert {"cpu", "cores", "torch_threads", "torch", "python", "platform"} <= set(info)
    assert info["cores"] == os.cpu_count()


@pytest.mark.parametrize(("name", "precision", "tflops"), [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4),      # SXM: half the datasheet's sparse 1,979
    ("NVIDIA H100 80GB HBM3", "tf32", 494.7),
    ("NVIDIA H200", "fp16", 989.4),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
    ("NVIDIA A100 80GB PCIe", "tf32", 156.0),
    ("NVIDIA L4", "bf16", 121.0),
    ("Tesla T4", "fp16", 65.0),
    ("Tesla T4", "bf16", None),                    # no bf16 tensor cores
    ("NVIDIA H100 PCIe", "bf16", None),            # other cards: train.peak_tflops
    ("NVIDIA H200 NVL", "bf16", None),
    ("NVIDIA L40S", "bf16", None),
    ("NVIDIA RTX A1000", "bf16", None),            # whole names: not an A100
    ("NVIDIA GH200 480GB", "bf16", None),          # not an H200
])
def test_gpu_peaks_are_the_dense_datasheet_figures_of_known_cards(name, precision, tflops):
    assert gpu_peak_tflops(name, precision) == tflops


def test_peak_flops_override_cpu_measurement_and_the_6n_rule():
    import torch

    assert peak_flops(torch.device("cpu"), None, 2.5) == 2.5e12
    measured = peak_flops(torch.device("cpu"))
    assert measured > 1e8 and peak_flops(torch.device("cpu")) == measured   # measured once
    # 6 * (N_src * src + N_tgt * tgt), twice with consistency's doubled batch
    assert train_flops((10, 20), 3, 4) == 6 * (30 + 80)
    assert train_flops((10, 20), 3, 4, copies=2) == 2 * 660
