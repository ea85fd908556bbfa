"""Drop-in replacements for FlashInfer functions, served by sparse_decode.

    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4

has exactly the signature of flashinfer.mla.trtllm_batch_decode_sparse_mla_dsv4
and its semantics for the trtllm-gen argument set, on Hopper. The call goes
through the custom op torch.ops.sparse_decode.dsv4_decode, so it works under
torch.compile and in CUDA graphs (pass `out` to keep allocation out of a
captured region).
"""

from typing import Literal, Optional, Union

import torch

from . import torch_ops  # noqa: F401  (registers torch.ops.sparse_decode.*)

_TRTLLM_GEN = ("auto", "trtllm-gen")


def _refuse_other_backends(backend, arguments) -> None:
    if backend not in _TRTLLM_GEN:
        raise NotImplementedError(
            f"backend={backend!r}: sparse_decode serves the trtllm-gen argument set only "
            "(backend='auto' or 'trtllm-gen'); the HCA ('cute-dsl') and packed ('sparse') "
            "argument sets are not implemented yet"
        )
    for name, value, default in arguments:
        if (value is not None) if default is None else (value != default):
            family = "HCA (backend='cute-dsl')" if name.startswith("hca_") else "packed-row (SM120 'sparse')"
            raise NotImplementedError(
                f"{name}: an argument of FlashInfer's {family} backend; sparse_decode serves the "
                "trtllm-gen argument set only, so leave it at its default"
            )


def trtllm_batch_decode_sparse_mla_dsv4(
    query: torch.Tensor,
    swa_kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    sparse_indices: Optional[torch.Tensor] = None,
    compressed_kv_cache: Optional[torch.Tensor] = None,
    sparse_topk_lens: Optional[torch.Tensor] = None,
    seq_lens: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    bmm1_scale: Union[float, torch.Tensor] = 1.0,
    bmm2_scale: Union[float, torch.Tensor] = 1.0,
    sinks: Optional[torch.Tensor] = None,
    kv_layout: Literal["HND", "NHD"] = "HND",
    cum_seq_lens_q: Optional[torch.Tensor] = None,
    max_q_len: Optional[int] = None,
    enable_pdl: Optional[bool] = None,
    swa_topk_lens: Optional[torch.Tensor] = None,
    extra_sparse_indices: Optional[torch.Tensor] = None,
    extra_sparse_topk_lens: Optional[torch.Tensor] = None,
    backend: Literal["auto", "trtllm-gen", "cute-dsl", "sparse"] = "auto",
    hca_swa_indices: Optional[torch.Tensor] = None,
    hca_compressed_block_tables: Optional[torch.Tensor] = None,
    hca_seq_lens: Optional[torch.Tensor] = None,
    hca_is_causal: bool = True,
    hca_use_persistent: bool = False,
    hca_sparse_indices_format: Optional[Literal["compressed-page-aligned"]] = None,
) -> torch.Tensor:
    """Decode DeepSeek V4 sparse MLA (FlashInfer's trtllm-gen argument set).

    query: [B, q_len, H, 512], or [sum_q, H, 512] with cum_seq_lens_q and
    max_q_len; BF16 or FP8 E4M3, with both KV pools of the same dtype in
    kv_layout ("HND" [pages, 1, page_size, 512] or "NHD" [pages, page_size,
    1, 512]). sparse_indices [sum_q, W] int32: columns 0..127 are rows of
    swa_kv_cache, the rest rows of compressed_kv_cache, -1 unused;
    sparse_topk_lens [sum_q] counts the 128 SWA columns; seq_lens [B] gives
    the SWA validity window. Returns `out` (BF16, query's shape), allocated
    only when not given.

    Differences from FlashInfer, all on calls FlashInfer refuses: seq_lens and
    compressed_kv_cache (when W == 128) may be None (no window check, no
    compressed pool), and any device that sparse_decode serves runs it (CPU
    tensors run its float64 CPU backend). enable_pdl=None means on for CUDA
    tensors, as FlashInfer does on devices that support PDL.
    """
    _refuse_other_backends(
        backend,
        (
            ("swa_topk_lens", swa_topk_lens, None),
            ("extra_sparse_indices", extra_sparse_indices, None),
            ("extra_sparse_topk_lens", extra_sparse_topk_lens, None),
            ("hca_swa_indices", hca_swa_indices, None),
            ("hca_compressed_block_tables", hca_compressed_block_tables, None),
            ("hca_seq_lens", hca_seq_lens, None),
            ("hca_is_causal", hca_is_causal, True),
            ("hca_use_persistent", hca_use_persistent, False),
            ("hca_sparse_indices_format", hca_sparse_indices_format, None),
        ),
    )
    if sparse_indices is None:
        raise ValueError("sparse_indices: required by the trtllm-gen argument set ([sum_q, W] int32)")
    if kv_layout not in ("HND", "NHD"):
        raise ValueError(f"kv_layout: expected 'HND' or 'NHD', got {kv_layout!r}")
    if cum_seq_lens_q is not None and max_q_len is None:
        raise ValueError("max_q_len: required with cum_seq_lens_q")
    if query.dim() not in (3, 4):
        raise ValueError(f"query: expected [B, q_len, H, 512] or [sum_q, H, 512], got {list(query.shape)}")

    scales = []
    for name, value in (("bmm1_scale", bmm1_scale), ("bmm2_scale", bmm2_scale)):
        if isinstance(value, torch.Tensor):
            if value.dtype != torch.float32 or value.numel() != 1:
                raise ValueError(
                    f"{name}: a tensor scale must be one float32 element, got {value.dtype} {list(value.shape)}"
                )
            scales += [1.0, value]
        else:
            scales += [float(value), None]
    bmm1_value, bmm1_tensor, bmm2_value, bmm2_tensor = scales

    if enable_pdl is None:
        enable_pdl = query.is_cuda
    if out is None:
        out = torch.empty(query.shape, dtype=torch.bfloat16, device=query.device)

    torch.ops.sparse_decode.dsv4_decode(
        query,
        swa_kv_cache,
        compressed_kv_cache,
        sparse_indices,
        out,
        None,  # lse: not an output of this FlashInfer function
        None,  # out_of_range_count
        workspace_buffer,
        sparse_topk_lens,
        seq_lens,
        cum_seq_lens_q,
        None,  # q_len: the 4-D query's second dim, or sum_q / B
        max_q_len,
        sinks,
        bmm1_value,
        bmm2_value,
        bmm1_tensor,
        bmm2_tensor,
        bool(enable_pdl),
        kv_layout,
    )
    return out
