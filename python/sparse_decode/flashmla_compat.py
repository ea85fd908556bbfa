"""A drop-in for FlashMLA's sparse FP8 decode, served by sparse_decode.

    from sparse_decode.flashmla_compat import flash_mla_with_kvcache, get_mla_metadata, FlashMLASchedMeta

have the signature of flash_mla.flash_mla_with_kvcache / get_mla_metadata
(deepseek-ai/FlashMLA, flash_mla/flash_mla_interface.py, the interface with
FlashMLASchedMeta, extra_k_cache and topk_length; and, as keyword arguments,
the older interface's descale_q / descale_k) and their semantics for the
DeepSeek-V4 sparse call: BF16 q of head dim 512 and 584-byte `fp8_ds_mla`
caches (docs/spec.md, section 2). The call goes through the custom op
torch.ops.sparse_decode.dsv4_decode_packed (torch.compile, CUDA graphs).

What is served, and what is not:
- Sparse decode (`indices` given) on 584-byte caches, with topk_length,
  attn_sink, extra_k_cache + extra_indices_in_kvcache (+ extra_topk_length;
  when it is None every extra column is a candidate, as in FlashMLA), any
  page block size (odd ones need pages padded to 16 bytes), head counts 8,
  16, 32, 64, 128 (FlashMLA: 64 and 128).
- Scheduling state, as FlashMLA keeps it: a FlashMLASchedMeta from
  get_mla_metadata records the call's shape (`config`) on its first call and
  later calls must match it; or the older interface's tensors
  (tile_scheduler_metadata int32 [num_sm_parts, n], num_splits int32 [b + 1]).
  sparse_decode schedules without them: its `tile_scheduler_metadata` and
  `num_splits` fields stay None.
- NotImplementedError (FlashMLA does it, this library does not): the dense
  path (`indices` None: block_table + cache_seqlens), DeepSeek-V3.2's
  656-byte and V4.1's 528/288-byte caches.
- Refused as FlashMLA refuses them: AssertionError where FlashMLA's Python
  asserts (another kind of tile_scheduler_metadata, num_splits not None with
  a FlashMLASchedMeta, a call whose shape differs from the FlashMLASchedMeta's
  config, causal=True or is_fp8_kvcache=False with indices, descale_q without
  descale_k or the reverse); RuntimeError where its C++ checks refuse (head_dim_v
  != 512, an extra cache without its indices or the reverse, extra_topk_length
  without an extra cache, shapes, dtypes and layouts, an older-interface
  num_splits that is not int32 [b + 1]). Both are also ValueErrors, as the
  package raises for bad arguments.
- Ignored, as FlashMLA's sparse path ignores them: block_table,
  cache_seqlens, and descale_q / descale_k (the older interface passes them
  to its dense FP8 kernel only).
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Optional, Tuple

import torch

from . import torch_ops  # noqa: F401  (registers torch.ops.sparse_decode.*)
from ._errors import AssertionRefusal, CheckRefusal

_V4_ROW_BYTES = 584
_OTHER_FORMATS = {
    656: "DeepSeek-V3.2 (656 bytes per token)",
    528: "DeepSeek-V4.1 (528 bytes per token)",
    288: "DeepSeek-V4.1 FP4 (288 bytes per token)",
}


@dataclasses.dataclass
class FlashMLASchedMeta:
    """FlashMLA's scheduler state, field for field: `config` is the shape of the first call made with it
    (later calls must match it); sparse_decode schedules without `tile_scheduler_metadata` and
    `num_splits`, which stay None."""

    @dataclasses.dataclass
    class Config:
        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int
        causal: bool
        is_fp8_kvcache: bool
        topk: Optional[int]
        extra_page_block_size: Optional[int]
        extra_topk: Optional[int]

    have_initialized: bool = False
    config: Optional[Config] = None
    tile_scheduler_metadata: Optional[torch.Tensor] = None
    num_splits: Optional[torch.Tensor] = None


# Read once: torch.compile traces the comparison, not dataclasses.fields.
_CONFIG_FIELDS = tuple(field.name for field in dataclasses.fields(FlashMLASchedMeta.Config))


def get_mla_metadata(*args: Any, **kwargs: Any) -> Tuple[FlashMLASchedMeta, None]:
    """FlashMLA's get_mla_metadata: (a new FlashMLASchedMeta, None); arguments are ignored, as there."""
    return FlashMLASchedMeta(), None


