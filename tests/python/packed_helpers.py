"""Calls of the packed operation on a PackedProblem, and the checks against its reference."""

from __future__ import annotations

import numpy as np

import sparse_decode
from dsv4_reference import assert_matches_exactly_rounded
from helpers import to_torch
from packed_reference import PackedProblem, reference


def run_numpy(p: PackedProblem, **overrides):
    """(out bits, lse, out-of-range count) of a NumPy call with poisoned outputs."""
    kwargs = p.kwargs()
    kwargs.update(overrides)
    out = kwargs.pop("out", None)
    out = p.out_like() if out is None else out
    lse = kwargs.pop("lse", None)
    lse = p.lse_like() if lse is None else lse
    count = np.array([7], dtype=np.int32)  # the call adds to it
    sparse_decode.dsv4_decode_packed(**kwargs, out=out, lse=lse, out_of_range_count=count)
    return out, lse, int(count[0]) - 7


def torch_kwargs(p: PackedProblem, device="cpu") -> dict:
    """PackedProblem.kwargs() as torch tensors (q BF16, caches uint8), padding and page strides kept."""
    kwargs = p.kwargs()
    for name, value in kwargs.items():
        if isinstance(value, np.ndarray):
            kwargs[name] = to_torch(value, device, "bf16" if name == "q" else None)
    return kwargs


def torch_outputs(p: PackedProblem, device="cpu"):
    """Poisoned out (bfloat16 [T, H, 512]), lse (float32 [T, H]) and a counter at 7."""
    import torch

    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16, device=device)
    lse = torch.full(p.q.shape[:2], float("nan"), dtype=torch.float32, device=device)
    return out, lse, torch.full((1,), 7, dtype=torch.int32, device=device)


def check_lse(lse: np.ndarray, ref_lse: np.ndarray, seed, rtol=1e-6, atol=1e-6) -> None:
    lse = np.asarray(lse).reshape(ref_lse.shape)
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)), f"seed={seed}: lse = -inf exactly where no column"
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=rtol, atol=atol, err_msg=f"seed={seed}")


def check(p: PackedProblem, seed, **overrides) -> np.ndarray:
    """A NumPy call against the reference: out within half a BF16 ulp, lse, the counter."""
    out, lse, count = run_numpy(p, **overrides)
    ref_out, ref_lse, ref_count = reference(p)
    assert_matches_exactly_rounded(out, ref_out.reshape(out.shape), seed)
    check_lse(lse, ref_lse, seed)
    assert count == ref_count, f"seed={seed}: out-of-range count {count}, expected {ref_count}"
    return out
