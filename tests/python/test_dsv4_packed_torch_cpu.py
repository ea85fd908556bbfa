"""dsv4_decode_packed on torch CPU tensors: the low-level call, the custom op, opcheck, torch.compile."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sparse_decode  # noqa: E402
from dsv4_reference import assert_matches_exactly_rounded  # noqa: E402
from helpers import bits  # noqa: E402
from packed_helpers import check_lse, run_numpy, torch_kwargs, torch_outputs  # noqa: E402
from packed_reference import make_packed_problem, reference  # noqa: E402


def op_args(k, out, lse=None, count=None, workspace=None):
    """Positional arguments of torch.ops.sparse_decode.dsv4_decode_packed from low-level keyword arguments."""
    return (
        k["q"],
        k["swa_cache"],
        k["swa_indices"],
        out,
        lse,
        count,
        workspace,
        k["softmax_scale"],
        k["swa_lens"],
        k["extra_cache"],
        k["extra_indices"],
        k["extra_lens"],
        k["sinks"],
        False,
    )


@pytest.mark.parametrize("page_size, four_d", [(64, True), (61, False), (1, True)])
def test_torch_tensors_match_reference_and_numpy(rng, seed, page_size, four_d):
    p = make_packed_problem(rng, page_size=page_size, four_d=four_d)
    k = torch_kwargs(p)
    assert k["q"].dtype == torch.bfloat16 and k["swa_cache"].dtype == torch.uint8
    assert k["swa_cache"].stride(0) == p.swa.pool.array().strides[0], "the page stride travels with the tensor"
    out, lse, count = torch_outputs(p)
    sparse_decode.dsv4_decode_packed(**k, out=out, lse=lse, out_of_range_count=count)
    ref_out, ref_lse, ref_count = reference(p)
    assert_matches_exactly_rounded(bits(out), ref_out, seed)
    check_lse(lse.numpy(), ref_lse, seed)
    assert int(count) - 7 == ref_count
    numpy_out, numpy_lse, _ = run_numpy(p)
    assert np.array_equal(bits(out), numpy_out) and np.array_equal(lse.numpy(), numpy_lse), f"seed={seed}"


@pytest.mark.parametrize("cache_dtype", [torch.int8, torch.float8_e4m3fn])
def test_other_one_byte_cache_dtypes(rng, seed, cache_dtype):
    # FlashMLA accepts uint8, int8 and float8_e4m3fn views of its caches.
    p = make_packed_problem(rng)
    k = torch_kwargs(p)
    k["swa_cache"], k["extra_cache"] = k["swa_cache"].view(cache_dtype), k["extra_cache"].view(cache_dtype)
    out, _, _ = torch_outputs(p)
    sparse_decode.dsv4_decode_packed(**k, out=out)
    assert np.array_equal(bits(out), run_numpy(p)[0]), f"seed={seed}"


def test_custom_op_gives_the_same_bits(rng, seed):
    p = make_packed_problem(rng, tokens=6, q_len=2)
    k = torch_kwargs(p)
    out, lse, count = torch_outputs(p)
    assert torch.ops.sparse_decode.dsv4_decode_packed(*op_args(k, out, lse, count)) is None  # mutates out
    numpy_out, numpy_lse, numpy_count = run_numpy(p)
    assert np.array_equal(bits(out), numpy_out) and np.array_equal(lse.numpy(), numpy_lse), f"seed={seed}"
    assert int(count) - 7 == numpy_count


def test_opcheck(rng):
    p = make_packed_problem(rng, tokens=2, heads=8, swa_width=16, extra_width=8, page_size=4)
    k = torch_kwargs(p)
    out, lse, count = torch_outputs(p)
    workspace = torch.zeros(16, dtype=torch.uint8)
    # Schema, fake (meta) implementation, functionalization and aot dispatch.
    torch.library.opcheck(torch.ops.sparse_decode.dsv4_decode_packed.default, op_args(k, out, lse, count, workspace))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(rng, seed, backend):
    p = make_packed_problem(rng, tokens=4)
    k = torch_kwargs(p)

    def layer(q, out, lse):
        torch.ops.sparse_decode.dsv4_decode_packed(
            q * 1.0,  # some work around the op, as in a model
            k["swa_cache"],
            k["swa_indices"],
            out,
            lse,
            None,
            None,
            k["softmax_scale"],
            k["swa_lens"],
            k["extra_cache"],
            k["extra_indices"],
            k["extra_lens"],
            sinks=k["sinks"],
        )
        return out.float() * 2, lse + 1

    torch._dynamo.reset()
    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    eager_out, eager_lse, _ = torch_outputs(p)
    compiled_out, compiled_lse, _ = torch_outputs(p)
    expected = layer(k["q"], eager_out, eager_lse)
    got = compiled(k["q"], compiled_out, compiled_lse)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), f"seed={seed}"
    assert np.array_equal(bits(compiled_out), bits(eager_out)), f"seed={seed}: out is written in place"


def test_custom_op_takes_the_window_views_and_the_sink_term(rng, seed):
    # seq_lens (section 1's window on the SWA segment), a [B, q_len] lens view with token stride 0 and
    # sink_term through the op, opcheck'd, against the reference.
    B, q_len = 2, 3
    p = make_packed_problem(rng, tokens=B * q_len, q_len=q_len)
    seq_lens = rng.integers(q_len, q_len + 50, B).astype(np.int32)
    positions = np.repeat(seq_lens, q_len) - q_len + np.tile(np.arange(q_len), B)
    k = torch_kwargs(p)
    k["swa_lens"] = k["swa_lens"].reshape(B, q_len)[:, 0].clone()[:, None].expand(B, q_len)  # one a request
    out, lse, count = torch_outputs(p)
    args = op_args(k, out, lse, count) + (torch.from_numpy(seq_lens), None, q_len, None, "in_output_and_lse")
    torch.ops.sparse_decode.dsv4_decode_packed(*args)
    ref_out, ref_lse, _ = reference(p, positions=positions, sink_term="in_output_and_lse")
    assert_matches_exactly_rounded(bits(out), ref_out, seed)
    check_lse(lse.numpy(), ref_lse, seed)
    torch.library.opcheck(torch.ops.sparse_decode.dsv4_decode_packed.default, args)
