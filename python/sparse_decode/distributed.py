"""Decode context parallelism over a torch.distributed process group.

Each rank of a group attends over the KV rows it holds (for instance
dsv4_decode over its own columns: the others -1) and writes its partial
output and lse into its send rows; `StateExchange.merge` all-gathers every
rank's (out, lse) into preallocated receive rows, in one collective, and
merges them in rank order with sparse_decode.merge_states (docs/spec.md,
section 5). NCCL on CUDA tensors, gloo on CPU tensors.

    exchange = StateExchange(max_tokens=2048, heads=16, device="cuda")   # collective
    part_out, part_lse = exchange.partial(T)       # this rank's send rows, [T, H, 512] and [T, H]
    sparse_decode.dsv4_decode(q, swa, compressed, my_indices, part_out, lse=part_lse, ...)
    exchange.merge(out, out_lse)                   # out [T, H, 512]: every rank gets the merged result

Sinks. A call with attention sinks adds the sink term on exactly one rank,
so that the merge is the single call over all of a token's rows: that rank
passes sink_term="in_output_and_lse" (the sink in out's denominator and in
its lse), every other rank sink_term="none" (docs/spec.md, sections 1 and
5). A token whose rows all sit on other ranks still gets the sink from the
first rank's partial (out 0, lse = the sink).

    sink_term = "in_output_and_lse" if dist.get_rank(group) == 0 else "none"
    sparse_decode.dsv4_decode(..., sinks=sinks, sink_term=sink_term, out=part_out, lse=part_lse)

The merged lse then counts the sink: log(sum of exp(scores) + exp(sink)).

NVLink multicast (NVLS) stays off. Importing this module sets
NCCL_NVLS_ENABLE=0 unless the environment already has a value, and an NCCL
group refuses to build an exchange when the value is anything but 0. NCCL
reads it when the group's communicator is created (its first collective, or
init_process_group(device_id=...)): import this module (or set the variable)
before that.

CUDA graphs. Everything the step needs is preallocated: the exchange's send
rows [max_tokens] and receive rows [world_size, max_tokens] at construction,
and the caller's `out` (and `out_lse`). Construction is collective (every
rank of the group builds its exchange at the same point) and runs one
all-gather, so the NCCL communicator exists before any capture. Capture one
graph a token count T (the collective's size is part of it): inside, the
rank's decode writes exchange.partial(T) and exchange.merge(out, out_lse)
gathers and merges; nothing is allocated or synchronized with the host.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Tuple

import torch
import torch.distributed as dist

from ._merge import MERGE_MAX_RANKS, merge_states

NVLS_VARIABLE = "NCCL_NVLS_ENABLE"
os.environ.setdefault(NVLS_VARIABLE, "0")

_ROW_ALIGNMENT = 16  # bytes: every partial row and lse row of a rank starts 16-byte aligned


class StateExchange:
    """Preallocated all-gather and merge of the ranks' (out, lse) for up to max_tokens tokens.

    A rank's send row of one token holds its partial output [H, D] (dtype)
    then its lse [H] (float32), padded to 16 bytes; the receive rows are the
    send rows of every rank, rank-major, as all_gather_into_tensor lays them.
    """

    def __init__(
        self,
        max_tokens: int,
        heads: int,
        *,
        head_dim: int = 512,
        dtype: torch.dtype = torch.bfloat16,
        device: Any = None,
        group: Optional[dist.ProcessGroup] = None,
    ) -> None:
        if dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"dtype: expected torch.bfloat16 or torch.float32, got {dtype}")
        if max_tokens < 1 or heads < 1 or head_dim < 8 or head_dim % 8:
            raise ValueError(
                f"max_tokens, heads, head_dim: expected >= 1, >= 1 and a positive multiple of 8, "
                f"got {max_tokens}, {heads}, {head_dim}"
            )
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        if self.world_size > MERGE_MAX_RANKS:
            raise ValueError(f"group: expected at most {MERGE_MAX_RANKS} ranks, got {self.world_size}")
        self.backend = str(dist.get_backend(group))  # "nccl", "gloo", or "cpu:gloo,cuda:nccl"
        nccl = "nccl" in self.backend
        if nccl and os.environ.get(NVLS_VARIABLE) != "0":
            raise ValueError(
                f"{NVLS_VARIABLE}: expected 0 (NVLink multicast off) for an NCCL group, got "
                f"{os.environ.get(NVLS_VARIABLE)!r}"
            )
        self.max_tokens, self.heads, self.head_dim, self.dtype = int(max_tokens), int(heads), int(head_dim), dtype
        element = torch.tensor([], dtype=dtype).element_size()
        self._out_bytes = self.heads * self.head_dim * element
        self._lse_bytes = self.heads * 4
        self.row_bytes = -(-(self._out_bytes + self._lse_bytes) // _ROW_ALIGNMENT) * _ROW_ALIGNMENT
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if nccl else "cpu"
        self.device = torch.device(device)
        self._send = torch.zeros(self.max_tokens * self.row_bytes, dtype=torch.uint8, device=self.device)
        self._receive = torch.zeros(self.world_size * self._send.numel(), dtype=torch.uint8, device=self.device)
        self.all_gather(1)  # creates the communicator now, outside any graph capture

    def partial(self, tokens: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """(out [T, H, D] of dtype, lse [T, H] float32): this rank's send rows for T tokens, to be written by its
        decode call (strided views: token stride row_bytes)."""
        out, lse = self._views(self._send, 1, self._check_tokens(tokens))
        return out[0], lse[0]

    def gathered(self, tokens: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """(partials [R, T, H, D], lses [R, T, H]): every rank's rows after the last all-gather of T tokens."""
        return self._views(self._receive, self.world_size, self._check_tokens(tokens))

    def all_gather(self, tokens: int) -> None:
        """All-gathers every rank's send rows of T tokens into the receive rows (collective; merge() runs it)."""
        send = self._send[: tokens * self.row_bytes]
        receive = self._receive[: self.world_size * send.numel()]
        dist.all_gather_into_tensor(receive, send, group=self.group)


    def merge(
        self,
        out: torch.Tensor,
        out_lse: Optional[torch.Tensor] = None,
        *,
        partial: Optional[torch.Tensor] = None,
        partial_lse: Optional[torch.Tensor] = None,
        enable_pdl: bool = False,
    ) -> None:
        """All-gathers every rank's send rows of T tokens (T from out [T, H, D]) and merges them into out
        (and out_lse [T, H]) in rank order. Collective: every rank of the group calls it with the same T.
        partial, partial_lse: this rank's (out, lse) when its decode did not write partial(T); they are
        copied into the send rows first."""
        if out.dim() < 3 or tuple(out.shape[-2:]) != (self.heads, self.head_dim):
            raise ValueError(f"out: expected [T, {self.heads}, {self.head_dim}], got {tuple(out.shape)}")
        if (partial is None) != (partial_lse is None):
            raise ValueError("partial, partial_lse: expected both or neither")
        if out.numel() == 0:
            return  # no token on any rank: nothing to exchange
        tokens = self._check_tokens(out.numel() // (self.heads * self.head_dim))
        if partial is not None:
            send_out, send_lse = self.partial(tokens)
            send_out.copy_(partial.reshape(send_out.shape))
            send_lse.copy_(partial_lse.reshape(send_lse.shape))
        self.all_gather(tokens)
        partials, lses = self.gathered(tokens)
        merge_states(partials, lses, out, out_lse=out_lse, enable_pdl=enable_pdl)

    def _check_tokens(self, tokens: int) -> int:
        if not 1 <= tokens <= self.max_tokens:
            raise ValueError(f"tokens: expected 1..{self.max_tokens} (max_tokens), got {tokens}")
        return int(tokens)

    def _views(self, buffer: torch.Tensor, ranks: int, tokens: int) -> Tuple[torch.Tensor, torch.Tensor]:
        rows = buffer[: ranks * tokens * self.row_bytes].view(ranks, tokens, self.row_bytes)
        out = rows[:, :, : self._out_bytes].view(self.dtype).unflatten(-1, (self.heads, self.head_dim))
        lse = rows[:, :, self._out_bytes : self._out_bytes + self._lse_bytes].view(torch.float32)
        return out, lse


def merge_across_ranks(
    partial: torch.Tensor,
    partial_lse: torch.Tensor,
    out: torch.Tensor,
    out_lse: Optional[torch.Tensor] = None,
    *,
    group: Optional[dist.ProcessGroup] = None,
) -> None:
    """One merge over the group without a kept exchange: builds one for partial's T tokens (allocates and
    runs a first collective, so not for CUDA graph capture), then StateExchange.merge. Collective."""
    tokens = partial.numel() // (partial.shape[-2] * partial.shape[-1])
    exchange = StateExchange(
        max(tokens, 1), partial.shape[-2], head_dim=partial.shape[-1], dtype=partial.dtype, device=partial.device,
        group=group,
    )
    exchange.merge(out, out_lse, partial=partial, partial_lse=partial_lse)
