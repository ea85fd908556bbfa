"""Drop-in replacements for FlashInfer functions, served by sparse_decode.

    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4

has exactly the signature of flashinfer.mla.trtllm_batch_decode_sparse_mla_dsv4
and its semantics, on Hopper, for two of its argument sets:
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
"""

from typing import Literal, NamedTuple, Optional, Union

import torch

from . import torch_ops  # noqa: F401  (registers torch.ops.sparse_decode.*)
from ._decode import convert_page_aligned_indices

_PACKED_ROW_BYTES = 584


def _is_packed(cache: torch.Tensor) -> bool:
    """A packed cache: bytes whose last dim is one 584-byte row (trtllm-gen rows are 512 elements)."""
    return cache.dtype in (torch.uint8, torch.int8) and cache.dim() > 0 and cache.shape[-1] == _PACKED_ROW_BYTES


def _refuse(arguments, why) -> None:
    """NotImplementedError for the first argument that is not at its default (why: text or a
    function giving it, so that nothing is formatted on the served path)."""
    for name, value, default in arguments:
        if (value is not None) if default is None else (value != default):
            raise NotImplementedError(f"{name}: {why() if callable(why) else why}")


def _refuse_hca(backend, hca_arguments) -> None:
    if backend not in ("auto", "trtllm-gen", "sparse"):
        raise NotImplementedError(
            f"backend={backend!r}: sparse_decode serves the trtllm-gen argument set (backend='auto' or "
            "'trtllm-gen'), the packed-row one (backend='auto' or 'sparse') and the HCA one (backend='cute-dsl')"
        )
    _refuse(
        hca_arguments,
        "an argument of FlashInfer's HCA (backend='cute-dsl') backend, which FlashInfer selects only when "
        "backend='cute-dsl' is passed: pass it, or leave this argument at its default",
    )


def _check_kv_layout(kv_layout) -> None:
    if kv_layout not in ("HND", "NHD"):
        raise ValueError(f"kv_layout: expected 'HND' or 'NHD', got {kv_layout!r}")


def _output(out: Optional[torch.Tensor], query: torch.Tensor) -> torch.Tensor:
    """`out`, or a BF16 tensor of query's shape when none is given."""
    if out is None:
        out = torch.empty(query.shape, dtype=torch.bfloat16, device=query.device)
    return out


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


def _convert(sparse_indices, sparse_topk_lens, seq_lens, compressed_kv_cache, kv_layout, **requests):
    """sparse_decode.convert_page_aligned_indices with outputs allocated on the table's device."""
    for name, value in (
        ("sparse_indices", sparse_indices),
        ("sparse_topk_lens", sparse_topk_lens),
        ("seq_lens", seq_lens),
    ):
        if value is None:
            raise ValueError(f"{name}: required by the compressed-page-aligned conversion")
    page_size = _page_size(compressed_kv_cache, kv_layout)
    rows, lens, pages, hca_seq_lens = convert_page_aligned_indices(
        sparse_indices, sparse_topk_lens, seq_lens, page_size=page_size, **requests
    )
    return DSV4HCAMetadata(rows, pages, hca_seq_lens, lens)


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
    """A trtllm-gen table -> reusable HCA metadata (FlashInfer's function of this name).

    sparse_indices int32 [B * q_len, W] (or [B, q_len, W]): columns 0..127 are
    absolute rows of swa_kv_cache (kept as they are: ring rotation and
    wraparound are fine); the active compressed columns (128 + j, j <
    min(sparse_topk_lens[t], W) - 128) must be the canonical expansion
    page_id * page_size + j % page_size of compressed_kv_cache's pages
    (ValueError naming the token and column otherwise). seq_lens int32 [B]
    gives the sliding window (section 1's rule), folded into swa_topk_lens.
    Returns DSV4HCAMetadata; pass its fields, with the same
    sparse_topk_lens, to trtllm_batch_decode_sparse_mla_dsv4(backend="cute-dsl").

    Allocates its outputs: not CUDA-graph safe; run it once during setup.
    The signature is FlashInfer's documented one (swa_kv_cache is not read:
    window rows are never rewritten). FlashInfer also requires dense causal
    top-k lengths; this conversion accepts any lens, and the decode then
    reads exactly what the table's section-1 decode reads
    (docs/formats/hca_layout.md). CPU tensors convert on the CPU; CUDA tensors raise
    NotImplementedError until the device converter exists.
    """
    _check_kv_layout(kv_layout)
    return _convert(sparse_indices, sparse_topk_lens, seq_lens, compressed_kv_cache, kv_layout, q_len=q_len)


