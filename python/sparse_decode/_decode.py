"""The low-level calls: arrays in, `out` (and `lse`, the counter) written in place."""

from __future__ import annotations

import numbers
from typing import Any, Optional

from . import _arrays, _ext


def dsv4_decode(
    q: Any,
    swa_kv: Any,
    compressed_kv: Any,
    indices: Any,
    out: Any,
    *,
    lens: Any = None,
    seq_lens: Any = None,
    cum_seq_lens_q: Any = None,
    q_len: Optional[int] = None,
    max_q_len: Optional[int] = None,
    sinks: Any = None,
    bmm1_scale: Any = 1.0,
    bmm2_scale: Any = 1.0,
    lse: Any = None,
    out_of_range_count: Any = None,
    enable_pdl: bool = False,
    page_layout: str = "NHD",
    workspace: Any = None,
    stream: Optional[int] = None,
) -> None:
    """DeepSeek-V4 sparse MLA decode on plain rows (SPEC section 1).

    Every array is any DLPack array (torch, NumPy, CuPy, ...), all on one
    device: CPU arrays run the float64 CPU backend, CUDA arrays the GPU
    kernels. Nothing is allocated and nothing waits for the device, so the
    call can be captured in a CUDA graph.

    q:  [T, H, 512] or [B, q_len, H, 512]; FP8 E4M3 or BF16 (see below).
    swa_kv, compressed_kv: pools of 512-element rows of q's dtype, as
        [pages, page_size, 512], [rows, 512], or 4-D with one KV head:
        page_layout "NHD" [pages, page_size, 1, 512] or "HND"
        [pages, 1, page_size, 512]. compressed_kv may be None when W == 128.
    indices: int32 [T, W] (or [B, q_len, W]); columns 0..127 name rows of
        swa_kv, the others rows of compressed_kv; -1 = unused.
    out: BF16, q's shape (or [T, H, 512]). lse: optional float32 [T, H].
    lens: optional int32 [T], active columns per token (SWA columns counted).
    seq_lens: optional int32 [B] with cum_seq_lens_q int32 [B + 1] and
        max_q_len, or a uniform q_len (default: q.shape[1] of a 4-D q, else
        T / B) for the sliding-window validity.
    sinks: optional float32 [H].
    bmm1_scale, bmm2_scale: a float, or a 1-element float32 array on q's
        device, read when the kernel runs (a captured graph sees new values).
    out_of_range_count: optional int32 [1]; active columns whose index is past
        its pool are added to it.
    workspace: scratch of at least the bytes the library asks for (none so far).
    stream: CUDA stream as an int; default: torch's (or CuPy's) current stream
        of q's device, else the legacy default stream.

    dtypes: FP8 is torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn, or any
    1-byte integer array holding E4M3 bits; BF16 is torch.bfloat16,
    ml_dtypes.bfloat16, or any 2-byte integer array holding BF16 bits (how
    NumPy without ml_dtypes and CuPy pass them).

    Raises ValueError for bad arguments, NotImplementedError for valid calls
    that this build does not serve (the message says why), RuntimeError for
    CUDA errors; the message is the library's.
    """
    if page_layout not in ("NHD", "HND"):
        raise ValueError(f"page_layout: expected 'NHD' or 'HND', got {page_layout!r}")
    bmm1_value, bmm1_array = _arrays.scale(bmm1_scale, "bmm1_scale")
    bmm2_value, bmm2_array = _arrays.scale(bmm2_scale, "bmm2_scale")
    context, stream_handle = _arrays.launch_context(q, stream)
    with context:
        _ext.dsv4_decode(
            _arrays.plain(q, "q"),
            _arrays.plain(swa_kv, "swa_kv"),
            _arrays.plain(compressed_kv, "compressed_kv"),
            _arrays.plain(indices, "indices"),
            _arrays.plain(out, "out"),
            lens=_arrays.plain(lens, "lens"),
            seq_lens=_arrays.plain(seq_lens, "seq_lens"),
            cum_seq_lens_q=_arrays.plain(cum_seq_lens_q, "cum_seq_lens_q"),
            q_len=q_len,
            max_q_len=max_q_len,
            sinks=_arrays.plain(sinks, "sinks"),
            bmm1_scale=bmm1_value,
            bmm1_scale_array=bmm1_array,
            bmm2_scale=bmm2_value,
            bmm2_scale_array=bmm2_array,
            lse=_arrays.plain(lse, "lse"),
            out_of_range_count=_arrays.plain(out_of_range_count, "out_of_range_count"),
            workspace=_arrays.plain(workspace, "workspace"),
            enable_pdl=bool(enable_pdl),
            hnd=page_layout == "HND",
            stream=int(stream_handle),
        )


