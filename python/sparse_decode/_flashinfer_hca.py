"""FlashInfer's HCA (backend="cute-dsl") argument set on sparse_decode::dsv4_decode_hca, and its converter."""

from typing import Literal, NamedTuple, Optional

import torch

from . import _errors
from . import torch_ops  # noqa: F401  (registers torch.ops.sparse_decode.*)
from ._convert import convert_max_pages, convert_page_aligned_indices, convert_refusal
from ._flashinfer_common import check_kv_layout, float_scales, output, split_scratch, tensor


class DSV4HCAMetadata(NamedTuple):
    """The HCA metadata of a converted table, named as the arguments that take it:
    trtllm_batch_decode_sparse_mla_dsv4(..., backend="cute-dsl", **metadata._asdict())."""

    hca_swa_indices: torch.Tensor  # int32 [sum_q, 128]
    hca_compressed_block_tables: torch.Tensor  # int32 [sum_q, max_pages]
    hca_seq_lens: torch.Tensor  # int32 [B]
    swa_topk_lens: torch.Tensor  # int32 [sum_q]
    hca_is_causal: bool = True  # as FlashInfer's: HCA rows are per query token


def _page_size(cache: Optional[torch.Tensor], kv_layout: str) -> int:
    """Slots per page of a [pages, page_size, 512] pool or a 4-D one in kv_layout."""
    if cache is not None and cache.dim() == 4:
        return int(cache.shape[2] if kv_layout == "HND" else cache.shape[1])
    if cache is not None and cache.dim() == 3:
        return int(cache.shape[1])
    shape = None if cache is None else list(cache.shape)
    raise ValueError(f"compressed_kv_cache: expected a 3-D or 4-D paged pool (its page size is needed), got {shape}")


def _pool_rows(cache: Optional[torch.Tensor], kv_layout: str) -> int:
    """Rows of the SWA pool: pages * page_size of a 3-D or 4-D pool, the rows of a 2-D one."""
    if cache is None or cache.dim() < 2:
        shape = None if cache is None else list(cache.shape)
        raise ValueError(f"swa_kv_cache: expected a paged pool of 512-element rows, got {shape}")
    if cache.dim() == 2:
        return int(cache.shape[0])
    return int(cache.shape[0]) * _page_size(cache, kv_layout)


def capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (False where CUDA was never initialized: no
    capture can be running, and the query would initialize it)."""
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def _request_count(sparse_indices, seq_lens, q_len) -> None:
    """FlashInfer's refusal of a seq_lens whose length is not the query batch B = T / q_len."""
    tokens = sparse_indices.shape[:-1].numel() if sparse_indices.dim() >= 2 else 0
    if not isinstance(q_len, int) or q_len < 1 or tokens % q_len != 0 or seq_lens.numel() == tokens // q_len:
        return  # the package converter names what else is wrong
    raise ValueError(f"seq_lens: expected seq_lens with {tokens // q_len} entries, one per request (B = T / q_len: "
                     f"T = {tokens} query tokens, q_len = {q_len}), got shape {list(seq_lens.shape)}")


