"""Drop-in replacements for FlashInfer functions, served by sparse_decode.

    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4

has exactly the signature of flashinfer.mla.trtllm_batch_decode_sparse_mla_dsv4
(and batch_decode_sparse_mla_dsv4, FlashInfer's backend-neutral alias: the
same function) and its semantics, on Hopper, for its three argument sets:
- trtllm-gen (docs/spec.md, section 1): plain FP8/BF16 caches of 512-element rows,
  one combined sparse_indices table, sparse_topk_lens, seq_lens; served by
  the custom op torch.ops.sparse_decode.dsv4_decode;
- SM120 "sparse" (docs/spec.md, section 2): packed uint8 caches of 584-byte rows,
  sparse_indices + swa_topk_lens for the SWA segment, compressed_kv_cache +
  extra_sparse_indices + extra_sparse_topk_lens for the extra one; served by
  torch.ops.sparse_decode.dsv4_decode_packed.
FlashInfer picks the set by GPU architecture; here backend="sparse", or
backend="auto" with a uint8/int8 swa_kv_cache whose last dim is 584, picks
the packed set;
- HCA (docs/spec.md, section 3): backend="cute-dsl" with hca_swa_indices,
  hca_compressed_block_tables, hca_seq_lens, swa_topk_lens and
  sparse_topk_lens; served by torch.ops.sparse_decode.dsv4_decode_hca. With
  hca_sparse_indices_format="compressed-page-aligned" a trtllm-gen table is
  converted first (allocates: not CUDA-graph safe, as in FlashInfer);
  `convert_compressed_page_aligned_sparse_indices_to_hca_metadata` converts
  once ahead of time instead.
They work under torch.compile and in CUDA graphs (pass `out` to keep
allocation out of a captured region), the converting path excepted.
Refusals raise FlashInfer's exception types and name this signature's
arguments (docs/python.md lists them).
"""

import numbers
from typing import Literal, Optional, Union

import torch

from . import torch_ops  # noqa: F401  (registers torch.ops.sparse_decode.*)
from ._flashinfer_common import (BACKENDS, check_kv_layout, is_packed, optional_tensors, output, refuse,
                                 refuse_other_set, scale, split_scratch, storage_rows, tensor)
from ._flashinfer_hca import DSV4HCAMetadata, convert_compressed_page_aligned_sparse_indices_to_hca_metadata, hca
from ._flashinfer_packed import packed

__all__ = [
    "trtllm_batch_decode_sparse_mla_dsv4",
    "batch_decode_sparse_mla_dsv4",
    "convert_compressed_page_aligned_sparse_indices_to_hca_metadata",
    "DSV4HCAMetadata",
]

_HCA_ARGUMENTS = ("hca_swa_indices", "hca_compressed_block_tables", "hca_seq_lens")
_REMAP_ARGUMENTS = ("remapped_sparse_indices_buffer", "sparse_indices_are_storage_offsets")