def _split_scratch(workspace_buffer: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The upper half of FlashInfer's workspace_buffer as uint8, for the split kernel's group results (and,
    for HCA, the expanded table): FlashInfer's trtllm-gen kernels keep their zero-initialized counters at the
    start of the same buffer, which callers share between calls. Too small a half runs the cluster or the
    stream kernel (the same bits) for the trtllm-gen set, and is refused for HCA (the table must fit)."""
    if workspace_buffer is None or not workspace_buffer.is_contiguous():
        return workspace_buffer  # the library names what is wrong with it
    flat = workspace_buffer.reshape(-1).view(torch.uint8)
    return flat[(flat.numel() // 2) & ~255 :]  # 256-byte aligned when the buffer is


def _hca(
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
    """The HCA (backend='cute-dsl') argument set on sparse_decode::dsv4_decode_hca."""
    if isinstance(bmm1_scale, torch.Tensor) or isinstance(bmm2_scale, torch.Tensor):
        raise NotImplementedError("bmm1_scale/bmm2_scale: the HCA argument set takes Python floats only")
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
        for name, value in explicit:
            if value is not None:
                raise ValueError(f"{name}: produced by the compressed-page-aligned conversion, pass None")
        # One-shot compatibility path: allocates the metadata (not CUDA-graph safe).
        requests = dict(cum_seq_lens_q=cum_seq_lens_q, max_q_len=max_q_len)
        if cum_seq_lens_q is None and query.dim() == 4:
            requests = dict(q_len=int(query.shape[1]))
        metadata = _convert(sparse_indices, sparse_topk_lens, seq_lens, compressed_kv_cache, kv_layout, **requests)
        hca_swa_indices, hca_compressed_block_tables = metadata.hca_swa_indices, metadata.hca_compressed_block_tables
        hca_seq_lens, swa_topk_lens = metadata.hca_seq_lens, metadata.swa_topk_lens
    else:
        if sparse_indices is not None:
            raise ValueError(
                "sparse_indices: pass None with the explicit HCA metadata (backend='cute-dsl'), or set "
                "hca_sparse_indices_format='compressed-page-aligned' to convert a combined table"
            )
        for name, value in explicit + (
            ("sparse_topk_lens", sparse_topk_lens),
            ("compressed_kv_cache", compressed_kv_cache),
        ):
            if value is None:
                raise ValueError(f"{name}: required by the HCA argument set (backend='cute-dsl')")
    out = _output(out, query)
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
        _split_scratch(workspace_buffer),  # CUDA: the expanded table, its lens and the split scratch
        cum_seq_lens_q,
        None,  # q_len: the 4-D query's second dim, or sum_q / B
        max_q_len,
        sinks,
        float(bmm1_scale),
        float(bmm2_scale),
        bool(enable_pdl),
        kv_layout,
    )
    return out


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
    """Decode DeepSeek V4 sparse MLA (FlashInfer's trtllm-gen, SM120 packed and HCA argument sets).

    trtllm-gen set. query: [B, q_len, H, 512], or [sum_q, H, 512] with cum_seq_lens_q and
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

    Packed (SM120 "sparse") set: BF16 query as above; swa_kv_cache and
    compressed_kv_cache uint8 [pages, page_size, 584] or 4-D in kv_layout
    (FlashMLA's `fp8_ds_mla` pages; page stride a multiple of 16 bytes);
    sparse_indices [sum_q, W_swa] rows of swa_kv_cache with swa_topk_lens
    (optional here) [sum_q]; extra_sparse_indices [sum_q, W_extra] rows of
    compressed_kv_cache with extra_sparse_topk_lens [sum_q] (required with
    them); bmm1_scale is the softmax scale (a float: the packed operation
    takes it by value) and bmm2_scale must be 1.0 (NotImplementedError
    otherwise, as for tensor scales and for sparse_topk_lens / seq_lens,
    which belong to the trtllm-gen set). compressed_kv_cache is unused
    without extra_sparse_indices and extra_sparse_topk_lens, as FlashInfer
    requires it only with them. cum_seq_lens_q / max_q_len are accepted:
    tokens are read in flattened order either way.

    HCA set (backend="cute-dsl"; docs/spec.md section 3, docs/formats/hca_layout.md): FP8
    query as above and FP8 pools in kv_layout; sparse_indices None;
    hca_swa_indices [sum_q, 128] absolute rows of swa_kv_cache with
    swa_topk_lens [sum_q] (0..128 visible window columns);
    hca_compressed_block_tables [sum_q, max_pages] page ids of
    compressed_kv_cache; sparse_topk_lens [sum_q] = 128 + compressed slots;
    hca_seq_lens [B] = 128 + backing slots (a bound); float scales only.
    hca_use_persistent is accepted and ignored (a FlashInfer scheduler
    choice), hca_is_causal must be True, seq_lens is not read. Difference
    from FlashInfer: ids outside their pool are masked (not required legal).
    On CUDA tensors the upper half of workspace_buffer holds the GPU path's
    scratch: the expanded index table, sum_q * (128 + max_pages * page_size,
    rounded up to 4) * 4 bytes, its lens and the split kernel's scratch
    (docs/formats/hca_layout.md); too small a half is a ValueError naming
    workspace_bytes.
    With hca_sparse_indices_format="compressed-page-aligned" pass the
    trtllm-gen sparse_indices, sparse_topk_lens and seq_lens instead of the
    hca_* tensors and swa_topk_lens: they are converted
    (convert_compressed_page_aligned_sparse_indices_to_hca_metadata's rules)
    and decoded. That path allocates the metadata on every call and is not
    CUDA-graph safe; convert once and pass the explicit arguments instead.
    """
    _check_kv_layout(kv_layout)
    if backend == "cute-dsl":
        _refuse(
            (
                ("extra_sparse_indices", extra_sparse_indices, None),
                ("extra_sparse_topk_lens", extra_sparse_topk_lens, None),
            ),
            "an argument of FlashInfer's packed-row (SM120 'sparse') backend, not of the HCA one (backend='cute-dsl')",
        )
        _refuse((("hca_is_causal", hca_is_causal, True),), "must be True (HCA rows are per query token)")
    else:
        _refuse_hca(
            backend,
            (
                ("hca_swa_indices", hca_swa_indices, None),
                ("hca_compressed_block_tables", hca_compressed_block_tables, None),
                ("hca_seq_lens", hca_seq_lens, None),
                ("hca_is_causal", hca_is_causal, True),
                ("hca_use_persistent", hca_use_persistent, False),
                ("hca_sparse_indices_format", hca_sparse_indices_format, None),
            ),
        )
    if cum_seq_lens_q is not None and max_q_len is None:
        raise ValueError("max_q_len: required with cum_seq_lens_q")
    if query.dim() not in (3, 4):
        raise ValueError(f"query: expected [B, q_len, H, 512] or [sum_q, H, 512], got {list(query.shape)}")
    if enable_pdl is None:
        enable_pdl = query.is_cuda

    if backend == "cute-dsl":
        # hca_use_persistent picks FlashInfer's tile scheduler; the schedule here is the library's.
        return _hca(
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
        )
    if backend == "sparse" or (backend == "auto" and _is_packed(swa_kv_cache)):
        _refuse(
            (("sparse_topk_lens", sparse_topk_lens, None), ("seq_lens", seq_lens, None)),
            "an argument of FlashInfer's trtllm-gen argument set; the packed-row (SM120 'sparse') set takes "
            "swa_topk_lens and extra_sparse_topk_lens instead and has no seq_lens window",
        )
        return _packed(
            query,
            swa_kv_cache,
            workspace_buffer,
            sparse_indices,
            compressed_kv_cache,
            out,
            bmm1_scale,
            bmm2_scale,
            sinks,
            kv_layout,
            enable_pdl,
            swa_topk_lens,
            extra_sparse_indices,
            extra_sparse_topk_lens,
        )

    _refuse(
        (
            ("swa_topk_lens", swa_topk_lens, None),
            ("extra_sparse_indices", extra_sparse_indices, None),
            ("extra_sparse_topk_lens", extra_sparse_topk_lens, None),
        ),
        lambda: (
            "an argument of FlashInfer's packed-row (SM120 'sparse') backend, which needs packed uint8 "
            f"caches [..., 584]; swa_kv_cache is {swa_kv_cache.dtype} {list(swa_kv_cache.shape)}, so the "
            "trtllm-gen argument set is used: leave it at its default"
        ),
    )
    if sparse_indices is None:
        raise ValueError("sparse_indices: required by the trtllm-gen argument set ([sum_q, W] int32)")

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

    out = _output(out, query)

    torch.ops.sparse_decode.dsv4_decode(
        query,
        swa_kv_cache,
        compressed_kv_cache,
        sparse_indices,
        out,
        None,  # lse: not an output of this FlashInfer function
        None,  # out_of_range_count
        _split_scratch(workspace_buffer),
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


def _packed_pool(cache: Optional[torch.Tensor], name: str, kv_layout: str) -> Optional[torch.Tensor]:
    """[pages, page_size, 584] or NHD [pages, page_size, 1, 584] as they are; HND [pages, 1,
    page_size, 584] (the same bytes with one KV head) transposed to NHD, a view."""
    if cache is None or cache.dim() != 4 or kv_layout == "NHD":
        return cache
    if cache.shape[1] != 1:
        raise ValueError(f"{name}: expected HND [pages, 1, page_size, 584] (kv_layout='HND'), got {list(cache.shape)}")
    return cache.transpose(1, 2)


def _packed(
    query,
    swa_kv_cache,
    workspace_buffer,
    sparse_indices,
    compressed_kv_cache,
    out,
    bmm1_scale,
    bmm2_scale,
    sinks,
    kv_layout,
    enable_pdl,
    swa_topk_lens,
    extra_sparse_indices,
    extra_sparse_topk_lens,
) -> torch.Tensor:
    """The packed-row (SM120 'sparse') argument set on sparse_decode::dsv4_decode_packed."""
    if sparse_indices is None:
        raise ValueError("sparse_indices: required by the packed-row argument set (the SWA segment, [sum_q, W] int32)")
    if query.dtype != torch.bfloat16:
        raise ValueError(f"query: the packed-row argument set takes a BF16 query, got {query.dtype}")
    if isinstance(bmm1_scale, torch.Tensor) or isinstance(bmm2_scale, torch.Tensor):
        raise NotImplementedError(
            "bmm1_scale/bmm2_scale: tensor scales are not served with packed caches (the packed operation takes "
            "the softmax scale by value); pass a float"
        )
    if float(bmm2_scale) != 1.0:
        raise NotImplementedError(f"bmm2_scale: must be 1.0 with packed caches (docs/spec.md, section 2), got {bmm2_scale}")
    if extra_sparse_indices is None and extra_sparse_topk_lens is None:
        compressed_kv_cache = None
    out = _output(out, query)
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
    )
    return out
