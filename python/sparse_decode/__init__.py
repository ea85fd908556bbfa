"""sparse_decode: sparse-attention decode kernels for NVIDIA Hopper.

- `dsv4_decode(...)`: DeepSeek-V4 sparse MLA decode on plain 512-element rows
  (docs/spec.md, section 1), and `dsv4_decode_packed(...)` on the packed 584-byte rows
  of FlashMLA / vLLM / SGLang (docs/spec.md, section 2), on any DLPack arrays (torch,
  NumPy, CuPy); CPU arrays run the float64 CPU backend.
- `dsv4_decode_hca(...)`: the HCA argument set (window rows + compressed pages,
  docs/spec.md section 3), with `convert_page_aligned_indices(...)` from a section-1
  table (FlashInfer's conversion; `convert_max_pages`, `convert_refusal`);
  `dsa_decode(...)`: Step-style region-paged DSA decode
  (docs/spec.md, section 4), with `dsa_splits_for(rows)` and `dsa_workspace_size(...)`.
- `torch.ops.sparse_decode.dsv4_decode`, `...dsv4_decode_packed`,
  `...dsv4_decode_hca` and `...dsa_decode`: the same
  as torch.library custom ops (torch.compile, CUDA graphs), registered on
  import when torch is installed.
- Drop-ins (need torch):
  `sparse_decode.flashinfer_compat.trtllm_batch_decode_sparse_mla_dsv4` (and
  its alias `batch_decode_sparse_mla_dsv4`) for FlashInfer's function of that
  name, `sparse_decode.flashmla_compat.flash_mla_with_kvcache` for FlashMLA's
  sparse FP8 decode, and `sparse_decode.step5_compat.sparse_decode_attention`
  for vLLM Step5's DSA decode. They refuse what their upstream refuses, with
  its exception types (docs/python.md).

A refusal names the argument as the caller's signature spells it, with the
expected value (docs/python.md).
"""

from __future__ import annotations

import importlib.util

from . import _ext
from ._convert import convert_max_pages, convert_page_aligned_indices, convert_refusal
from ._decode import (
    SINK_TERMS,
    dsa_decode,
    dsa_splits_for,
    dsa_workspace_size,
    dsv4_decode,
    dsv4_decode_hca,
    dsv4_decode_packed,
)
from ._merge import merge_states

__version__ = "0.1.0"
HEAD_DIM: int = _ext.HEAD_DIM
SWA_COLUMNS: int = _ext.SWA_COLUMNS
PACKED_ROW_BYTES: int = _ext.PACKED_ROW_BYTES
DSA_HEAD_DIM: int = _ext.DSA_HEAD_DIM
DSA_MAX_SPLITS: int = _ext.DSA_MAX_SPLITS

__all__ = [
    "dsv4_decode",
    "dsv4_decode_packed",
    "dsv4_decode_hca",
    "convert_page_aligned_indices",
    "convert_max_pages",
    "convert_refusal",
    "SINK_TERMS",
    "dsa_decode",
    "dsa_splits_for",
    "dsa_workspace_size",
    "merge_states",
    "HEAD_DIM",
    "SWA_COLUMNS",
    "PACKED_ROW_BYTES",
    "DSA_HEAD_DIM",
    "DSA_MAX_SPLITS",
    "__version__",
]

# The custom ops are registered here, once, so that torch.ops.sparse_decode.*
# exists after `import sparse_decode`. Without torch the package is whole
# minus the ops and the drop-ins.
if importlib.util.find_spec("torch") is not None:
    from . import torch_ops  # noqa: F401  (registers the sparse_decode:: custom ops)