def _is_sched_meta(value: Any) -> bool:
    """This module's FlashMLASchedMeta, or FlashMLA's own (the same fields)."""
    return isinstance(value, FlashMLASchedMeta) or (
        type(value).__name__ == "FlashMLASchedMeta" and hasattr(value, "have_initialized") and hasattr(value, "config")
    )


def _heads_k(cache: torch.Tensor) -> int:
    return int(cache.shape[2]) if cache.dim() == 4 else 1


def _schedule(meta, q, k_cache, causal, is_fp8_kvcache, indices, extra_k_cache, extra_indices) -> None:
    """FlashMLA's bookkeeping of a FlashMLASchedMeta: the first call records its shape, later ones must match."""
    config = FlashMLASchedMeta.Config(
        b=int(q.shape[0]),
        s_q=int(q.shape[1]),
        h_q=int(q.shape[2]),
        page_block_size=int(k_cache.shape[1]),
        h_k=_heads_k(k_cache),
        causal=bool(causal),
        is_fp8_kvcache=bool(is_fp8_kvcache),
        topk=None if indices is None else int(indices.shape[-1]),
        extra_page_block_size=None if extra_k_cache is None else int(extra_k_cache.shape[1]),
        extra_topk=None if extra_indices is None else int(extra_indices.shape[-1]),
    )
    if not meta.have_initialized:
        if indices is not None and causal:
            raise AssertionRefusal("causal: expected False when indices are given (sparse attention), got True")
        meta.have_initialized = True
        meta.config = config
        return
    if meta.config is None:
        raise AssertionRefusal("tile_scheduler_metadata: have_initialized is True but config is None")
    for field in _CONFIG_FIELDS:
        recorded, given = getattr(meta.config, field), getattr(config, field)
        if recorded != given:
            raise AssertionRefusal(
                f"tile_scheduler_metadata: config.{field} = {recorded} (its first call), this call has "
                f"{given}: a FlashMLASchedMeta serves calls of one shape; get another from get_mla_metadata()"
            )


def _older_interface(tile_scheduler_metadata: torch.Tensor, num_splits: Any, b: int) -> None:
    """The older interface's tensors, checked as its C++ checks them (they are not read here)."""
    if tile_scheduler_metadata.dtype != torch.int32 or tile_scheduler_metadata.dim() != 2:
        raise CheckRefusal(
            "tile_scheduler_metadata: expected the int32 [num_sm_parts, n] tensor of the older interface's "
            f"get_mla_metadata, got {tile_scheduler_metadata.dtype} {list(tile_scheduler_metadata.shape)}"
        )
    if not isinstance(num_splits, torch.Tensor) or num_splits.dtype != torch.int32 or list(num_splits.shape) != [b + 1]:
        got = (f"{num_splits.dtype} {list(num_splits.shape)}" if isinstance(num_splits, torch.Tensor)
               else type(num_splits).__name__)
        raise CheckRefusal(f"num_splits: expected the int32 [b + 1] = [{b + 1}] tensor of the older interface's "
                           f"get_mla_metadata (with its tile_scheduler_metadata tensor), got {got}")


def _check_format(name: str, cache: torch.Tensor) -> None:
    row = cache.shape[-1] if cache.dim() else None
    if row in _OTHER_FORMATS:
        raise NotImplementedError(
            f"{name}: the {_OTHER_FORMATS[row]} cache format of FlashMLA is not served; sparse_decode "
            f"serves DeepSeek-V4's {_V4_ROW_BYTES}-byte rows"
        )