def _convert(sparse_indices, sparse_topk_lens, seq_lens, swa_kv_cache, compressed_kv_cache, kv_layout, **requests):
    """sparse_decode.convert_page_aligned_indices with outputs allocated on the table's device.

    CUDA tensors convert on the device; the block table's width and the refusals are FlashInfer's: the
    width is read from seq_lens and the report after the conversion, each a synchronization, as FlashInfer
    synchronizes there (which is why a CUDA-graph capture is refused by the callers)."""
    for name, value in (
        ("sparse_indices", sparse_indices),
        ("sparse_topk_lens", sparse_topk_lens),
        ("seq_lens", seq_lens),
    ):
        if value is None:
            raise ValueError(f"{name}: required by the compressed-page-aligned conversion")
        tensor(value, name)
    # The caches give the pools' sizes, and live where the table does, as FlashInfer requires.
    for name, cache in (("swa_kv_cache", swa_kv_cache), ("compressed_kv_cache", compressed_kv_cache)):
        if cache is None:
            raise ValueError(f"{name}: required by the compressed-page-aligned conversion (its pool's size)")
        tensor(cache, name)
        if cache.device != sparse_indices.device:
            raise ValueError(f"{name}: {name} must be on {sparse_indices.device}, sparse_indices' device, "
                             f"got {cache.device}")
    _request_count(sparse_indices, seq_lens, requests.get("q_len"))
    page_size = _page_size(compressed_kv_cache, kv_layout)
    sizes = dict(page_size=page_size, swa_pool_rows=_pool_rows(swa_kv_cache, kv_layout),
                 compressed_pool_pages=int(compressed_kv_cache.shape[0]))
    error = max_pages = None
    if sparse_indices.is_cuda:
        error = torch.zeros(3, dtype=torch.int32, device=sparse_indices.device)
        if seq_lens.numel() > 0:
            max_pages = max(1, convert_max_pages(int(seq_lens.max()), page_size))
    rows, lens, pages, hca_seq_lens = convert_page_aligned_indices(
        sparse_indices, sparse_topk_lens, seq_lens, error=error, max_pages=max_pages, **sizes, **requests
    )
    if error is not None:
        message = convert_refusal(error.tolist())
        if message is not None:
            raise ValueError(message)
    return DSV4HCAMetadata(rows, pages, hca_seq_lens, lens)


@_errors.named("flashinfer.convert")
def convert_compressed_page_aligned_sparse_indices_to_hca_metadata(
    sparse_indices: torch.Tensor,
    sparse_topk_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    swa_kv_cache: torch.Tensor,
    compressed_kv_cache: torch.Tensor,
    *,
    q_len: int,
    kv_layout: Literal["HND", "NHD"] = "HND",
) -> DSV4HCAMetadata:
    """A trtllm-gen table -> reusable HCA metadata (FlashInfer's function of this name, its outputs and
    refusals: docs/formats/hca_layout.md, "The converter").

    sparse_indices int32 [B * q_len, W] (or [B, q_len, W]): token i of
    request b sees visible = seq_lens[b] - q_len + i + 1 positions; its
    window columns c < min(visible, 128) are rows of swa_kv_cache, its
    compressed columns 128 + j, j < floor(visible / 128), the canonical
    expansion page * page_size + j % page_size of compressed_kv_cache's
    pages. sparse_topk_lens int32 [B * q_len] must be 128 + floor(visible /
    128) (FlashInfer's dense causal lengths). Returns DSV4HCAMetadata:
    hca_swa_indices [T, 128] (0 past the window), swa_topk_lens [T],
    hca_compressed_block_tables [T, convert_max_pages(max seq_lens,
    page_size)] (0 past the stream), hca_seq_lens [B] = 128 + floor(seq_lens
    / 128); pass its fields, with the same sparse_topk_lens, to
    trtllm_batch_decode_sparse_mla_dsv4(backend="cute-dsl").

    Refusals are FlashInfer's ValueErrors, naming the first refused token:
    seq_lens[b] < q_len, a table too narrow for a token's slots, lens that
    are not the dense causal ones, a window row outside swa_kv_cache, a
    page outside compressed_kv_cache, compressed columns that are not the
    canonical compressed-page expansion; a seq_lens that is not one entry
    a request; and caches on another device than sparse_indices. CPU
    tensors convert on the CPU. CUDA tensors convert on the device: the
    block-table width is read from seq_lens and the refusals from the
    device's report (a synchronization each, as FlashInfer has), so a call
    inside a CUDA-graph capture raises RuntimeError, as FlashInfer's does
    (sparse_decode.convert_page_aligned_indices with preallocated outputs
    and `error` converts inside one). Allocates its outputs, as FlashInfer
    does.
    """
    check_kv_layout(kv_layout)
    if capturing():
        raise RuntimeError(
            "sparse_indices: convert_compressed_page_aligned_sparse_indices_to_hca_metadata is not CUDA Graph "
            "capture safe (it allocates its outputs and reads seq_lens and its refusals on the host); expected a "
            "call outside the capture: convert before capturing, or call sparse_decode.convert_page_aligned_indices "
            "with preallocated outputs and error=, which is")
    return _convert(sparse_indices, sparse_topk_lens, seq_lens, swa_kv_cache, compressed_kv_cache, kv_layout,
                    q_len=q_len)


