"""A drop-in for FlashMLA's sparse FP8 decode, served by sparse_decode.

    from sparse_decode.flashmla_compat import flash_mla_with_kvcache, get_mla_metadata

have the signature of flash_mla.flash_mla_with_kvcache / get_mla_metadata
(deepseek-ai/FlashMLA, flash_mla/flash_mla_interface.py, the interface with
FlashMLASchedMeta, extra_k_cache and topk_length) and its semantics for the
DeepSeek-V4 sparse call: BF16 q of head dim 512 and 584-byte `fp8_ds_mla`
caches (docs/spec.md, section 2). The call goes through the custom op
torch.ops.sparse_decode.dsv4_decode_packed (torch.compile, CUDA graphs).

What is served, and what is not:
- Sparse decode (`indices` given) on 584-byte caches, with topk_length,
  attn_sink, extra_k_cache + extra_indices_in_kvcache (+ extra_topk_length;
  when it is None every extra column is a candidate, as in FlashMLA), any
  page block size (odd ones need pages padded to 16 bytes), head counts 8,
  16, 32, 64, 128 (FlashMLA: 64 and 128).
- NotImplementedError (FlashMLA does it, this library does not): the dense
  path (`indices` None: block_table + cache_seqlens), DeepSeek-V3.2's
  656-byte and V4.1's 528/288-byte caches.
- ValueError, as FlashMLA refuses them too: causal=True or
  is_fp8_kvcache=False with indices, head_dim_v != 512, an extra cache
  without its indices or the reverse, extra_topk_length without extra cache.
- Ignored, as FlashMLA's sparse path ignores them: block_table and
  cache_seqlens. tile_scheduler_metadata and num_splits are scheduling
  state: any value is accepted (this module's or FlashMLA's FlashMLASchedMeta,
  or the tensors of FlashMLA's older interface) and none is needed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

import torch

from . import torch_ops  # noqa: F401  (registers torch.ops.sparse_decode.*)

_V4_ROW_BYTES = 584
_OTHER_FORMATS = {
    656: "DeepSeek-V3.2 (656 bytes per token)",
    528: "DeepSeek-V4.1 (528 bytes per token)",
    288: "DeepSeek-V4.1 FP4 (288 bytes per token)",
}


@dataclasses.dataclass
class FlashMLASchedMeta:
    """Stands in for FlashMLA's scheduler metadata: sparse_decode schedules without it."""

    have_initialized: bool = False


def get_mla_metadata(*args: Any, **kwargs: Any) -> Tuple[FlashMLASchedMeta, None]:
    """FlashMLA's get_mla_metadata: (an empty FlashMLASchedMeta, None); arguments are ignored."""
    return FlashMLASchedMeta(), None


def _check_format(name: str, cache: torch.Tensor) -> None:
    row = cache.shape[-1] if cache.dim() else None
    if row in _OTHER_FORMATS:
        raise NotImplementedError(
            f"{name}: the {_OTHER_FORMATS[row]} cache format of FlashMLA is not served; sparse_decode "
            f"serves DeepSeek-V4's {_V4_ROW_BYTES}-byte rows"
        )


def _per_token(lengths: Optional[torch.Tensor], name: str, b: int, s_q: int) -> Optional[torch.Tensor]:
    """FlashMLA's [b] lengths hold for every query token of a request: [b * s_q] for the library.
    [b, s_q] (one per token) is accepted too."""
    if lengths is None or s_q == 1 or lengths.numel() == b * s_q:
        return lengths
    if lengths.dim() != 1 or lengths.shape[0] != b:
        raise ValueError(f"{name}: expected [{b}] (or [{b}, {s_q}]) int32, got {list(lengths.shape)}")
    return lengths[:, None].expand(b, s_q).contiguous()  # a copy on q's device; no host sync


def flash_mla_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: Optional[torch.Tensor],
    cache_seqlens: Optional[torch.Tensor],
    head_dim_v: int,
    tile_scheduler_metadata: Any,
    num_splits: Any = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    is_fp8_kvcache: bool = False,
    indices: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices_in_kvcache: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's sparse FP8 decode on DeepSeek-V4's packed rows.

    q: BF16 [b, s_q, h_q, 512]. k_cache, extra_k_cache: [num_blocks,
    page_block_size, 1, 584] bytes (uint8, int8 or float8_e4m3fn; a page's
    data rows, then its scale rows); the block stride may exceed
    page_block_size * 584 (a multiple of 16 bytes). indices,
    extra_indices_in_kvcache: int32 [b, s_q, topk]: block * page_block_size +
    offset, -1 unused (indices past the cache are masked too).
    topk_length, extra_topk_length: int32 [b]: only the leftmost
    topk_length[i] indices of every query token of request i count.
    attn_sink: float32 [h_q]. softmax_scale: default q.shape[-1] ** -0.5, as
    FlashMLA (1/sqrt(512) here).

    Returns (out BF16 [b, s_q, h_q, 512], lse float32 [b, h_q, s_q]): lse is
    the natural-log sum of exp of the scaled scores (sink excluded), +inf for
    a query token with no valid index (its out is 0), and a transposed view of
    [b, s_q, h_q] storage, as FlashMLA returns it.
    """
    del block_table, cache_seqlens, tile_scheduler_metadata, num_splits  # see the module docstring
    _check_format("k_cache", k_cache)
    if extra_k_cache is not None:
        _check_format("extra_k_cache", extra_k_cache)
    if indices is None:
        raise NotImplementedError(
            "indices: None selects FlashMLA's dense decode (block_table + cache_seqlens), which sparse_decode "
            "does not serve; pass indices (sparse attention)"
        )
    if causal:
        raise ValueError("causal: must be False when indices are given (sparse attention), as in FlashMLA")
    if not is_fp8_kvcache:
        raise ValueError("is_fp8_kvcache: must be True when indices are given (sparse attention), as in FlashMLA")
    if head_dim_v != 512:
        raise ValueError(f"head_dim_v: expected 512, got {head_dim_v}")
    if (extra_k_cache is None) != (extra_indices_in_kvcache is None):
        raise ValueError("extra_k_cache and extra_indices_in_kvcache: give both or neither, as in FlashMLA")
    if extra_topk_length is not None and extra_k_cache is None:
        raise ValueError("extra_topk_length: given without extra_k_cache")
    if q.dim() != 4:
        raise ValueError(f"q: expected [b, s_q, h_q, 512], got {list(q.shape)}")

    b, s_q, h_q = q.shape[:3]
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    if extra_indices_in_kvcache is not None and extra_topk_length is None:
        # The library requires extra lengths; all `width` columns is FlashMLA's meaning of None.
        width = extra_indices_in_kvcache.shape[-1]
        extra_topk_length = torch.full((b * s_q,), width, dtype=torch.int32, device=q.device)

    out = torch.empty((b, s_q, h_q, 512), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((b, s_q, h_q), dtype=torch.float32, device=q.device)
    torch.ops.sparse_decode.dsv4_decode_packed(
        q,
        k_cache,
        indices,
        out,
        lse,
        None,  # out_of_range_count
        None,  # workspace: from torch's caching allocator when the call needs one (the split path)
        float(softmax_scale),
        _per_token(topk_length, "topk_length", b, s_q),
        extra_k_cache,
        extra_indices_in_kvcache,
        _per_token(extra_topk_length, "extra_topk_length", b, s_q),
        attn_sink,
        False,  # enable_pdl: FlashMLA launches without PDL
    )
    # The library's "no valid token" is -inf; FlashMLA's is +inf.
    lse.masked_fill_(lse == float("-inf"), float("inf"))
    return out, lse.transpose(1, 2)