def _per_token(lengths: Optional[torch.Tensor], name: str, b: int, s_q: int) -> Optional[torch.Tensor]:
    """FlashMLA's [b] lengths hold for every query token of a request: a [b, s_q] view with strides
    [stride, 0] (a request view of the library's lengths, read in place). [b, s_q] (one per token) is
    accepted too."""
    if lengths is None or s_q == 1 or lengths.numel() == b * s_q:
        return lengths
    if lengths.dim() != 1 or lengths.shape[0] != b:
        raise CheckRefusal(f"{name}: expected [{b}] (or [{b}, {s_q}]) int32, got {list(lengths.shape)}")
    return lengths[:, None].expand(b, s_q)


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
    descale_q: Optional[torch.Tensor] = None,
    descale_k: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's sparse FP8 decode on DeepSeek-V4's packed rows.

    q: BF16 [b, s_q, h_q, 512], any s_q; a view of a larger (padded) buffer
    is read in place, as are indices and extra_indices_in_kvcache [b, s_q,
    topk] views. k_cache, extra_k_cache: [num_blocks,
    page_block_size, 1, 584] bytes (uint8, int8 or float8_e4m3fn; a page's
    data rows, then its scale rows); the block stride may exceed
    page_block_size * 584 (a multiple of 16 bytes). indices,
    extra_indices_in_kvcache: int32 [b, s_q, topk]: block * page_block_size +
    offset, -1 unused (indices past the cache are masked too).
    topk_length, extra_topk_length: int32 [b]: only the leftmost
    topk_length[i] indices of every query token of request i count.
    attn_sink: float32 [h_q]. softmax_scale: default q.shape[-1] ** -0.5, as
    FlashMLA (1/sqrt(512) here). tile_scheduler_metadata / num_splits: a
    FlashMLASchedMeta and None, or the older interface's two tensors (see the
    module docstring). descale_q, descale_k: the older interface's, both or
    neither; not read (FlashMLA's sparse path does not read them).

    Returns (out BF16 [b, s_q, h_q, 512], lse float32 [b, h_q, s_q]): lse is
    the natural-log sum of exp of the scaled scores (sink excluded), +inf for
    a query token with no valid index (its out is 0), and a transposed view of
    [b, s_q, h_q] storage, as FlashMLA returns it.
    """
    del block_table, cache_seqlens  # FlashMLA's sparse path does not read them either
    for name, value in (("q", q), ("k_cache", k_cache)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    for name, value in (("indices", indices), ("attn_sink", attn_sink), ("extra_k_cache", extra_k_cache),
                        ("extra_indices_in_kvcache", extra_indices_in_kvcache), ("topk_length", topk_length),
                        ("extra_topk_length", extra_topk_length)):
        if value is not None and not isinstance(value, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor or None, got {type(value).__name__}")
    if softmax_scale is not None and (isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real)):
        raise TypeError(f"softmax_scale: expected a float or None, got {type(softmax_scale).__name__}")
    if q.dim() != 4:
        raise CheckRefusal(f"q: expected [b, s_q, h_q, 512], got {list(q.shape)}")
    if _is_sched_meta(tile_scheduler_metadata):
        if num_splits is not None:
            raise AssertionRefusal(
                f"num_splits: expected None with a FlashMLASchedMeta, got {type(num_splits).__name__}"
            )
        _schedule(tile_scheduler_metadata, q, k_cache, causal, is_fp8_kvcache, indices, extra_k_cache,
                  extra_indices_in_kvcache)
    elif isinstance(tile_scheduler_metadata, torch.Tensor):
        _older_interface(tile_scheduler_metadata, num_splits, int(q.shape[0]))
    else:
        raise AssertionRefusal(
            "tile_scheduler_metadata: expected a FlashMLASchedMeta (get_mla_metadata()[0]) or the older "
            f"interface's int32 tensor, got {type(tile_scheduler_metadata).__name__}"
        )
    if (descale_q is None) != (descale_k is None):
        raise AssertionRefusal("descale_q and descale_k: expected both or neither, got one of them")

    _check_format("k_cache", k_cache)
    if extra_k_cache is not None:
        _check_format("extra_k_cache", extra_k_cache)
    if indices is None:
        raise NotImplementedError(
            "indices: None selects FlashMLA's dense decode (block_table + cache_seqlens), which sparse_decode "
            "does not serve; pass indices (sparse attention)"
        )
    if causal:
        raise AssertionRefusal("causal: expected False when indices are given (sparse attention), got True")
    if not is_fp8_kvcache:
        raise AssertionRefusal("is_fp8_kvcache: expected True when indices are given (sparse attention), got False")
    if head_dim_v != 512:
        raise CheckRefusal(f"head_dim_v: expected 512, got {head_dim_v}")
    if extra_k_cache is not None and extra_indices_in_kvcache is None:
        raise CheckRefusal("extra_indices_in_kvcache: expected a tensor with extra_k_cache, got None")
    if extra_k_cache is None and extra_indices_in_kvcache is not None:
        raise CheckRefusal("extra_indices_in_kvcache: expected None without extra_k_cache")
    if extra_topk_length is not None and extra_k_cache is None:
        raise CheckRefusal("extra_topk_length: expected None without extra_k_cache")

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
        caller="flashmla",
    )
    # The library's "no valid token" is -inf; FlashMLA's is +inf.
    lse.masked_fill_(lse == float("-inf"), float("inf"))
    return out, lse.transpose(1, 2)