def _trtllm_gen_scales(bmm1_scale, bmm2_scale):
    """(bmm1 value, bmm1 tensor, bmm2 value, bmm2 tensor): a tensor scale is read at run time; FlashInfer
    takes float32 ones only (TypeError otherwise)."""
    scales = []
    for name, value in (("bmm1_scale", bmm1_scale), ("bmm2_scale", bmm2_scale)):
        if isinstance(value, torch.Tensor):
            if value.dtype != torch.float32:
                raise TypeError(f"{name}: expected a float or a float32 tensor, got a {value.dtype} tensor")
            if value.numel() != 1:
                raise ValueError(f"{name}: expected a float32 tensor of one element, got shape {list(value.shape)}")
            scales += [1.0, value]
        else:
            scales += [float(value), None]
    return scales


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
    remapped_sparse_indices_buffer: Optional[torch.Tensor] = None,
    sparse_indices_are_storage_offsets: Optional[bool] = None,
) -> torch.Tensor:
    """Decode DeepSeek V4 sparse MLA (FlashInfer's trtllm-gen, SM120 packed and HCA argument sets).

    trtllm-gen set. query: [B, q_len, H, 512] (any q_len >= 1), or [sum_q, H, 512] with
    cum_seq_lens_q and max_q_len; BF16 or FP8 E4M3, with both KV pools of the same dtype in
    kv_layout ("HND" [pages, 1, page_size, 512] or "NHD" [pages, page_size,
    1, 512]). sparse_indices [sum_q, W] int32: columns 0..127 are rows of
    swa_kv_cache, the rest rows of compressed_kv_cache, -1 unused (or [B,
    q_len, W]); sparse_topk_lens [sum_q] (or [B, q_len]) counts the 128 SWA
    columns; seq_lens [B] gives the SWA validity window. Returns `out` (BF16,
    query's shape), allocated only when not given. [B, q_len, ...] query,
    sparse_indices, sparse_topk_lens and out that are views of larger
    buffers (dims that do not merge into one token stride) are read and
    written in place, without a copy; so are those of the packed set.

    Differences from FlashInfer, all on calls FlashInfer refuses: seq_lens and
    compressed_kv_cache (when W == 128) may be None (no window check, no
    compressed pool), and any device that sparse_decode serves runs it (CPU
    tensors run its float64 CPU backend). enable_pdl=None means on for CUDA
    tensors, as FlashInfer does on devices that support PDL.

    Strided pools (a page stride larger than page_size rows, rows further
    apart than 512 elements) are read where they are, with no remap.
    sparse_indices_are_storage_offsets says what the indices count: None or
    False, logical rows (row r is slot r % page_size of page r / page_size);
    True, storage rows (row r sits r row strides past the pool's first row,
    whatever the page stride: FlashInfer's flat row coordinates), read
    through a [rows, 512] view of the same memory that ends at the pool's
    last row (no copy). On tightly packed pools the two agree. FlashInfer
    requires it set for strided pools; here None means False.
    remapped_sparse_indices_buffer (FlashInfer's scratch for the remap of
    logical indices on strided pools) is accepted and never written: no
    remap is needed. Both belong to this set: the other sets refuse them
    (ValueError, as FlashInfer).

    Packed (SM120 "sparse") set: BF16 query as above; swa_kv_cache and
    compressed_kv_cache uint8 [pages, page_size, 584] or 4-D in kv_layout
    (FlashMLA's `fp8_ds_mla` pages; page stride a multiple of 16 bytes);
    sparse_indices [sum_q, W_swa] rows of swa_kv_cache with swa_topk_lens
    (optional here) [sum_q]; extra_sparse_indices [sum_q, W_extra] rows of
    compressed_kv_cache with extra_sparse_topk_lens [sum_q] (required with
    them); bmm1_scale is the softmax scale (a float: the packed operation
    takes it by value) and bmm2_scale must be 1.0 (ValueError otherwise, as
    for tensor scales, as in FlashInfer). sparse_topk_lens is accepted and
    not read, as in FlashInfer (the segments' lengths are swa_topk_lens and
    extra_sparse_topk_lens). seq_lens [B], with cum_seq_lens_q / max_q_len
    or the 4-D query's q_len, applies the window rule of the trtllm-gen set
    to the SWA segment (column c < 128 active only if c < min(128, p + 1));
    FlashInfer reads the window from swa_topk_lens alone: with an engine's
    swa_topk_lens that stop at the window the two agree. compressed_kv_cache
    is unused without extra_sparse_indices and extra_sparse_topk_lens, as
    FlashInfer requires it only with them.

    HCA set (backend="cute-dsl"; docs/spec.md section 3, docs/formats/hca_layout.md): FP8
    query as above and FP8 pools in kv_layout; sparse_indices None;
    hca_swa_indices [sum_q, 128] absolute rows of swa_kv_cache with
    swa_topk_lens [sum_q] (0..128 visible window columns);
    hca_compressed_block_tables [sum_q, max_pages] page ids of
    compressed_kv_cache; sparse_topk_lens [sum_q] = 128 + compressed slots;
    hca_seq_lens [B] = 128 + backing slots (a bound); float scales only.
    hca_use_persistent is accepted and ignored (a FlashInfer scheduler
    choice), hca_is_causal must be True and seq_lens None (ValueError
    otherwise, as in FlashInfer). Difference
    from FlashInfer: ids outside their pool are masked (not required legal).
    On CUDA tensors the upper half of workspace_buffer holds the split
    kernel's scratch; too small a half runs without the split path (the same
    bits). No index table is built: the kernels read the block table
    (docs/formats/hca_layout.md).
    With hca_sparse_indices_format="compressed-page-aligned" pass the
    trtllm-gen sparse_indices, sparse_topk_lens and seq_lens instead of the
    hca_* tensors and swa_topk_lens: they are converted
    (convert_compressed_page_aligned_sparse_indices_to_hca_metadata's rules)
    and decoded. That path allocates the metadata on every call and is not
    CUDA-graph safe (RuntimeError inside a capture, as in FlashInfer);
    convert once and pass the explicit arguments instead.

    Refusals raise what FlashInfer raises (ValueError for a bad argument or
    an argument of another backend's set, TypeError for a tensor scale that
    is not float32), naming the argument as this signature spells it;
    NotImplementedError says what FlashInfer serves and this build does not.
    """

    tensor(query, "query")
    tensor(swa_kv_cache, "swa_kv_cache")
    optional_tensors(workspace_buffer=workspace_buffer, sparse_indices=sparse_indices,
                     compressed_kv_cache=compressed_kv_cache, sparse_topk_lens=sparse_topk_lens, seq_lens=seq_lens,
                     out=out, sinks=sinks, cum_seq_lens_q=cum_seq_lens_q, swa_topk_lens=swa_topk_lens,
                     extra_sparse_indices=extra_sparse_indices, extra_sparse_topk_lens=extra_sparse_topk_lens,
                     hca_swa_indices=hca_swa_indices, hca_compressed_block_tables=hca_compressed_block_tables,
                     hca_seq_lens=hca_seq_lens, remapped_sparse_indices_buffer=remapped_sparse_indices_buffer)
    scale(bmm1_scale, "bmm1_scale")
    scale(bmm2_scale, "bmm2_scale")
    if max_q_len is not None and (isinstance(max_q_len, bool) or not isinstance(max_q_len, numbers.Integral)):
        raise TypeError(f"max_q_len: expected an int or None, got {type(max_q_len).__name__}")
    if sparse_indices_are_storage_offsets is not None and not isinstance(sparse_indices_are_storage_offsets, bool):
        raise TypeError("sparse_indices_are_storage_offsets: expected True, False or None, got "
                        f"{type(sparse_indices_are_storage_offsets).__name__}")
    check_kv_layout(kv_layout)
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    if backend == "cute-dsl":
        argument_set = "cute-dsl"
    elif backend == "sparse" or (backend == "auto" and is_packed(swa_kv_cache)):
        argument_set = "sparse"
    else:
        argument_set = "trtllm-gen"
    if argument_set != "trtllm-gen":
        refuse_other_set(
            ((name, value, None) for name, value in zip(
                _REMAP_ARGUMENTS, (remapped_sparse_indices_buffer, sparse_indices_are_storage_offsets))),
            argument_set, "trtllm-gen set, for its indices into strided pools")
    if argument_set == "cute-dsl":
        refuse_other_set(
            (
                ("extra_sparse_indices", extra_sparse_indices, None),
                ("extra_sparse_topk_lens", extra_sparse_topk_lens, None),
            ),
            "cute-dsl", "packed-row, SM120 'sparse', set",
        )
        if not hca_is_causal:
            raise ValueError(f"hca_is_causal: backend='cute-dsl' supports causal HCA only (rows per query token), "
                             f"expected True, got {hca_is_causal!r}")
    else:
        refuse_other_set(
            tuple((name, value, None) for name, value in zip(
                _HCA_ARGUMENTS, (hca_swa_indices, hca_compressed_block_tables, hca_seq_lens)))
            + (
                ("hca_is_causal", hca_is_causal, True),
                ("hca_use_persistent", hca_use_persistent, False),
                ("hca_sparse_indices_format", hca_sparse_indices_format, None),
            ),
            argument_set, "HCA set, selected by backend='cute-dsl'",
        )
    if cum_seq_lens_q is not None and max_q_len is None:
        raise ValueError("max_q_len: required with cum_seq_lens_q")
    if query.dim() not in (3, 4):
        raise ValueError(f"query: expected [B, q_len, H, 512] or [sum_q, H, 512], got {list(query.shape)}")
    if enable_pdl is None:
        enable_pdl = query.is_cuda

    if argument_set == "cute-dsl":
        # hca_use_persistent picks FlashInfer's tile scheduler; the schedule here is the library's.
        return hca(query, swa_kv_cache, workspace_buffer, sparse_indices, compressed_kv_cache, sparse_topk_lens,
                   seq_lens, out, bmm1_scale, bmm2_scale, sinks, kv_layout, cum_seq_lens_q, max_q_len, enable_pdl,
                   swa_topk_lens, hca_swa_indices, hca_compressed_block_tables, hca_seq_lens,
                   hca_sparse_indices_format)
    if argument_set == "sparse":
        return packed(query, swa_kv_cache, workspace_buffer, sparse_indices, compressed_kv_cache, sparse_topk_lens,
                      seq_lens, out, bmm1_scale, bmm2_scale, sinks, kv_layout, cum_seq_lens_q, max_q_len, enable_pdl,
                      swa_topk_lens, extra_sparse_indices, extra_sparse_topk_lens)

    refuse(
        ValueError,
        (
            ("swa_topk_lens", swa_topk_lens, None),
            ("extra_sparse_indices", extra_sparse_indices, None),
            ("extra_sparse_topk_lens", extra_sparse_topk_lens, None),
        ),
        lambda name: (
            "an argument of the packed-row (SM120 'sparse') set, which needs packed uint8 caches [..., 584]; "
            f"swa_kv_cache is {swa_kv_cache.dtype} {list(swa_kv_cache.shape)}, so backend={backend!r} uses the "
            "trtllm-gen set: leave it None"
        ),
    )
    if sparse_indices is None:
        raise ValueError("sparse_indices: required by the trtllm-gen argument set ([sum_q, W] int32)")
    bmm1_value, bmm1_tensor, bmm2_value, bmm2_tensor = _trtllm_gen_scales(bmm1_scale, bmm2_scale)
    if sparse_indices_are_storage_offsets:
        swa_kv_cache = storage_rows(swa_kv_cache, "swa_kv_cache", kv_layout)
        if compressed_kv_cache is not None:
            compressed_kv_cache = storage_rows(compressed_kv_cache, "compressed_kv_cache", kv_layout)
    out = output(out, query)
    torch.ops.sparse_decode.dsv4_decode(
        query,
        swa_kv_cache,
        compressed_kv_cache,
        sparse_indices,
        out,
        None,  # lse: not an output of this FlashInfer function
        None,  # out_of_range_count
        split_scratch(workspace_buffer),
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
        caller="flashinfer.trtllm-gen",
    )
    return out


# FlashInfer's backend-neutral name for the same function (the same object, as there).
batch_decode_sparse_mla_dsv4 = trtllm_batch_decode_sparse_mla_dsv4
