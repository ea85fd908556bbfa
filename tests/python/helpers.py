"""Turning a reference Problem into the arguments of a call, in NumPy or torch."""

from __future__ import annotations

import numpy as np
import pytest

import sparse_decode
from dsv4_reference import Problem


def numpy_kwargs(p: Problem) -> dict:
    """Keyword arguments of sparse_decode.dsv4_decode, as NumPy arrays (integer views for FP8/BF16)."""
    return dict(
        q=p.q,
        swa_kv=p.swa_kv,
        compressed_kv=p.compressed_kv,
        indices=p.indices,
        lens=p.lens,
        seq_lens=p.seq_lens,
        cum_seq_lens_q=p.cum_seq_lens_q,
        q_len=p.q_len,
        max_q_len=p.max_q_len,
        sinks=p.sinks,
        bmm1_scale=p.bmm1_scale,
        bmm2_scale=p.bmm2_scale,
        page_layout=p.page_layout(),
    )


def run_numpy(p: Problem, **overrides):
    """(out bits, lse, out-of-range count) from a NumPy call with poisoned outputs."""
    kwargs = numpy_kwargs(p)
    kwargs.update(overrides)
    out = kwargs.pop("out", None)
    out = p.out_like() if out is None else out
    lse = p.lse_like()
    count = np.array([7], dtype=np.int32)  # the call adds to it
    sparse_decode.dsv4_decode(**kwargs, out=out, lse=lse, out_of_range_count=count)
    return out, lse, int(count[0]) - 7


def to_torch(array, device="cpu", element=None):
    """A torch tensor with the same strides (and padding) as `array`, on `device`.

    element: "fp8" or "bf16" reinterprets the integer bits as float8_e4m3fn / bfloat16.
    """
    import torch

    if array is None:
        return None
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    offset = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    flat = torch.from_numpy(np.ascontiguousarray(root).reshape(-1))
    if element == "fp8":
        flat = flat.view(torch.float8_e4m3fn)
    elif element == "bf16":
        flat = flat.view(torch.bfloat16)
    flat = flat.to(device)
    itemsize = array.itemsize
    return flat.as_strided(array.shape, [s // itemsize for s in array.strides], offset // itemsize)


def torch_kwargs(p: Problem, device="cpu") -> dict:
    """numpy_kwargs with torch tensors: FP8 as torch.float8_e4m3fn, BF16 as torch.bfloat16."""
    kwargs = numpy_kwargs(p)
    for name in ("q", "swa_kv", "compressed_kv"):
        kwargs[name] = to_torch(kwargs[name], device, p.dtype)
    for name in ("indices", "lens", "seq_lens", "cum_seq_lens_q", "sinks"):
        kwargs[name] = to_torch(kwargs[name], device)
    return kwargs


def torch_outputs(p: Problem, device="cpu"):
    """Poisoned out (bfloat16), lse (float32) and a counter starting at 7."""
    import torch

    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16, device=device)
    lse = torch.full(p.q.shape[:-1], float("nan"), dtype=torch.float32, device=device)
    count = torch.full((1,), 7, dtype=torch.int32, device=device)
    return out, lse, count


def bits(tensor) -> np.ndarray:
    """BF16 tensor -> uint16 NumPy bits (from any device)."""
    import torch

    return tensor.detach().view(torch.int16).cpu().numpy().view(np.uint16)


def gpu_marks(torch):
    """pytestmark of a GPU test module: marked gpu, skipped without a CUDA device."""
    return [
        pytest.mark.gpu,
        pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (GPU tests run on the H200)"),
    ]


def served(call):
    """Runs call(); a NotImplementedError from the library skips the test with its message."""
    try:
        return call()
    except NotImplementedError as error:
        pytest.skip(f"not served on this GPU by this build: {error}")
