"""The low-level calls: arrays in, `out` (and `lse`, the counter) written in place."""

from __future__ import annotations

import numbers
from typing import Any, Optional, Tuple

from . import _arguments, _arrays, _errors, _ext
from . import _names  # noqa: F401  (registers each entry point's names)

_INT32_MAX = 2**31 - 1

# Arrays the extension writes: they must be writable.
_OUTPUTS = ("out", "lse", "out_of_range_count", "workspace", "swa_rows", "swa_lens", "block_table", "hca_seq_lens",
            "error")


def _plain(**arrays: Any) -> dict:
    """Each array through _arrays.plain under its argument name, in the order given."""
    return {name: _arrays.plain(array, name) for name, array in arrays.items()}


def _run_with_workspace(entry: Any, arguments: dict, workspace: Any, q: Any, stream_handle: int) -> None:
    """Calls `entry` with the workspace given, or without one the scratch the call asks for
    (size_only), taken from torch's caching allocator on q's device (none for CPU arrays)."""
    if workspace is None:
        nbytes = _arguments.call(entry, dict(arguments, workspace=None, size_only=True), _OUTPUTS)
        workspace = _arrays.cuda_scratch(q, nbytes, int(stream_handle)) if nbytes else None
    _arguments.call(entry, dict(arguments, **_plain(workspace=workspace)), _OUTPUTS)


def _check_page_layout(page_layout: str) -> None:
    if page_layout not in ("NHD", "HND"):
        raise ValueError(f"page_layout: expected 'NHD' or 'HND', got {page_layout!r}")


def _requests(q_len: Any, max_q_len: Any) -> Tuple[Optional[int], Optional[int]]:
    """q_len and max_q_len as ints (or None); the library says which values it serves."""
    low = -_INT32_MAX - 1
    return _arguments.optional_integer(q_len, "q_len", low=low), _arguments.optional_integer(max_q_len, "max_q_len",
                                                                                              low=low)


# What the sinks add (docs/spec.md, section 1, "The sink term"): the library's SinkTerm values.
SINK_TERMS = {"in_output": 0, "in_output_and_lse": 1, "none": 2}


def _sink_term(value: Any) -> int:
    if not isinstance(value, str) or value not in SINK_TERMS:
        raise ValueError(f"sink_term: expected one of {', '.join(map(repr, SINK_TERMS))}, got {value!r}")
    return SINK_TERMS[value]


def _check_float(value: Any, name: str) -> None:
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a float, got {type(value).__name__}")


