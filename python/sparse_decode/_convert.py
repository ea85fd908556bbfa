"""The HCA index converter of the Python package: FlashInfer's page-aligned section-1 table into HCA
metadata (docs/spec.md, section 3), on host arrays and device tensors."""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

from . import _arguments, _arrays, _errors, _ext
from ._decode import _INT32_MAX, _OUTPUTS, _plain, _requests

# A pool size that bounds nothing: the converter's pool checks pass for any index.
_UNBOUNDED = 2**62

# The device converter's report (error[2]): the rule a refused token breaks, as the caller's arguments say it.
CONVERT_RULES = {
    1: ("seq_lens", "expected seq_lens[b] >= q_len (every token sees a position)"),
    2: ("indices", "expected a width >= 128 + floor(visible / 128), the token's compressed slots"),
    3: ("lens", "expected 128 + floor(visible / 128) (dense causal lengths)"),
    4: ("max_pages", "expected >= convert_max_pages(seq_lens[b], page_size), the pages of the token's request"),
    5: ("indices", "expected the active SWA indices (window columns c < min(128, visible)) to be rows of the "
                   "SWA pool"),
    6: ("indices", "expected the compressed columns' pages to be valid physical page IDs of the compressed pool"),
    7: ("indices", "expected compressed columns 128 + j to be the canonical compressed-page expansion page * "
                   "page_size + j % page_size"),
}


def convert_refusal(report: Any) -> Optional[str]:
    """The message of a converter report (error: 3 ints, read after the stream), or None when it refused nothing."""
    count, token, rule = (int(v) for v in report)
    if count == 0:
        return None
    name, expected = CONVERT_RULES.get(rule, ("indices", f"rule {rule}"))
    return f"{name}: token {token} ({count} refused in all): {expected}"


def convert_max_pages(max_seq_len: int, page_size: int) -> int:
    """Block-table columns of FlashInfer's conversion for a longest sequence of max_seq_len: its compressed
    slots floor(max_seq_len / 128) rounded up to tiles of 128 slots, in pages of page_size, at least 1 (0 for a
    page size the converter refuses)."""
    return _ext.convert_max_pages(int(max_seq_len), int(page_size))


def _default_max_pages(seq_lens: Any, width: int, page_size: int, host: bool) -> int:
    """FlashInfer's width from seq_lens read on the host (host arrays); for device arrays, which are not read,
    the width of the longest sequence the table can hold (W - 128 compressed slots): FlashInfer's followed by
    columns of 0."""
    longest = min(max(width - 128, 0) * 128 + 127, _INT32_MAX)
    if host:
        values = [int(v) for v in _arrays.host_values(seq_lens)]
        longest = max(values, default=0)
    return max(1, convert_max_pages(max(longest, 0), page_size))


