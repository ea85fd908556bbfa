"""The torch.library custom ops `sparse_decode::dsv4_decode`,
`sparse_decode::dsv4_decode_packed`, `sparse_decode::dsv4_decode_hca`,
`sparse_decode::dsa_decode` and `sparse_decode::merge_states`.

Each is a mutating op that returns nothing: it writes `out` (and `lse`,
`out_of_range_count`, the scratch `workspace`) in place and allocates
nothing when given a workspace (without one, dsv4_decode, dsv4_decode_packed
and dsa_decode take the split kernel's scratch from torch's caching allocator, which a
torch.cuda.graph capture serves from its pool), so a call can sit inside
CUDA graph capture, and torch.compile sees it as one opaque node (its fake
implementation below has nothing to compute: no outputs). Callers allocate
`out` once, outside the captured region, as sparse_decode.flashinfer_compat
does when given no `out`.

Scales of dsv4_decode: a float (`bmm1_scale`, baked into a captured graph)
or a 1-element float32 tensor (`bmm1_scale_tensor`, read by the kernel at run
time, so a replayed graph sees new values); the tensor wins when both are
given. dsv4_decode_packed takes its `softmax_scale` as a float only (the C++
API has no device-pointer form for it), so a captured graph keeps its value.

The DeepSeek-V4 ops take `sink_term` ("in_output", "in_output_and_lse" or
"none"; docs/spec.md section 1) before `caller`, and dsv4_decode_packed the
request mapping of its window (seq_lens, cum_seq_lens_q, q_len, max_q_len).

Each op ends with `caller` (default ''): the drop-ins pass their key so that a
refusal names the upstream's arguments and has its exception type; the
renaming runs inside the op, so a compiled graph's refusals read the same.
"""

from typing import List, Optional

import torch

from . import _errors
from ._decode import dsv4_decode as _dsv4_decode
from ._decode import dsv4_decode_packed as _dsv4_decode_packed
from ._decode import dsv4_decode_hca as _dsv4_decode_hca
from ._decode import dsa_decode as _dsa_decode
from ._merge import merge_states as _merge_states

_MUTATED = ("out", "lse", "out_of_range_count", "workspace")
# The mutated arguments come first and have no defaults: torch drops trailing
# arguments equal to their defaults from boxed calls, and its version counter
# bump then misses a mutated argument placed after them (IndexError, torch 2.11).


@torch.library.custom_op("sparse_decode::dsv4_decode", mutates_args=_MUTATED)
def dsv4_decode(
    q: torch.Tensor,
    swa_kv: torch.Tensor,
    compressed_kv: Optional[torch.Tensor],
    indices: torch.Tensor,
    out: torch.Tensor,
    lse: Optional[torch.Tensor],
    out_of_range_count: Optional[torch.Tensor],
    workspace: Optional[torch.Tensor],
    lens: Optional[torch.Tensor] = None,
    seq_lens: Optional[torch.Tensor] = None,
    cum_seq_lens_q: Optional[torch.Tensor] = None,
    q_len: Optional[int] = None,
    max_q_len: Optional[int] = None,
    sinks: Optional[torch.Tensor] = None,
    bmm1_scale: float = 1.0,
    bmm2_scale: float = 1.0,
    bmm1_scale_tensor: Optional[torch.Tensor] = None,
    bmm2_scale_tensor: Optional[torch.Tensor] = None,
    enable_pdl: bool = False,
    page_layout: str = "NHD",
    sink_term: str = "in_output",
    caller: str = "",
) -> None:
    """sparse_decode.dsv4_decode on torch tensors, on the current stream of q's device. caller: whose
    names and exception types a refusal takes ('' this op's; a drop-in passes its own, see _names.py)."""
    arguments = dict(locals())  # the op's arguments, named as the low-level call names them
    arguments.pop("caller")
    for name in ("bmm1_scale", "bmm2_scale"):
        tensor = arguments.pop(name + "_tensor")
        if tensor is not None:  # the tensor wins when both are given
            arguments[name] = tensor
    with _errors.entry(caller):
        _dsv4_decode(**arguments)


