"""Drop-ins for vLLM Step5's DSA decode (seed 002), served by sparse_decode::dsa_decode.

    from sparse_decode.step5_compat import sparse_decode_attention, sparse_decode_splits

have the signatures of vllm.models.step5.nvidia.ops.sparse_decode_attention's
functions of those names and their semantics (docs/spec.md section 4,
docs/formats/dsa_layout.md). Like the original, sparse_decode_attention allocates its
split scratch with torch (the caching allocator, on the current stream, so
CUDA-graph capture works as it does for the original): the custom op takes
workspace_size(args) bytes when the call needs them (CUDA tensors, splits >
1); none with one split and on the CPU.
"""

import numbers
from typing import Optional

import torch

from . import torch_ops  # noqa: F401  (registers torch.ops.sparse_decode.*)
from ._decode import dsa_splits_for


def sparse_decode_splits(rows: int) -> int:
    """Splits per row for ~256 programs: doubling from 1 while splits < 32 and rows * splits * 2 <= 256."""
    return dsa_splits_for(rows)


def sparse_decode_attention(
    query: torch.Tensor,
    cache: torch.Tensor,
    regions: torch.Tensor,
    block_table: torch.Tensor,
    positions: torch.Tensor,
    active: torch.Tensor,
    output: torch.Tensor,
    *,
    scale: float,
    query_len: int = 1,
    splits: int,
    clear_inactive: bool = True,
    k_scale: Optional[torch.Tensor] = None,
    v_scale: Optional[torch.Tensor] = None,
    gate: Optional[torch.Tensor] = None,
) -> None:
    """Attention for (token, KV group) rows over their selected regions, written into `output`.

    query/output: BF16 [rows, heads, 192], rows = tokens * G; cache:
    [pages, G, block, 384] (K then V), BF16, or FP8 (uint8 / float8_e4m3fn)
    with float32 [1] k_scale and v_scale; regions: int32 [rows, R] logical
    block ids (-1 unused); block_table: int32 [requests, max_blocks];
    positions / active: int32 [rows]; gate: optional BF16, FP16 or float32
    [tokens, G * heads] (the sigmoid rounded to its dtype, as the
    original). Rows of one request are G * query_len consecutive
    rows sharing a table row. Bad arguments raise AssertionError, as the
    original asserts (also a ValueError), naming the argument as this
    signature spells it.
    """
    for name, value in (("query", query), ("cache", cache), ("regions", regions), ("block_table", block_table),
                        ("positions", positions), ("active", active), ("output", output), ("k_scale", k_scale),
                        ("v_scale", v_scale), ("gate", gate)):
        if not isinstance(value, torch.Tensor) and (value is not None or name not in ("k_scale", "v_scale", "gate")):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    for name, value, kind in (("scale", scale, numbers.Real), ("splits", splits, numbers.Integral),
                              ("query_len", query_len, numbers.Integral)):
        if isinstance(value, bool) or not isinstance(value, kind):
            raise TypeError(f"{name}: expected {'a float' if kind is numbers.Real else 'an int'}, "
                            f"got {type(value).__name__}")
    torch.ops.sparse_decode.dsa_decode(
        query,
        cache,
        regions,
        block_table,
        positions,
        active,
        output,
        None,  # workspace: allocated by the call on the current stream when it needs one
        float(scale),
        int(splits),
        int(query_len),
        bool(clear_inactive),
        k_scale,
        v_scale,
        gate,
        False,  # enable_pdl: the original follows a module-level switch; off here
        caller="step5",
    )