@_errors.named("convert_page_aligned_indices")
def convert_page_aligned_indices(
    indices: Any,
    lens: Any,
    seq_lens: Any,
    *,
    page_size: int,
    swa_pool_rows: Optional[int] = None,
    compressed_pool_pages: Optional[int] = None,
    cum_seq_lens_q: Any = None,
    q_len: Optional[int] = None,
    max_q_len: Optional[int] = None,
    max_pages: Optional[int] = None,
    swa_rows: Any = None,
    swa_lens: Any = None,
    block_table: Any = None,
    hca_seq_lens: Any = None,
    error: Any = None,
    stream: Optional[int] = None,
) -> Tuple[Any, Any, Any, Any]:
    """A section-1 table -> the HCA metadata of dsv4_decode_hca (docs/spec.md section 3; FlashInfer's
    convert_compressed_page_aligned_sparse_indices_to_hca_metadata, docs/formats/hca_layout.md, "The
    converter").

    indices: int32 [B * q_len, W] (or [B, q_len, W]) section-1 columns.
    lens: int32 [T] (sparse_topk_lens), 128 + floor(visible / 128) for every
        token (visible = seq_lens[b] - q_len + i + 1: FlashInfer's dense
        causal lengths).
    seq_lens: int32 [B] KV lengths; q_len uniform (default: indices.shape[1]
        of a 3-D table, else T / B); cum_seq_lens_q is refused (FlashInfer's
        HCA rows are B * q_len).
    page_size: slots per page of the compressed pool (2, 4, ..., 128).
    swa_pool_rows, compressed_pool_pages: the pools' sizes; active window
        rows and compressed pages must lie inside them (None: unchecked).
    Token refusals (FlashInfer's rules: window rows in the SWA pool, pages
    in the compressed pool, compressed columns the canonical compressed-page
    expansion page * page_size + j % page_size, dense causal lens, the
    table wide enough):
    CPU arrays raise ValueError naming the first refused token; nothing is
    written but `error`.

    Returns (swa_rows int32 [T, 128], swa_lens int32 [T], block_table int32
    [T, max_pages], hca_seq_lens int32 [B]), FlashInfer's values: window rows
    past the window and pages past the stream are 0, hca_seq_lens = 128 +
    floor(seq_lens / 128). max_pages: block_table's width when it is given;
    else for CPU arrays FlashInfer's, convert_max_pages(max seq_lens,
    page_size); for CUDA arrays (seq_lens is not read on the host) that of the
    longest sequence the table holds (W - 128 slots): FlashInfer's table
    followed by columns of 0, which the decode never reads.

    error: int32 [3], the report: tokens refused, the first (-1: none), its
    rule (convert_refusal() words it). Required with CUDA arrays: they
    convert on the device with no host synchronization (CUDA-graph safe with
    preallocated outputs) and refuse nothing by exception; read error[0]
    after the stream before using the outputs, which are written only when
    it is 0. Outputs not given are allocated (zeroed, indices' framework and
    device), which is not CUDA-graph safe.
    """
    _arguments.require(indices=indices, lens=lens, seq_lens=seq_lens)
    page_size = _arguments.integer(page_size, "page_size", low=-_INT32_MAX - 1, high=2**63 - 1)
    swa_pool_rows = _arguments.integer(_UNBOUNDED if swa_pool_rows is None else swa_pool_rows, "swa_pool_rows",
                                       low=-2**63, high=2**63 - 1)
    compressed_pool_pages = _arguments.integer(_UNBOUNDED if compressed_pool_pages is None else compressed_pool_pages,
                                               "compressed_pool_pages", low=-2**63, high=2**63 - 1)
    q_len, max_q_len = _requests(q_len, max_q_len)
    max_pages = _arguments.optional_integer(max_pages, "max_pages", low=1)
    stream = _arguments.stream(stream)
    if not hasattr(indices, "shape"):
        _arguments.diagnose(dict(indices=indices), ())
    shape = tuple(int(d) for d in indices.shape)
    if len(shape) < 2:
        raise ValueError(f"indices: expected [T, W] (or [B, q_len, W]) int32, got shape {list(shape)}")
    tokens, width = math.prod(shape[:-1]), shape[-1]
    if block_table is not None and max_pages is not None and int(block_table.shape[-1]) != max_pages:
        raise ValueError(
            f"max_pages: expected the width of block_table ({int(block_table.shape[-1])}) or None, got {max_pages}"
        )
    if not hasattr(seq_lens, "shape"):
        _arguments.diagnose(dict(seq_lens=seq_lens), ())
    requests = math.prod(int(d) for d in seq_lens.shape)
    if block_table is not None:
        max_pages = int(block_table.shape[-1])
    elif max_pages is None:
        max_pages = _default_max_pages(seq_lens, width, page_size, _arrays.on_host(seq_lens))
    if swa_rows is None:
        swa_rows = _arrays.empty_int32(indices, (tokens, 128))
    if swa_lens is None:
        swa_lens = _arrays.empty_int32(indices, (tokens,))
    if block_table is None:
        block_table = _arrays.empty_int32(indices, (tokens, max_pages))
    if hca_seq_lens is None:
        hca_seq_lens = _arrays.empty_int32(indices, (requests,))
    context, stream_handle = _arrays.launch_context(indices, stream)
    with context:
        arguments = dict(
            **_plain(indices=indices, lens=lens, seq_lens=seq_lens, swa_rows=swa_rows, swa_lens=swa_lens,
                     block_table=block_table, hca_seq_lens=hca_seq_lens, error=error,
                     cum_seq_lens_q=cum_seq_lens_q),
            q_len=q_len,
            max_q_len=max_q_len,
            page_size=page_size,
            swa_pool_rows=swa_pool_rows,
            compressed_pool_pages=compressed_pool_pages,
            stream=int(stream_handle),
        )
        _arguments.call(_ext.convert_page_aligned_indices, arguments, _OUTPUTS)
    return swa_rows, swa_lens, block_table, hca_seq_lens