def dsv4_decode_packed(
    q: Any,
    swa_cache: Any,
    swa_indices: Any,
    out: Any,
    *,
    swa_lens: Any = None,
    extra_cache: Any = None,
    extra_indices: Any = None,
    extra_lens: Any = None,
    softmax_scale: float,
    sinks: Any = None,
    lse: Any = None,
    out_of_range_count: Any = None,
    enable_pdl: bool = False,
    workspace: Any = None,
    stream: Optional[int] = None,
) -> None:
    """DeepSeek-V4 sparse MLA decode on packed 584-byte rows (SPEC section 2).

    The `fp8_ds_mla` layout of FlashMLA, vLLM and SGLang on Hopper and of
    FlashInfer's SM120 path (docs/packed_layout.md): a row is 448 FP8 E4M3
    dims in 7 tiles of 64, each scaled by a UE8M0 byte, then 64 BF16 dims; a
    page holds its page_size data rows (576 bytes each), then their 8-byte
    scale rows. Arrays as for dsv4_decode (any DLPack array, one device; CPU
    arrays run the float64 CPU backend).

    q:   BF16 [T, H, 512] or [B, q_len, H, 512]. out: BF16, same token count.
    swa_cache, extra_cache: uint8 (any 1-byte dtype) [pages, page_size, 584]
        or FlashMLA's [pages, page_size, 1, 584]. The page stride is the
        array's stride(0): it may exceed page_size * 584 but must be a
        multiple of 16 bytes, so an odd page size needs padded pages (page
        size 61: 61 * 584 + 8 bytes, e.g. a [pages, 35632] byte array sliced
        to its first 35624 bytes and reshaped).
    swa_indices, extra_indices: int32 [T, W] or [B, q_len, W]: rows of their
        pool (row r = page r // page_size, slot r % page_size), -1 unused.
    swa_lens (optional), extra_lens (required with the extra segment): int32
        [T] or [B, q_len]: column c of token t is active iff c < lens[t] and
        its index is in [0, rows of the pool).
    softmax_scale: a float, applied to q.k (there is no bmm2 scale).
    sinks: optional float32 [H]. lse: optional float32 [T, H] (natural log,
        sink excluded, -inf for a token with no active column).
    out_of_range_count: optional int32 [1], += active columns past their pool.
    workspace, enable_pdl, stream: as for dsv4_decode.

    Raises ValueError for bad arguments, NotImplementedError for valid calls
    that this build does not serve (e.g. device memory without a Hopper
    GPU), RuntimeError for CUDA errors; the message is the library's.
    """
    if not isinstance(softmax_scale, numbers.Real):
        raise TypeError(f"softmax_scale: expected a float, got {type(softmax_scale).__name__}")
    context, stream_handle = _arrays.launch_context(q, stream)
    with context:
        _ext.dsv4_decode_packed(
            _arrays.plain(q, "q"),
            _arrays.plain(swa_cache, "swa_cache"),
            _arrays.plain(swa_indices, "swa_indices"),
            _arrays.plain(out, "out"),
            swa_lens=_arrays.plain(swa_lens, "swa_lens"),
            extra_cache=_arrays.plain(extra_cache, "extra_cache"),
            extra_indices=_arrays.plain(extra_indices, "extra_indices"),
            extra_lens=_arrays.plain(extra_lens, "extra_lens"),
            softmax_scale=float(softmax_scale),
            sinks=_arrays.plain(sinks, "sinks"),
            lse=_arrays.plain(lse, "lse"),
            out_of_range_count=_arrays.plain(out_of_range_count, "out_of_range_count"),
            workspace=_arrays.plain(workspace, "workspace"),
            enable_pdl=bool(enable_pdl),
            stream=int(stream_handle),
        )