def hca(
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
    hca_swa_indices,
    hca_compressed_block_tables,
    hca_seq_lens,
    hca_sparse_indices_format,
) -> torch.Tensor:
    """The HCA (backend='cute-dsl') argument set: refusals as FlashInfer's (ValueError), then the op."""
    float_scales(bmm1_scale, bmm2_scale, "HCA argument set (backend='cute-dsl')")
    if hca_sparse_indices_format not in (None, "compressed-page-aligned"):
        raise ValueError(
            f"hca_sparse_indices_format: expected None or 'compressed-page-aligned', got {hca_sparse_indices_format!r}"
        )
    explicit = (
        ("hca_swa_indices", hca_swa_indices),
        ("hca_compressed_block_tables", hca_compressed_block_tables),
        ("hca_seq_lens", hca_seq_lens),
        ("swa_topk_lens", swa_topk_lens),
    )
    if hca_sparse_indices_format is not None:
        if capturing():
            raise RuntimeError(
                "hca_sparse_indices_format: 'compressed-page-aligned' is not CUDA Graph capture safe (each call "
                "allocates the HCA metadata and reads seq_lens and the refusals on the host); expected None "
                "inside a capture: convert before capturing with "
                "convert_compressed_page_aligned_sparse_indices_to_hca_metadata and pass the hca_* metadata")
        for name, value in explicit:
            if value is not None:
                raise ValueError(f"{name}: produced by the compressed-page-aligned conversion, pass None")
        # One-shot compatibility path: allocates the metadata (not CUDA-graph safe).
        requests = dict(cum_seq_lens_q=cum_seq_lens_q, max_q_len=max_q_len)
        if cum_seq_lens_q is None and query.dim() == 4:
            requests = dict(q_len=int(query.shape[1]))
        with _errors.entry("flashinfer.convert-tagged"):
            metadata = _convert(sparse_indices, sparse_topk_lens, seq_lens, swa_kv_cache, compressed_kv_cache,
                                kv_layout, **requests)
        hca_swa_indices, hca_compressed_block_tables = metadata.hca_swa_indices, metadata.hca_compressed_block_tables
        hca_seq_lens, swa_topk_lens = metadata.hca_seq_lens, metadata.swa_topk_lens
    else:
        if sparse_indices is not None:
            raise ValueError(
                "sparse_indices: sparse_indices must be None with the explicit HCA metadata (backend='cute-dsl'), "
                "or set hca_sparse_indices_format='compressed-page-aligned' to convert a combined table"
            )
        if seq_lens is not None:
            raise ValueError(
                "seq_lens: expected None: the explicit HCA metadata (backend='cute-dsl') uses hca_seq_lens "
                "(seq_lens is read only with hca_sparse_indices_format='compressed-page-aligned')"
            )
        for name, value in explicit + (
            ("sparse_topk_lens", sparse_topk_lens),
            ("compressed_kv_cache", compressed_kv_cache),
        ):
            if value is None:
                raise ValueError(f"{name}: required by the HCA argument set (backend='cute-dsl')")
    out = output(out, query)
    torch.ops.sparse_decode.dsv4_decode_hca(
        query,
        swa_kv_cache,
        compressed_kv_cache,
        hca_swa_indices,
        swa_topk_lens,
        hca_compressed_block_tables,
        sparse_topk_lens,
        hca_seq_lens,
        out,
        None,  # lse: not an output of this FlashInfer function
        None,  # out_of_range_count
        split_scratch(workspace_buffer),  # CUDA: the split scratch (optional)
        cum_seq_lens_q,
        None,  # q_len: the 4-D query's second dim, or sum_q / B
        max_q_len,
        sinks,
        float(bmm1_scale),
        float(bmm2_scale),
        bool(enable_pdl),
        kv_layout,
        caller="flashinfer.cute-dsl",
    )
    return out
