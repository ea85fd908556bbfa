"""FlashInfer's SM120 packed-row ("sparse") argument set on sparse_decode::dsv4_decode_packed."""

from typing import Optional

import torch

from . import torch_ops  # noqa: F401  (registers torch.ops.sparse_decode.*)
from ._flashinfer_common import float_scales, output, refuse


def _packed_pool(cache: Optional[torch.Tensor], name: str, kv_layout: str) -> Optional[torch.Tensor]:
    """[pages, page_size, 584] or NHD [pages, page_size, 1, 584] as they are; HND [pages, 1,
    page_size, 584] (the same bytes with one KV head) transposed to NHD, a view."""
    if cache is None or cache.dim() != 4 or kv_layout == "NHD":
        return cache
    if cache.shape[1] != 1:
        raise ValueError(f"{name}: expected HND [pages, 1, page_size, 584] (kv_layout='HND'), got {list(cache.shape)}")
    return cache.transpose(1, 2)


def packed(
    query,
    swa_kv_cache,
    workspace_buffer,
    sparse_indices,
    compressed_kv_cache,
    sparse_topk_lens,
    seq_lens,
    out,
    bmm1_scale,
    bmm2_scale,
    sinks,
    kv_layout,
    cum_seq_lens_q,
    max_q_len,
    enable_pdl,
    swa_topk_lens,
    extra_sparse_indices,
    extra_sparse_topk_lens,
) -> torch.Tensor:
    """The packed-row (SM120 'sparse') argument set: refusals as FlashInfer's (ValueError), then the op.

    sparse_topk_lens is accepted and not read, as FlashInfer does with packed rows (the segments' lengths
    are swa_topk_lens and extra_sparse_topk_lens). seq_lens, with cum_seq_lens_q / max_q_len or the 4-D
    query's q_len, applies section 1's window rule to the SWA segment (docs/spec.md, section 2)."""
    del sparse_topk_lens  # FlashInfer's packed path does not read it either
    float_scales(bmm1_scale, bmm2_scale, "packed-row (SM120 'sparse') argument set")
    if float(bmm2_scale) != 1.0:
        raise ValueError(f"bmm2_scale: expected 1.0 with packed caches (docs/spec.md, section 2), got {bmm2_scale}")
    if sparse_indices is None:
        raise ValueError("sparse_indices: required by the packed-row argument set (the SWA segment, [sum_q, W] int32)")
    if query.dtype != torch.bfloat16:
        raise ValueError(f"query: the packed-row (SM120 'sparse') argument set only supports BF16 query, expected "
                         f"torch.bfloat16, got {query.dtype}")
    if (extra_sparse_indices is None) != (extra_sparse_topk_lens is None):
        given, missing = (
            ("extra_sparse_indices", "extra_sparse_topk_lens")
            if extra_sparse_topk_lens is None
            else ("extra_sparse_topk_lens", "extra_sparse_indices")
        )
        raise ValueError(f"{missing}: expected a tensor together with {given} (the extra segment), got None")
    if extra_sparse_indices is None:
        compressed_kv_cache = None  # unused without the extra segment, as in FlashInfer
    elif compressed_kv_cache is None:
        raise ValueError("compressed_kv_cache: expected the packed pool of extra_sparse_indices, got None")
    out = output(out, query)
    torch.ops.sparse_decode.dsv4_decode_packed(
        query,
        _packed_pool(swa_kv_cache, "swa_kv_cache", kv_layout),
        sparse_indices,
        out,
        None,  # lse: not an output of this FlashInfer function
        None,  # out_of_range_count
        workspace_buffer,
        float(bmm1_scale),
        swa_topk_lens,
        _packed_pool(compressed_kv_cache, "compressed_kv_cache", kv_layout),
        extra_sparse_indices,
        extra_sparse_topk_lens,
        sinks,
        bool(enable_pdl),
        seq_lens,
        cum_seq_lens_q,
        None,  # q_len: the 4-D query's second dim, or sum_q / B
        max_q_len,
        caller="flashinfer.sparse",
    )
    return out