@_errors.named("dsv4_decode")
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
    sink_term: str = "in_output",
    bmm1_scale: Any = 1.0,
    bmm2_scale: Any = 1.0,
    lse: Any = None,
    out_of_range_count: Any = None,
    enable_pdl: bool = False,
    page_layout: str = "NHD",
    workspace: Any = None,
    stream: Optional[int] = None,
) -> None:
    """DeepSeek-V4 sparse MLA decode on plain rows (docs/spec.md, section 1).

    Every array is any DLPack array (torch, NumPy, CuPy, ...), all on one
    device: CPU arrays run the float64 CPU backend, CUDA arrays the GPU
    kernels. Nothing waits for the device and nothing is allocated but the
    workspace (see workspace), so the call can be captured in a CUDA graph.

    q:  [T, H, 512] or [B, q_len, H, 512]; FP8 E4M3 or BF16 (see below). A
        [B, q_len, ...] q, indices, lens, out or lse whose two leading dims
        do not merge into one token stride (a view of a larger, padded
        buffer) is read or written in place (a request view: uniform
        q_len, no cum_seq_lens_q; docs/spec.md, section 1).
    swa_kv, compressed_kv: pools of 512-element rows of q's dtype, as
        [pages, page_size, 512], [rows, 512], or 4-D with one KV head:
        page_layout "NHD" [pages, page_size, 1, 512] or "HND"
        [pages, 1, page_size, 512]. compressed_kv may be None when W == 128.
    indices: int32 [T, W] (or [B, q_len, W]); columns 0..127 name rows of
        swa_kv, the others rows of compressed_kv; -1 = unused.
    out: BF16, q's shape (or [T, H, 512]). lse: optional float32 [T, H].
    lens: optional int32 [T] (any stride, 0 included) or [B, q_len], active
        columns per token (SWA columns counted).
    seq_lens: optional int32 [B] with cum_seq_lens_q int32 [B + 1] and
        max_q_len, or a uniform q_len (default: q.shape[1] of a 4-D q, else
        T / B) for the sliding-window validity; any query length >= 1.
    sinks: optional float32 [H]. sink_term: what the sinks add (docs/spec.md,
        section 1): "in_output" (default: out's denominator only, lse
        without the sink), "in_output_and_lse" (lse counts the sink too: the
        one rank of a merge that adds it, see sparse_decode.distributed) or
        "none" (the sinks are ignored: every other rank).
    bmm1_scale, bmm2_scale: a float, or a 1-element float32 array on q's
        device, read when the kernel runs (a captured graph sees new values).
    out_of_range_count: optional int32 [1]; active columns whose index is past
        its pool are added to it.
    workspace: scratch for the split kernel (CUDA, contiguous, 16-byte aligned,
        contents ignored). None on a torch or CuPy CUDA array: when the split
        kernel would run, one of the bytes it needs is taken from torch's (or
        CuPy's) caching allocator on the stream the kernels run on (not while
        a CuPy stream is captured); pass one to keep the call free of
        allocation. A workspace that is too small, or None otherwise, runs the
        cluster or the stream kernel instead: the same bits, more time.
    stream: CUDA stream as an int; default: torch's (or CuPy's) current stream
        of q's device, else the legacy default stream.

    dtypes: FP8 is torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn, or any
    1-byte integer array holding E4M3 bits; BF16 is torch.bfloat16,
    ml_dtypes.bfloat16, or any 2-byte integer array holding BF16 bits (how
    NumPy without ml_dtypes and CuPy pass them).

    Raises ValueError for bad arguments, TypeError for an argument that is
    not an array (None, a list, a read-only output) or a scalar of the wrong
    type, NotImplementedError for valid calls that this build does not serve
    (the message says why), RuntimeError for CUDA errors. The message names
    the argument as this signature spells it (docs/python.md).
    """
    _arguments.require(q=q, swa_kv=swa_kv, indices=indices, out=out)
    _check_page_layout(page_layout)
    q_len, max_q_len = _requests(q_len, max_q_len)
    stream = _arguments.stream(stream)
    bmm1_value, bmm1_array = _arrays.scale(bmm1_scale, "bmm1_scale")
    bmm2_value, bmm2_array = _arrays.scale(bmm2_scale, "bmm2_scale")
    context, stream_handle = _arrays.launch_context(q, stream)
    with context:
        arguments = dict(
            **_plain(q=q, swa_kv=swa_kv, compressed_kv=compressed_kv, indices=indices, out=out, lens=lens,
                     seq_lens=seq_lens, cum_seq_lens_q=cum_seq_lens_q),
            q_len=q_len,
            max_q_len=max_q_len,
            **_plain(sinks=sinks),
            sink_term=_sink_term(sink_term),
            bmm1_scale=bmm1_value,
            bmm1_scale_array=bmm1_array,
            bmm2_scale=bmm2_value,
            bmm2_scale_array=bmm2_array,
            **_plain(lse=lse, out_of_range_count=out_of_range_count),
            enable_pdl=bool(enable_pdl),
            hnd=page_layout == "HND",
            stream=int(stream_handle),
        )
        _run_with_workspace(_ext.dsv4_decode, arguments, workspace, q, stream_handle)


