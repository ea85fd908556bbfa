"""sparse_decode: sparse-attention decode kernels for NVIDIA Hopper.

- `dsv4_decode(...)`: DeepSeek-V4 sparse MLA decode on any DLPack arrays
  (torch, NumPy, CuPy); CPU arrays run the float64 CPU backend.
- `torch.ops.sparse_decode.dsv4_decode`: the same as a torch.library custom op
  (torch.compile, CUDA graphs), registered on import when torch is installed.
- `sparse_decode.flashinfer_compat.trtllm_batch_decode_sparse_mla_dsv4`:
  a drop-in for FlashInfer's function of that name (needs torch).
"""

from __future__ import annotations

import importlib.util

from . import _ext
from ._decode import dsv4_decode

__version__ = "0.1.0"
HEAD_DIM: int = _ext.HEAD_DIM
SWA_COLUMNS: int = _ext.SWA_COLUMNS
MAX_QUERY_LEN: int = _ext.MAX_QUERY_LEN

__all__ = ["dsv4_decode", "HEAD_DIM", "SWA_COLUMNS", "MAX_QUERY_LEN", "__version__"]

# The custom op is registered here, once, so that torch.ops.sparse_decode.*
# exists after `import sparse_decode`. Without torch the package is whole
# minus the op and the FlashInfer drop-in.
if importlib.util.find_spec("torch") is not None:
    from . import torch_ops  # noqa: F401  (registers sparse_decode::dsv4_decode)
