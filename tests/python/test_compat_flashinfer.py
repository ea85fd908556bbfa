"""The FlashInfer drop-in: its exact signature, argument checks and semantics (CPU tensors)."""

import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4  # noqa: E402
from dsv4_reference import assert_matches_exactly_rounded, make_problem, reference  # noqa: E402
from helpers import bits, run_numpy, to_torch, torch_kwargs  # noqa: E402

# flashinfer.mla.trtllm_batch_decode_sparse_mla_dsv4 as documented (seed 001): name, default.
FLASHINFER_PARAMETERS = [
    ("query", inspect.Parameter.empty),
    ("swa_kv_cache", inspect.Parameter.empty),
    ("workspace_buffer", inspect.Parameter.empty),
    ("sparse_indices", None),
    ("compressed_kv_cache", None),
    ("sparse_topk_lens", None),
    ("seq_lens", None),
    ("out", None),
    ("bmm1_scale", 1.0),
    ("bmm2_scale", 1.0),
    ("sinks", None),
    ("kv_layout", "HND"),
    ("cum_seq_lens_q", None),
    ("max_q_len", None),
    ("enable_pdl", None),
    ("swa_topk_lens", None),
    ("extra_sparse_indices", None),
    ("extra_sparse_topk_lens", None),
    ("backend", "auto"),
    ("hca_swa_indices", None),
    ("hca_compressed_block_tables", None),
    ("hca_seq_lens", None),
    ("hca_is_causal", True),
    ("hca_use_persistent", False),
    ("hca_sparse_indices_format", None),
    ("remapped_sparse_indices_buffer", None),  # FlashInfer's strided-pool arguments (after the documented ones)
    ("sparse_indices_are_storage_offsets", None),
]


def test_signature_is_flashinfers():
    parameters = inspect.signature(trtllm_batch_decode_sparse_mla_dsv4).parameters.values()
    assert [(p.name, p.default) for p in parameters] == FLASHINFER_PARAMETERS
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)


def flashinfer_args(p, device="cpu"):
    """FlashInfer-style arguments for a Problem whose pools are 4-D (NHD or HND)."""
    k = torch_kwargs(p, device)
    args = dict(
        query=k["q"],
        swa_kv_cache=k["swa_kv"],
        compressed_kv_cache=k["compressed_kv"],
        workspace_buffer=torch.zeros(1024, dtype=torch.uint8, device=device),
        sparse_indices=k["indices"],
        sparse_topk_lens=k["lens"],
        seq_lens=k["seq_lens"],
        bmm1_scale=p.bmm1_scale,
        bmm2_scale=p.bmm2_scale,
        sinks=k["sinks"],
        kv_layout=p.layout,
    )
    if p.cum_seq_lens_q is not None:
        args.update(cum_seq_lens_q=k["cum_seq_lens_q"], max_q_len=p.max_q_len)
    return args


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("dtype", ["fp8", "bf16"])
def test_four_dim_query(rng, seed, layout, dtype):
    p = make_problem(rng, layout=layout, dtype=dtype, tokens=6, seq_lens="uniform", q_len=2, q4d=True)
    p.q_len = None  # FlashInfer reads it off query.shape[1]
    out = trtllm_batch_decode_sparse_mla_dsv4(**flashinfer_args(p))
    assert out.shape == (3, 2, 16, 512) and out.dtype == torch.bfloat16
    assert_matches_exactly_rounded(bits(out), reference(p)[0].reshape(out.shape), seed)


def test_varlen_query_with_tensor_scales(rng, seed):
    p = make_problem(rng, layout="HND", tokens=7, seq_lens="varlen")
    args = flashinfer_args(p)
    args["bmm1_scale"] = torch.tensor([p.bmm1_scale], dtype=torch.float32)
    args["bmm2_scale"] = torch.tensor([p.bmm2_scale], dtype=torch.float32)
    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16)
    returned = trtllm_batch_decode_sparse_mla_dsv4(**args, out=out)
    assert returned is out, "the given out is returned, not a new tensor"
    assert_matches_exactly_rounded(bits(out), reference(p)[0], seed)


def test_same_bits_as_the_low_level_call(rng, seed):
    p = make_problem(rng, layout="NHD", tokens=5, seq_lens="varlen")
    out = trtllm_batch_decode_sparse_mla_dsv4(**flashinfer_args(p))
    assert np.array_equal(bits(out), run_numpy(p)[0]), f"seed={seed}"


def test_without_seq_lens_and_compressed_pool(rng, seed):
    # Accepted here (FlashInfer requires both): no window check, W == 128.
    p = make_problem(rng, layout="HND", width=128)
    args = flashinfer_args(p)
    assert args["compressed_kv_cache"] is None and args["seq_lens"] is None
    out = trtllm_batch_decode_sparse_mla_dsv4(**args)
    assert_matches_exactly_rounded(bits(out), reference(p)[0], seed)