@_errors.named("dsv4_decode_packed")
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
    seq_lens: Any = None,
    cum_seq_lens_q: Any = None,
    q_len: Optional[int] = None,
    max_q_len: Optional[int] = None,
    softmax_scale: float,
    sinks: Any = None,
    sink_term: str = "in_output",
    lse: Any = None,
    out_of_range_count: Any = None,
    enable_pdl: bool = False,
    batch_invariant: bool = False,
    workspace: Any = None,
    stream: Optional[int] = None,
) -> None:
    """DeepSeek-V4 sparse MLA decode on packed 584-byte rows (docs/spec.md, section 2).

    The `fp8_ds_mla` layout of FlashMLA, vLLM and SGLang on Hopper and of
    FlashInfer's SM120 path (docs/formats/packed_layout.md): a row is 448 FP8 E4M3
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
        [T] (any stride, 0 included) or [B, q_len]: column c of token t is
        active iff c < lens[t] and its index is in [0, rows of the pool).
    seq_lens: optional int32 [B], with cum_seq_lens_q / max_q_len or a
        uniform q_len as for dsv4_decode: section 1's window rule on the SWA
        segment (column c < 128 active only if c < min(128, p + 1)); the
        extra segment is not touched by it.
    q, the segments' indices and lens, out and lse may be [B, q_len, ...]
        request views, read or written in place, as for dsv4_decode.
    softmax_scale: a float, applied to q.k (there is no bmm2 scale).
    sinks: optional float32 [H]; sink_term as for dsv4_decode. lse: optional
        float32 [T, H] (natural log, sink excluded by default, -inf for a
        token with no active column).
    out_of_range_count: optional int32 [1], += active columns past their pool.
    workspace, enable_pdl, stream: as for dsv4_decode.
    batch_invariant: on the GPU, a token's output bits independent of the
        other tokens and their number (one kernel at every batch: slower at
        small batches and at 64 and 128 heads; docs/kernels/packed.md).

    Raises as dsv4_decode does (NotImplementedError e.g. for device memory
    without a Hopper GPU), naming the argument as this signature spells it.
    """
    _arguments.require(q=q, swa_cache=swa_cache, swa_indices=swa_indices, out=out)
    if extra_indices is None and (extra_cache is not None or extra_lens is not None):
        raise ValueError("extra_indices: expected an array (required with the extra segment: extra_cache or "
                         "extra_lens is given), got None")
    _check_float(softmax_scale, "softmax_scale")
    q_len, max_q_len = _requests(q_len, max_q_len)
    stream = _arguments.stream(stream)
    context, stream_handle = _arrays.launch_context(q, stream)
    with context:
        arguments = dict(
            **_plain(q=q, swa_cache=swa_cache, swa_indices=swa_indices, out=out, swa_lens=swa_lens,
                     extra_cache=extra_cache, extra_indices=extra_indices, extra_lens=extra_lens,
                     seq_lens=seq_lens, cum_seq_lens_q=cum_seq_lens_q),
            q_len=q_len,
            max_q_len=max_q_len,
            softmax_scale=float(softmax_scale),
            **_plain(sinks=sinks),
            sink_term=_sink_term(sink_term),
            **_plain(lse=lse, out_of_range_count=out_of_range_count),
            enable_pdl=bool(enable_pdl),
            batch_invariant=bool(batch_invariant),
            stream=int(stream_handle),
        )
        _run_with_workspace(_ext.dsv4_decode_packed, arguments, workspace, q, stream_handle)


