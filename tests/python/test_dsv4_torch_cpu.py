"""torch CPU tensors: low-level call, the custom op, opcheck and torch.compile."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sparse_decode  # noqa: E402
from dsv4_reference import assert_matches_exactly_rounded, make_problem, reference  # noqa: E402
from helpers import bits, run_numpy, torch_kwargs, torch_outputs  # noqa: E402


def op_args(kwargs, out, lse=None, count=None):
    """Positional arguments of torch.ops.sparse_decode.dsv4_decode from low-level keyword arguments."""
    return (
        kwargs["q"],
        kwargs["swa_kv"],
        kwargs["compressed_kv"],
        kwargs["indices"],
        out,
        lse,
        count,
        None,
        kwargs["lens"],
        kwargs["seq_lens"],
        kwargs["cum_seq_lens_q"],
        kwargs["q_len"],
        kwargs["max_q_len"],
        kwargs["sinks"],
        kwargs["bmm1_scale"],
        kwargs["bmm2_scale"],
        None,
        None,
        False,
        kwargs["page_layout"],
    )


@pytest.mark.parametrize("dtype", ["fp8", "bf16"])
@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_torch_tensors_match_reference_and_numpy(rng, seed, dtype, layout):
    p = make_problem(rng, dtype=dtype, layout=layout, seq_lens="varlen", tokens=5)
    kwargs = torch_kwargs(p)
    assert kwargs["q"].dtype == (torch.float8_e4m3fn if dtype == "fp8" else torch.bfloat16)
    out, lse, count = torch_outputs(p)
    sparse_decode.dsv4_decode(**kwargs, out=out, lse=lse, out_of_range_count=count)
    ref_out, ref_lse, ref_count = reference(p)
    assert_matches_exactly_rounded(bits(out), ref_out, seed)
    numpy_out, numpy_lse, _ = run_numpy(p)
    assert np.array_equal(bits(out), numpy_out), f"seed={seed}: torch and NumPy calls differ"
    assert np.array_equal(lse.numpy(), numpy_lse, equal_nan=True)
    assert int(count) - 7 == ref_count


def test_custom_op_gives_the_same_bits(rng, seed):
    p = make_problem(rng, seq_lens="uniform", q_len=2, tokens=6, q4d=True)
    kwargs = torch_kwargs(p)
    out, lse, count = torch_outputs(p)
    result = torch.ops.sparse_decode.dsv4_decode(*op_args(kwargs, out, lse, count))
    assert result is None  # a mutating op: out is written in place
    assert np.array_equal(bits(out), run_numpy(p)[0]), f"seed={seed}"


def test_custom_op_scale_tensors_win_over_floats(rng, seed):
    p = make_problem(rng)
    kwargs = torch_kwargs(p)
    out, _, _ = torch_outputs(p)
    args = list(op_args(kwargs, out))
    args[14], args[15] = 123.0, 456.0  # ignored: the tensors below are given
    args[16] = torch.tensor([p.bmm1_scale], dtype=torch.float32)
    args[17] = torch.tensor([p.bmm2_scale], dtype=torch.float32)
    torch.ops.sparse_decode.dsv4_decode(*args)
    assert np.array_equal(bits(out), run_numpy(p)[0]), f"seed={seed}"


def test_opcheck(rng):
    p = make_problem(rng, tokens=2, width=128, heads=8, dtype="bf16")  # opcheck compares with float math
    kwargs = torch_kwargs(p)
    out, lse, count = torch_outputs(p)
    # Schema, fake (meta) implementation, functionalization and aot dispatch.
    torch.library.opcheck(torch.ops.sparse_decode.dsv4_decode.default, op_args(kwargs, out, lse, count))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(rng, seed, backend):
    p = make_problem(rng, tokens=4)
    kwargs = torch_kwargs(p)
    scale = torch.tensor([p.bmm1_scale], dtype=torch.float32)

    def layer(q, out, lse):
        torch.ops.sparse_decode.dsv4_decode(
            q,
            kwargs["swa_kv"],
            kwargs["compressed_kv"],
            kwargs["indices"],
            out,
            lse,
            None,
            None,
            kwargs["lens"],
            sinks=kwargs["sinks"],
            bmm1_scale_tensor=scale,
            bmm2_scale=p.bmm2_scale,
        )
        return out.float() * 2, lse + 1

    torch._dynamo.reset()
    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    eager_out, eager_lse, _ = torch_outputs(p)
    compiled_out, compiled_lse, _ = torch_outputs(p)
    expected = layer(kwargs["q"], eager_out, eager_lse)
    got = compiled(kwargs["q"], compiled_out, compiled_lse)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), f"seed={seed}"
    assert np.array_equal(bits(compiled_out), bits(eager_out)), f"seed={seed}: out is written in place"


def test_tensors_that_require_grad(rng, seed):
    p = make_problem(rng, dtype="bf16")
    kwargs = torch_kwargs(p)
    kwargs["q"] = kwargs["q"].float().requires_grad_().to(torch.bfloat16)
    out, _, _ = torch_outputs(p)
    sparse_decode.dsv4_decode(**kwargs, out=out)
    assert np.array_equal(bits(out), run_numpy(p)[0]), f"seed={seed}"


def test_integer_views_of_torch_tensors(rng, seed):
    p = make_problem(rng)
    kwargs = torch_kwargs(p)
    for name in ("q", "swa_kv", "compressed_kv"):
        kwargs[name] = kwargs[name].view(torch.uint8)
    out, _, _ = torch_outputs(p)
    sparse_decode.dsv4_decode(**kwargs, out=out.view(torch.int16))
    assert np.array_equal(bits(out), run_numpy(p)[0]), f"seed={seed}"


def test_other_torch_fp8_formats_are_refused(rng):
    p = make_problem(rng)
    kwargs = torch_kwargs(p)
    kwargs["q"] = kwargs["q"].view(torch.float8_e5m2)
    out, _, _ = torch_outputs(p)
    with pytest.raises(ValueError, match=r"^q: expected FP8 E4M3 \(float8_e4m3fn\), got float8_e5m2$"):
        sparse_decode.dsv4_decode(**kwargs, out=out)


@pytest.mark.parametrize("sink_term", ["in_output_and_lse", "none"])
def test_custom_op_takes_the_sink_term(rng, seed, sink_term):
    p = make_problem(rng, tokens=5, dtype="bf16")  # opcheck compares with float math
    kwargs = torch_kwargs(p)
    out, lse, count = torch_outputs(p)
    args = op_args(kwargs, out, lse, count) + (sink_term,)
    torch.ops.sparse_decode.dsv4_decode(*args)
    ref_out, ref_lse, _ = reference(p, sink_term=sink_term)
    assert_matches_exactly_rounded(bits(out), ref_out, seed)
    got = lse.numpy()
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isinf(got), np.isinf(ref_lse)), f"seed={seed}: lse inf pattern"
    np.testing.assert_allclose(got[finite], ref_lse[finite], rtol=1e-6, atol=1e-6, err_msg=f"seed={seed}")
    torch.library.opcheck(torch.ops.sparse_decode.dsv4_decode.default, args)