@torch.library.custom_op("sparse_decode::dsv4_decode_packed", mutates_args=_MUTATED)
def dsv4_decode_packed(
    q: torch.Tensor,
    swa_cache: torch.Tensor,
    swa_indices: torch.Tensor,
    out: torch.Tensor,
    lse: Optional[torch.Tensor],
    out_of_range_count: Optional[torch.Tensor],
    workspace: Optional[torch.Tensor],
    softmax_scale: float,
    swa_lens: Optional[torch.Tensor] = None,
    extra_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_lens: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    enable_pdl: bool = False,
    seq_lens: Optional[torch.Tensor] = None,
    cum_seq_lens_q: Optional[torch.Tensor] = None,
    q_len: Optional[int] = None,
    max_q_len: Optional[int] = None,
    sink_term: str = "in_output",
    batch_invariant: bool = False,
    caller: str = "",
) -> None:
    """sparse_decode.dsv4_decode_packed on torch tensors, on the current stream of q's device.

    The mutated tensors come first as for dsv4_decode; softmax_scale follows
    them because it has no default (the packed call takes it by value).
    caller: as for dsv4_decode.
    """
    arguments = dict(locals())  # the op's arguments are the low-level call's, by name
    with _errors.entry(arguments.pop("caller")):
        _dsv4_decode_packed(**arguments)


@torch.library.custom_op("sparse_decode::dsv4_decode_hca", mutates_args=_MUTATED)
def dsv4_decode_hca(
    q: torch.Tensor,
    swa_kv: torch.Tensor,
    compressed_kv: torch.Tensor,
    swa_rows: torch.Tensor,
    swa_lens: torch.Tensor,
    block_table: torch.Tensor,
    lens: torch.Tensor,
    hca_seq_lens: torch.Tensor,
    out: torch.Tensor,
    lse: Optional[torch.Tensor],
    out_of_range_count: Optional[torch.Tensor],
    workspace: Optional[torch.Tensor],
    cum_seq_lens_q: Optional[torch.Tensor] = None,
    q_len: Optional[int] = None,
    max_q_len: Optional[int] = None,
    sinks: Optional[torch.Tensor] = None,
    bmm1_scale: float = 1.0,
    bmm2_scale: float = 1.0,
    enable_pdl: bool = False,
    page_layout: str = "NHD",
    sink_term: str = "in_output",
    caller: str = "",
) -> None:
    """sparse_decode.dsv4_decode_hca on torch tensors (float scales only, as the HCA set takes them).
    caller: as for dsv4_decode."""
    arguments = dict(locals())  # the op's arguments are the low-level call's, by name
    with _errors.entry(arguments.pop("caller")):
        _dsv4_decode_hca(**arguments)


@torch.library.custom_op("sparse_decode::dsa_decode", mutates_args=("out", "workspace"))
def dsa_decode(
    q: torch.Tensor,
    cache: torch.Tensor,
    regions: torch.Tensor,
    block_table: torch.Tensor,
    positions: torch.Tensor,
    active: torch.Tensor,
    out: torch.Tensor,
    workspace: Optional[torch.Tensor],
    scale: float,
    splits: int,
    query_len: int = 1,
    clear_inactive: bool = True,
    k_scale: Optional[torch.Tensor] = None,
    v_scale: Optional[torch.Tensor] = None,
    gate: Optional[torch.Tensor] = None,
    enable_pdl: bool = False,
    caller: str = "",
) -> None:
    """sparse_decode.dsa_decode on torch tensors, on the current stream of q's device. splits is explicit
    (sparse_decode.dsa_splits_for(rows) gives the default) so that a traced graph does not depend on a
    host-side choice. workspace None on CUDA tensors with splits > 1: taken from torch's caching allocator
    (a torch.cuda.graph capture serves it from its pool), as for dsv4_decode. caller: as for dsv4_decode."""
    arguments = dict(locals())  # the op's arguments are the low-level call's, by name
    with _errors.entry(arguments.pop("caller")):
        _dsa_decode(**arguments)


@torch.library.custom_op("sparse_decode::merge_states", mutates_args=("out", "out_lse"))
def merge_states(
    partials: List[torch.Tensor],
    lses: List[torch.Tensor],
    out: torch.Tensor,
    out_lse: Optional[torch.Tensor],
    stacked: bool = False,
    enable_pdl: bool = False,
) -> None:
    """sparse_decode.merge_states on torch tensors, on the current stream of out's device: one tensor a
    rank in each list, or (stacked) one [R, T, H, D] partial tensor and one [R, T, H] lse tensor."""
    _merge_states(partials[0] if stacked else partials, lses[0] if stacked else lses, out, out_lse=out_lse,
                  enable_pdl=enable_pdl)


def _fake(*args, **kwargs) -> None:
    # Outputs are the mutated arguments (out, lse, the counter, the workspace),
    # which already have their shapes; argument errors surface from the real
    # call (at the first run).
    return None


for _op in (dsv4_decode, dsv4_decode_packed, dsv4_decode_hca, dsa_decode, merge_states):
    _op.register_fake(_fake)
del _op