@_errors.named("dsv4_decode_hca")
def dsv4_decode_hca(
    q: Any,
    swa_kv: Any,
    compressed_kv: Any,
    swa_rows: Any,
    swa_lens: Any,
    block_table: Any,
    lens: Any,
    hca_seq_lens: Any,
    out: Any,
    *,
    cum_seq_lens_q: Any = None,
    q_len: Optional[int] = None,
    max_q_len: Optional[int] = None,
    sinks: Any = None,
    sink_term: str = "in_output",
    bmm1_scale: float = 1.0,
    bmm2_scale: float = 1.0,
    lse: Any = None,
    out_of_range_count: Any = None,
    enable_pdl: bool = False,
    page_layout: str = "NHD",
    workspace: Any = None,
    stream: Optional[int] = None,
) -> None:
    """DeepSeek-V4 HCA decode: window rows, then the compressed stream read by pages (docs/spec.md, section 3).

    FlashInfer's backend="cute-dsl" argument set (docs/formats/hca_layout.md). Arrays
    as for dsv4_decode: any DLPack array, one device; CPU arrays run the
    float64 CPU backend, CUDA arrays the GPU: section 1's kernels read the
    block table directly (docs/kernels/page_walk.md), with no index table in
    memory. Nothing is allocated but the workspace.

    q:  FP8 E4M3 [T, H, 512] or [B, q_len, H, 512]. out: BF16, same tokens.
    swa_kv, compressed_kv: FP8 pools as for dsv4_decode (page_layout for 4-D
        ones); compressed_kv's page size is the stream's page size.
    swa_rows: int32 [T, 128] absolute rows of swa_kv; swa_lens: int32 [T],
        window columns c < swa_lens[t] are active (clamped to 0..128).
    block_table: int32 [T, max_pages] page ids of compressed_kv.
    lens: int32 [T], 128 + compressed slots the token attends.
        These four take any token stride (contiguous columns) or [B, q_len,
        ...] request views, read in place (no copy).
    hca_seq_lens: int32 [B], 128 + backing compressed slots per request: slot
        j of token t is read iff j < min(lens[t], hca_seq_lens[b]) - 128 (and
        j < max_pages * page_size), as row block_table[t, j // page_size] *
        page_size + j % page_size.
    cum_seq_lens_q (int32 [B + 1]) with max_q_len, or a uniform q_len
        (default: q.shape[1] of a 4-D q, else T / B): the token -> request
        map; any query length >= 1. q, out, lse and the metadata may be [B,
        q_len, ...] request views as for dsv4_decode (uniform q_len).
    sinks: optional float32 [H]; sink_term as for dsv4_decode. bmm1_scale,
        bmm2_scale: floats.
    lse: optional float32 [T, H]. out_of_range_count: optional int32 [1],
        += active rows/slots past their pool (negative ids are masked, uncounted).
    workspace: as for dsv4_decode: the split kernel's scratch (CUDA,
        contiguous, 16-byte aligned, contents ignored), the size
        dsv4_decode asks for on the same rows. None on a torch or CuPy CUDA
        array: taken from torch's (or CuPy's) caching allocator on the stream
        the kernels run on (not while a CuPy stream is captured: pass one
        there). Too small a one runs without the split path (the same bits).
    enable_pdl, stream: as for dsv4_decode.

    Raises as dsv4_decode does (NotImplementedError for max_pages *
    page_size > 16384 on CUDA arrays), naming the argument as this
    signature spells it.
    """
    _arguments.require(q=q, swa_kv=swa_kv, compressed_kv=compressed_kv, swa_rows=swa_rows, swa_lens=swa_lens,
                       block_table=block_table, lens=lens, hca_seq_lens=hca_seq_lens, out=out)
    _check_page_layout(page_layout)
    _check_float(bmm1_scale, "bmm1_scale")
    _check_float(bmm2_scale, "bmm2_scale")
    q_len, max_q_len = _requests(q_len, max_q_len)
    stream = _arguments.stream(stream)
    context, stream_handle = _arrays.launch_context(q, stream)
    with context:
        arguments = dict(
            **_plain(q=q, swa_kv=swa_kv, compressed_kv=compressed_kv, swa_rows=swa_rows, swa_lens=swa_lens,
                     block_table=block_table, lens=lens, hca_seq_lens=hca_seq_lens, out=out,
                     cum_seq_lens_q=cum_seq_lens_q),
            q_len=q_len,
            max_q_len=max_q_len,
            **_plain(sinks=sinks),
            sink_term=_sink_term(sink_term),
            bmm1_scale=float(bmm1_scale),
            bmm2_scale=float(bmm2_scale),
            **_plain(lse=lse, out_of_range_count=out_of_range_count),
            enable_pdl=bool(enable_pdl),
            hnd=page_layout == "HND",
            stream=int(stream_handle),
        )
        _run_with_workspace(_ext.dsv4_decode_hca, arguments, workspace, q, stream_handle)


def dsa_splits_for(rows: int) -> int:
    """Default splits for `rows` rows (seed 002's sparse_decode_splits, ~256 programs):
    doubling from 1 while splits < 32 and rows * splits * 2 <= 256."""
    return _ext.dsa_splits_for(int(rows))


