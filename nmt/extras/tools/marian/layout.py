"""What Marian's import and export share: the residual stream's layout and the language tags.

**The positional layout.** HF's Marian concatenates sin and cos (dimension i < d/2: sin(pos
w_i), d/2 + i: cos); nmt interleaves them (2i, 2i + 1). Permuting the d_model dimensions of the
whole residual stream (:func:`residual_permutation`) is an exact re-parametrisation: the
columns of the embeddings and of every Linear that reads the stream, the rows and biases of
every Linear that writes it, every LayerNorm. Logits do not change; nmt -> Marian -> nmt is the
identity, bit for bit.
"""

from __future__ import annotations

import re

import torch

from nmt.data.languages import LANG_TAG

INSTALL_HINT = 'pip install "nmt[hf]" (transformers, safetensors)'
MARIAN_CODE = re.compile(r"^>>(.+)<<$")   # Marian's target-language tokens, >>fra<<
NMT_TAG = re.compile("^" + re.escape(LANG_TAG).replace(r"\{\}", "(.+)") + "$")   # nmt's, <2fra>


def residual_permutation(d_model: int) -> torch.Tensor:
    """The map from nmt's residual dimensions to Marian's.

    nmt dimension j = Marian dimension ``perm[j]``: 2i -> i (sin), 2i + 1 -> d/2 + i (cos).
    Shape: ``perm`` [d_model]; its inverse is ``argsort(perm)``.
    """
    half = torch.arange(d_model // 2)
    return torch.stack([half, half + d_model // 2], dim=1).reshape(-1)
