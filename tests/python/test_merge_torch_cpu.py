"""merge_states on torch CPU tensors: the low-level call, the custom op (lists and stacked),
torch.compile over the op; the same bits as the NumPy call."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sparse_decode  # noqa: E402
from test_merge_numpy import check, make_case, run  # noqa: E402


def to_torch(partials, lse, device="cpu"):
    if partials.dtype == np.uint16:
        tensor = torch.from_numpy(partials.view(np.int16)).view(torch.bfloat16)
    else:
        tensor = torch.from_numpy(partials)
    return tensor.to(device), torch.from_numpy(lse).to(device)


def poisoned(tokens, heads, dim, dtype=torch.bfloat16, device="cpu"):
    return (torch.full((tokens, heads, dim), float("nan"), dtype=dtype, device=device),
            torch.full((tokens, heads), float("nan"), dtype=torch.float32, device=device))


def raw(tensor):
    """The output's bytes as NumPy (BF16 as uint16 bits)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).cpu().numpy().view(np.uint16)
    return tensor.cpu().numpy()


@pytest.mark.parametrize("in_dtype", ["bf16", "float32"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_torch_tensors_match_numpy(rng, seed, in_dtype, out_dtype):
    partials, lse = make_case(rng, dtype=in_dtype)
    t_partials, t_lse = to_torch(partials, lse)
    out, out_lse = poisoned(5, 4, 64, out_dtype)
    sparse_decode.merge_states(list(t_partials), list(t_lse), out, out_lse=out_lse)
    numpy_out, numpy_lse = run(partials, lse, "bf16" if out_dtype == torch.bfloat16 else "float32")
    assert np.array_equal(raw(out), numpy_out, equal_nan=False), f"seed={seed}"
    assert np.array_equal(out_lse.numpy(), numpy_lse), f"seed={seed}"
    check(partials, lse, raw(out), out_lse.numpy(), seed)


def test_custom_op_lists_and_stacked(rng, seed):
    partials, lse = make_case(rng)
    t_partials, t_lse = to_torch(partials, lse)
    expected_out, expected_lse = run(partials, lse)
    out, out_lse = poisoned(5, 4, 64)
    assert torch.ops.sparse_decode.merge_states(list(t_partials), list(t_lse), out, out_lse) is None
    assert np.array_equal(raw(out), expected_out), f"seed={seed}"
    out, out_lse = poisoned(5, 4, 64)
    torch.ops.sparse_decode.merge_states([t_partials], [t_lse], out, out_lse, True)
    assert np.array_equal(raw(out), expected_out), f"seed={seed}"
    assert np.array_equal(out_lse.numpy(), expected_lse), f"seed={seed}"


def test_torch_compile_calls_the_op(rng, seed):
    partials, lse = make_case(rng)
    t_partials, t_lse = to_torch(partials, lse)
    expected_out, _ = run(partials, lse)

    def step(stacked_partials, stacked_lse, out):
        torch.ops.sparse_decode.merge_states([stacked_partials], [stacked_lse], out, None, True)
        return out * 2

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    out, _ = poisoned(5, 4, 64)
    doubled = compiled(t_partials, t_lse, out)
    assert np.array_equal(raw(out), expected_out), f"seed={seed}"
    assert torch.equal(doubled, out * 2)