def dsa_workspace_size(rows: int, heads: int, splits: Optional[int] = None, *, on_gpu: bool = True) -> int:
    """Bytes of workspace dsa_decode needs for rows x heads with `splits` (default
    dsa_splits_for(rows)): the float32 split partials on the GPU with splits > 1, else 0."""
    splits = dsa_splits_for(rows) if splits is None else int(splits)
    return _ext.dsa_workspace_size(int(rows), int(heads), splits, bool(on_gpu))


@_errors.named("dsa_decode")
def dsa_decode(
    q: Any,
    cache: Any,
    regions: Any,
    block_table: Any,
    positions: Any,
    active: Any,
    out: Any,
    *,
    scale: float,
    query_len: int = 1,
    splits: Optional[int] = None,
    clear_inactive: bool = True,
    k_scale: Any = None,
    v_scale: Any = None,
    gate: Any = None,
    enable_pdl: bool = False,
    workspace: Any = None,
    stream: Optional[int] = None,
) -> None:
    """Region-paged DSA decode with GQA (docs/spec.md section 4; Step5's sparse_decode_attention).

    Any DLPack arrays on one device: CPU arrays run the float64 CPU backend,
    CUDA arrays the GPU (device memory; NotImplementedError with the
    library's reason for a call this build does not serve). `out` is written
    in place; nothing is allocated but the workspace (see workspace).

    q, out: BF16 [rows, heads, 192], rows = tokens * G (row r: token r // G,
        group r % G), heads 1..16 per group; dims contiguous.
    cache: [pages, G, block, 384], K in dims 0..191, V in 192..383; BF16, or
        FP8 E4M3 (float8_e4m3fn or uint8) with k_scale and v_scale (float32
        [1] arrays on q's device, read when the call runs; ignored for BF16).
    regions: int32 [rows, R] logical block ids of the row's request (-1 or
        any invalid id: unused). block_table: int32 [requests, max_blocks]
        page of each logical block; request of row r is r // (G * query_len).
    positions: int32 [rows], keys at positions <= positions[r] are visible.
    active: int32 [rows], 0 = inactive (no work; out zeroed when
        clear_inactive, else untouched).
    scale: softmax scale. splits: 1..32 parts a row's regions are split into
        (default dsa_splits_for(rows)); on the GPU, splits > 1 need a
        workspace of dsa_workspace_size(rows, heads, splits) bytes.
    gate: optional BF16, FP16 or float32 [tokens, G * heads]: out *= the
        sigmoid of the gate rounded to the gate's dtype.
    workspace: the split partials on the GPU (CUDA, contiguous, 16-byte
        aligned, contents ignored). None on a torch or CuPy CUDA array: when
        the call needs one (splits > 1), it is taken from torch's (or CuPy's)
        caching allocator on the stream the kernels run on, as dsv4_decode
        does (not while a CuPy stream is captured: pass one there); pass one
        to keep the call free of allocation. A missing or too small one on
        CUDA arrays is a ValueError naming workspace_bytes.
    enable_pdl: programmatic dependent launch (CUDA arrays).
    stream: CUDA stream as an int; default: torch's (or CuPy's) current
        stream of q's device, else the legacy default stream.

    Raises as dsv4_decode does, naming the argument as this signature
    spells it.
    """
    _arguments.require(q=q, cache=cache, regions=regions, block_table=block_table, positions=positions,
                       active=active, out=out)
    _check_float(scale, "scale")
    query_len = _arguments.integer(query_len, "query_len", low=-_INT32_MAX - 1)
    rows = int(q.shape[0]) if getattr(q, "shape", None) else 0
    splits = dsa_splits_for(rows) if splits is None else _arguments.integer(splits, "splits", low=-_INT32_MAX - 1)
    stream = _arguments.stream(stream)
    context, stream_handle = _arrays.launch_context(q, stream)
    with context:
        arguments = dict(
            **_plain(q=q, cache=cache, regions=regions, block_table=block_table, positions=positions, active=active,
                     out=out),
            scale=float(scale),
            query_len=query_len,
            splits=splits,
            clear_inactive=bool(clear_inactive),
            **_plain(k_scale=k_scale, v_scale=v_scale, gate=gate),
            enable_pdl=bool(enable_pdl),
            stream=int(stream_handle),
        )
        _run_with_workspace(_ext.dsa_decode, arguments, workspace, q, stream_handle)
