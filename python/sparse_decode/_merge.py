"""merge_states: partial attention results of several ranks merged into one (docs/spec.md, section 5)."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from . import _arrays, _ext

MERGE_MAX_RANKS: int = _ext.MERGE_MAX_RANKS


def merge_states(
    partials: Union[Any, Sequence[Any]],
    lses: Union[Any, Sequence[Any]],
    out: Any,
    *,
    out_lse: Any = None,
    enable_pdl: bool = False,
    stream: Optional[int] = None,
) -> None:
    """Merges R partial attention results in rank order; writes `out` (and `out_lse`) in place.

    For each token and head, with m the largest non-empty lse:
        L   = m + log(sum_r exp(lse_r - m))
        out = sum_r exp(lse_r - L) * partial_r
    A rank with lse = -inf is empty: its partial is never used (it may hold
    NaN). Every rank empty gives out = 0 and L = -inf. One non-empty rank
    gives its partial back exactly.

    partials: a list of R arrays [T, H, D] (one a rank, one dtype and strides)
        or one stacked array [R, T, H, D] (any rank stride); BF16 (or a
        2-byte integer view of BF16 bits) or float32; D a multiple of 8;
        16-byte aligned rows. T may be spelled [B, q_len].
    lses: float32 natural-log sums of exp, a list of R arrays [T, H] or one
        [R, T, H]; any strides ([H, T] layouts: pass lse.T).
    out: [T, H, D], BF16 or float32 (independent of the partials' dtype).
    out_lse: optional float32 [T, H], any strides: L.
    enable_pdl, stream: as for dsv4_decode (CUDA arrays).

    FlashInfer's merge_states(v [T, R, H, D], s [T, R, H]) is
    merge_states(v.transpose(0, 1), s.transpose(0, 1) * math.log(2), out):
    FlashInfer's lse is base 2 (docs/kernels/merge.md lists every difference).

    Any DLPack arrays on one device: CPU arrays run the float64 CPU backend,
    CUDA arrays the GPU kernel, without allocation or synchronization
    (capturable in a CUDA graph). Raises ValueError for bad arguments (the
    message names the argument), NotImplementedError for calls this build
    does not serve, RuntimeError for CUDA errors.
    """
    listed = isinstance(partials, (list, tuple))
    if listed != isinstance(lses, (list, tuple)):
        raise TypeError("partials, lses: expected both lists (one array a rank) or both stacked arrays [R, ...]")
    partial_list = list(partials) if listed else [partials]
    lse_list = list(lses) if listed else [lses]
    context, stream_handle = _arrays.launch_context(out, stream)
    with context:
        _ext.merge_states(
            [_arrays.plain(p, f"partials[{r}]") for r, p in enumerate(partial_list)],
            [_arrays.plain(s, f"lses[{r}]") for r, s in enumerate(lse_list)],
            _arrays.plain(out, "out"),
            out_lse=_arrays.plain(out_lse, "out_lse"),
            stacked=not listed,
            enable_pdl=bool(enable_pdl),
            stream=int(stream_handle),
        )
