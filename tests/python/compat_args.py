"""The drop-ins' arguments, as an engine passes them, for the reference problems (torch tensors)."""

from __future__ import annotations

import numpy as np
import torch

from helpers import to_torch
from helpers import torch_kwargs as plain_torch_kwargs
from packed_helpers import torch_kwargs as packed_torch_kwargs


def flashinfer_trtllm_gen(p, device="cpu") -> dict:
    """trtllm_batch_decode_sparse_mla_dsv4's trtllm-gen set for a dsv4_reference Problem (4-D pools)."""
    k = plain_torch_kwargs(p, device)
    args = dict(
        query=k["q"], swa_kv_cache=k["swa_kv"], compressed_kv_cache=k["compressed_kv"],
        workspace_buffer=torch.zeros(1024, dtype=torch.uint8, device=device), sparse_indices=k["indices"],
        sparse_topk_lens=k["lens"], seq_lens=k["seq_lens"], bmm1_scale=p.bmm1_scale, bmm2_scale=p.bmm2_scale,
        sinks=k["sinks"], kv_layout=p.layout,
    )
    if p.cum_seq_lens_q is not None:
        args.update(cum_seq_lens_q=k["cum_seq_lens_q"], max_q_len=p.max_q_len)
    return args


def flashinfer_sparse(p, device="cpu") -> dict:
    """The SM120 packed set for a PackedProblem (3-D packed pools)."""
    k = packed_torch_kwargs(p, device)
    return dict(
        query=k["q"], swa_kv_cache=k["swa_cache"], compressed_kv_cache=k["extra_cache"],
        workspace_buffer=torch.zeros(1024, dtype=torch.uint8, device=device), sparse_indices=k["swa_indices"],
        swa_topk_lens=k["swa_lens"], extra_sparse_indices=k["extra_indices"],
        extra_sparse_topk_lens=k["extra_lens"], bmm1_scale=p.softmax_scale, sinks=k["sinks"], kv_layout="NHD",
    )


def flashinfer_cute_dsl(p, device="cpu") -> dict:
    """The HCA (backend="cute-dsl") set for an HCA problem of hca_dsa_reference (HND pools)."""
    fp8 = ("q", "swa_kv", "compressed_kv")
    t = {name: to_torch(getattr(p, name), device, "fp8" if name in fp8 else None)
         for name in fp8 + ("swa_rows", "swa_lens", "block_table", "lens", "hca_seq_lens", "sinks")}
    tokens, heads = p.q.shape[:2]
    return dict(
        query=t["q"].reshape(tokens // p.q_len, p.q_len, heads, 512), swa_kv_cache=t["swa_kv"],
        workspace_buffer=torch.zeros(16, dtype=torch.uint8, device=device), compressed_kv_cache=t["compressed_kv"],
        sparse_topk_lens=t["lens"], bmm1_scale=p.bmm1_scale, bmm2_scale=p.bmm2_scale, sinks=t["sinks"],
        kv_layout="HND", backend="cute-dsl", hca_swa_indices=t["swa_rows"],
        hca_compressed_block_tables=t["block_table"], hca_seq_lens=t["hca_seq_lens"], swa_topk_lens=t["swa_lens"],
    )


def flashmla(p, b, s_q, device="cpu", **overrides) -> dict:
    """flash_mla_with_kvcache's arguments for a PackedProblem of b * s_q tokens (4-D pools, [b] lengths)."""
    from sparse_decode.flashmla_compat import get_mla_metadata

    k = packed_torch_kwargs(p, device)
    four_d = lambda cache: cache if cache is None or cache.dim() == 4 else cache.unsqueeze(2)  # noqa: E731
    per_request = lambda lens: None if lens is None else lens.reshape(b, s_q)[:, 0].contiguous()  # noqa: E731
    args = dict(
        q=k["q"].reshape(b, s_q, p.heads, 512), k_cache=four_d(k["swa_cache"]), block_table=None,
        cache_seqlens=None, head_dim_v=512, tile_scheduler_metadata=get_mla_metadata()[0], num_splits=None,
        softmax_scale=p.softmax_scale, is_fp8_kvcache=True, indices=k["swa_indices"].reshape(b, s_q, -1),
        attn_sink=k["sinks"], extra_k_cache=four_d(k["extra_cache"]),
        extra_indices_in_kvcache=None if p.extra is None else k["extra_indices"].reshape(b, s_q, -1),
        topk_length=per_request(k["swa_lens"]), extra_topk_length=per_request(k["extra_lens"]),
    )
    args.update(overrides)
    return args


def step5(p, device="cpu") -> dict:
    """sparse_decode_attention's arguments for a DSA problem of hca_dsa_reference (output poisoned)."""
    cache = to_torch(p.cache, device, "bf16" if p.cache_kind == "bf16" else "fp8")
    gate = None if p.gate is None else to_torch(p.gate, device, "bf16" if p.gate.dtype == np.uint16 else None)
    return dict(
        query=to_torch(p.q, device, "bf16"), cache=cache, regions=to_torch(p.regions, device),
        block_table=to_torch(p.block_table, device), positions=to_torch(p.positions, device),
        active=to_torch(p.active, device), output=torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16,
                                                             device=device),
        scale=p.scale, query_len=p.query_len, splits=2, k_scale=to_torch(p.k_scale, device),
        v_scale=to_torch(p.v_scale, device), gate=gate,
    )