PACKED_ONLY = "an argument of the packed-row \\(SM120 'sparse'\\) set"
HCA_ONLY = "backend='trtllm-gen' does not accept {name} \\(an argument of the HCA set"


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("swa_topk_lens", "tensor", PACKED_ONLY),
        ("extra_sparse_indices", "tensor", PACKED_ONLY),
        ("extra_sparse_topk_lens", "tensor", PACKED_ONLY),
        ("hca_swa_indices", "tensor", HCA_ONLY),
        ("hca_compressed_block_tables", "tensor", HCA_ONLY),
        ("hca_seq_lens", "tensor", HCA_ONLY),
        ("hca_is_causal", False, HCA_ONLY),
        ("hca_use_persistent", True, HCA_ONLY),
        ("hca_sparse_indices_format", "compressed-page-aligned", HCA_ONLY),
    ],
)
def test_other_argument_sets_arguments_are_refused_as_flashinfer_refuses_them(rng, name, value, message):
    # FlashInfer raises ValueError for an argument the resolved backend does not accept.
    p = make_problem(rng, layout="HND")
    value = torch.zeros(p.tokens, dtype=torch.int32) if value == "tensor" else value
    with pytest.raises(ValueError, match=f"^{name}: {message.format(name=name)}"):
        trtllm_batch_decode_sparse_mla_dsv4(**flashinfer_args(p), backend="trtllm-gen", **{name: value})


def test_unknown_backend_is_a_value_error(rng):
    p = make_problem(rng, layout="HND")
    with pytest.raises(ValueError, match=r"^backend: expected one of 'auto', 'trtllm-gen', 'cute-dsl', 'sparse', "
                                         r"got 'fa3'$"):
        trtllm_batch_decode_sparse_mla_dsv4(**flashinfer_args(p), backend="fa3")


def test_trtllm_gen_backend_is_served(rng, seed):
    p = make_problem(rng, layout="HND")
    out = trtllm_batch_decode_sparse_mla_dsv4(**flashinfer_args(p), backend="trtllm-gen", enable_pdl=False)
    assert_matches_exactly_rounded(bits(out), reference(p)[0], seed)


@pytest.mark.parametrize(
    "change, exception, message",
    [
        (dict(sparse_indices=None), ValueError, r"^sparse_indices: required by the trtllm-gen argument set"),
        (dict(kv_layout="HDN"), ValueError, r"^kv_layout: expected 'HND' or 'NHD', got 'HDN'$"),
        (
            dict(cum_seq_lens_q=torch.tensor([0, 6], dtype=torch.int32)),
            ValueError,
            r"^max_q_len: required with cum_seq_lens_q$",
        ),
        (
            dict(bmm1_scale=torch.tensor([0.1], dtype=torch.float64)),
            TypeError,  # as FlashInfer: a tensor scale must be float32
            r"^bmm1_scale: expected a float or a float32 tensor, got a torch\.float64 tensor$",
        ),
        (dict(bmm2_scale=torch.ones(2)), ValueError, r"^bmm2_scale: expected a float32 tensor of one element"),
        (
            dict(query="2-D"),
            ValueError,
            r"^query: expected \[B, q_len, H, 512\] or \[sum_q, H, 512\], got \[6, 8192\]$",
        ),
        (dict(sinks=torch.zeros(3)), ValueError, r"^sinks: expected 16 elements"),
    ],
)
def test_argument_validation(rng, change, exception, message):
    p = make_problem(rng, layout="NHD")
    args = flashinfer_args(p)
    if change.get("query") == "2-D":
        change = dict(query=args["query"].reshape(p.tokens, -1))
    args.update(change)
    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16)
    with pytest.raises(exception, match=message):
        trtllm_batch_decode_sparse_mla_dsv4(**args, out=out if out.shape == args["query"].shape else None)
    assert torch.isnan(out.float()).all(), "nothing is written when a call is refused"


def test_library_errors_carry_the_library_message(rng):
    p = make_problem(rng, layout="NHD")
    args = flashinfer_args(p)
    args["sparse_indices"] = to_torch(np.ascontiguousarray(p.indices[:, :130]))
    with pytest.raises(ValueError, match=r"^sparse_indices \(width\): expected a multiple of 4 in \[128, 16512\], "
                                         r"got 130$"):
        trtllm_batch_decode_sparse_mla_dsv4(**args)


def test_split_scratch_is_the_aligned_upper_half_of_the_workspace_buffer():
    from sparse_decode._flashinfer_common import split_scratch as _split_scratch

    buffer = torch.zeros(1000, dtype=torch.int32)  # 4000 bytes
    scratch = _split_scratch(buffer)
    assert scratch.dtype == torch.uint8 and scratch.numel() == 4000 - 1792  # from byte (2000 & ~255)
    assert scratch.data_ptr() == buffer.data_ptr() + 1792
    assert _split_scratch(None) is None
    strided = torch.zeros(64, dtype=torch.uint8)[::2]
    assert _split_scratch(strided) is strided  # the library names what is wrong with it
