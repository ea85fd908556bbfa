"""What the FlashInfer drop-in's argument sets share (flashinfer_compat.py)."""

import numbers
from typing import Optional

import torch

PACKED_ROW_BYTES = 584
BACKENDS = ("auto", "trtllm-gen", "cute-dsl", "sparse")


def is_packed(cache: torch.Tensor) -> bool:
    """A packed cache: bytes whose last dim is one 584-byte row (trtllm-gen rows are 512 elements)."""
    return cache.dtype in (torch.uint8, torch.int8) and cache.dim() > 0 and cache.shape[-1] == PACKED_ROW_BYTES


def refuse(exception, arguments, why) -> None:
    """`exception` for the first argument that is not at its default (why: text, or a function of the
    argument's name giving it, so that nothing is formatted on the served path)."""
    for name, value, default in arguments:
        if (value is not None) if default is None else (value != default):
            raise exception(f"{name}: {why(name) if callable(why) else why}")


def refuse_other_set(arguments, argument_set: str, owner: str) -> None:
    """ValueError for the first of `arguments` (name, value, default) not at its default: an argument of
    the `owner` set that the `argument_set` does not take, in FlashInfer's words ("backend='cute-dsl' does
    not accept hca_is_causal")."""
    refuse(ValueError, arguments,
           lambda name: f"backend={argument_set!r} does not accept {name} (an argument of the {owner}); "
           "leave it at its default")


def tensor(value, name: str) -> None:
    """TypeError unless `value` is a torch.Tensor (FlashInfer's arguments are tensors)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")


def optional_tensors(**values) -> None:
    """TypeError naming the first of `values` that is neither None nor a torch.Tensor."""
    for name, value in values.items():
        if value is not None and not isinstance(value, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor or None, got {type(value).__name__}")


def scale(value, name: str) -> None:
    """TypeError unless `value` is a number or a tensor (FlashInfer's bmm1_scale / bmm2_scale)."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, torch.Tensor)):
        raise TypeError(f"{name}: expected a float or a float32 tensor, got {type(value).__name__}")


def check_kv_layout(kv_layout) -> None:
    if kv_layout not in ("HND", "NHD"):
        raise ValueError(f"kv_layout: expected 'HND' or 'NHD', got {kv_layout!r}")


def output(out: Optional[torch.Tensor], query: torch.Tensor) -> torch.Tensor:
    """`out`, or a BF16 tensor of query's shape when none is given."""
    if out is None:
        out = torch.empty(query.shape, dtype=torch.bfloat16, device=query.device)
    return out


def float_scales(bmm1_scale, bmm2_scale, argument_set: str) -> None:
    """ValueError for a tensor scale where the argument set takes Python floats (FlashInfer's SM120 and HCA
    sets), naming the first."""
    for name, value in (("bmm1_scale", bmm1_scale), ("bmm2_scale", bmm2_scale)):
        if isinstance(value, torch.Tensor):
            raise ValueError(f"{name}: the {argument_set} takes a Python float, got a tensor")


def split_scratch(workspace_buffer: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The upper half of FlashInfer's workspace_buffer as uint8, for the split kernel's group results:
    FlashInfer's trtllm-gen kernels keep their zero-initialized counters at the start of the same buffer,
    which callers share between calls. Too small a half runs the cluster or the stream kernel (the same
    bits), for the trtllm-gen set and HCA alike."""
    if workspace_buffer is None or not workspace_buffer.is_contiguous():
        return workspace_buffer  # the library names what is wrong with it
    flat = workspace_buffer.reshape(-1).view(torch.uint8)
    return flat[(flat.numel() // 2) & ~255 :]  # 256-byte aligned when the buffer is


def storage_rows(cache: torch.Tensor, name: str, kv_layout: str) -> torch.Tensor:
    """A trtllm-gen pool as storage offsets count its rows (sparse_indices_are_storage_offsets=True): row r
    sits r row strides past the pool's first row, whatever the page stride. A [rows, 512] view of the same
    memory (one row a page, for the library) up to the pool's last row: no copy, and an offset past it is
    past the pool. A pool the library would refuse is returned as it is, for the library to name."""
    slot_dim = 2 if cache.dim() == 4 and kv_layout == "HND" else 1
    if cache.dim() not in (3, 4) or cache.stride(-1) != 1 or (cache.dim() == 4 and cache.shape[3 - slot_dim] != 1):
        return cache
    pages, page_size = int(cache.shape[0]), int(cache.shape[slot_dim])
    page_stride, row_stride = int(cache.stride(0)), int(cache.stride(slot_dim))
    if pages < 1 or page_size < 1 or page_stride < 0:
        return cache
    if row_stride < cache.shape[-1]:
        raise ValueError(f"{name} (row stride): expected >= {cache.shape[-1]} elements with "
                         f"sparse_indices_are_storage_offsets=True (an offset counts rows of this stride), "
                         f"got {row_stride}")
    last = (pages - 1) * page_stride + (page_size - 1) * row_stride
    return cache.as_strided((last // row_stride + 1, cache.shape[-1]), (row_stride, 1))
