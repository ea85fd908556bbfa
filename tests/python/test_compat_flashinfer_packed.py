"""The FlashInfer drop-in with its SM120 packed argument set (seed 001), on CPU tensors."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4  # noqa: E402
from dsv4_reference import assert_matches_exactly_rounded  # noqa: E402
from dsv4_reference import make_problem as make_plain_problem  # noqa: E402
from helpers import bits  # noqa: E402
from helpers import torch_kwargs as plain_torch_kwargs  # noqa: E402
from packed_helpers import run_numpy, torch_kwargs  # noqa: E402
from packed_reference import make_packed_problem, reference  # noqa: E402


def sm120_args(p, layout="3-D", device="cpu"):
    """The SM120 set as vLLM passes it: caches, SWA and extra segments, bmm1_scale = softmax scale."""
    k = torch_kwargs(p, device)
    caches = {"swa_kv_cache": k["swa_cache"], "compressed_kv_cache": k["extra_cache"]}
    for name, cache in caches.items():
        if cache is not None and layout != "3-D":  # one KV head: NHD [pages, page, 1, 584], HND [pages, 1, page, 584]
            caches[name] = cache.unsqueeze(2 if layout == "NHD" else 1)
    return dict(
        query=k["q"],
        workspace_buffer=torch.zeros(1024, dtype=torch.uint8, device=device),
        sparse_indices=k["swa_indices"],
        swa_topk_lens=k["swa_lens"],
        extra_sparse_indices=k["extra_indices"],
        extra_sparse_topk_lens=k["extra_lens"],
        bmm1_scale=p.softmax_scale,
        sinks=k["sinks"],
        kv_layout="HND" if layout == "HND" else "NHD",
        **caches,
    )


@pytest.mark.parametrize("layout", ["3-D", "NHD", "HND"])
@pytest.mark.parametrize("backend", ["auto", "sparse"])
def test_matches_reference(rng, seed, layout, backend):
    p = make_packed_problem(rng, page_size=61 if layout == "HND" else 64)
    out = trtllm_batch_decode_sparse_mla_dsv4(**sm120_args(p, layout), backend=backend)
    assert out.shape == p.q.shape and out.dtype == torch.bfloat16
    assert_matches_exactly_rounded(bits(out), reference(p)[0], seed)


def test_vllm_shapes_and_same_bits_as_the_low_level_call(rng, seed):
    # vLLM passes query [T, 1, H, 512] and out [T, H, 512]; the given out is returned.
    p = make_packed_problem(rng, tokens=6)
    args = sm120_args(p, "NHD")
    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16)
    returned = trtllm_batch_decode_sparse_mla_dsv4(**{**args, "query": args["query"].unsqueeze(1)}, out=out)
    assert returned is out
    assert np.array_equal(bits(out), run_numpy(p)[0]), f"seed={seed}"


def test_swa_segment_only(rng, seed):
    # Without extra indices and lengths the compressed cache is unused, as in FlashInfer.
    p = make_packed_problem(rng, extra_width=None, swa_lens=False)
    args = sm120_args(p)
    args["compressed_kv_cache"] = torch.zeros(3, 64, 584, dtype=torch.uint8)
    out = trtllm_batch_decode_sparse_mla_dsv4(**args)
    assert_matches_exactly_rounded(bits(out), reference(p)[0], seed)


def test_varlen_query_arguments_are_accepted(rng, seed):
    p = make_packed_problem(rng, tokens=5)
    cum = torch.tensor([0, 2, 5], dtype=torch.int32)
    out = trtllm_batch_decode_sparse_mla_dsv4(**sm120_args(p), cum_seq_lens_q=cum, max_q_len=3)
    assert_matches_exactly_rounded(bits(out), reference(p)[0], seed)


def positions_of(seq_lens, cum):
    """Each token's position in its request, seq_lens[b] - q_len_b + i (docs/spec.md, section 1)."""
    positions = np.full(int(cum[-1]), -(10**9), np.int64)
    for b in range(len(seq_lens)):
        n = int(cum[b + 1] - cum[b])
        positions[cum[b]:cum[b + 1]] = int(seq_lens[b]) - n + np.arange(n)
    return positions


@pytest.mark.parametrize("mapping", ["uniform 3-D", "uniform 4-D", "varlen"])
def test_seq_lens_and_sparse_topk_lens_are_accepted(rng, seed, mapping):
    # FlashInfer's SM120 set takes seq_lens and sparse_topk_lens: seq_lens is section 1's window on the SWA
    # segment, sparse_topk_lens is not read (zeros here would empty every token if it were).
    p = make_packed_problem(rng, tokens=6, q_len=1 if mapping == "varlen" else 2)
    cum = np.array([0, 1, 4, 6]) if mapping == "varlen" else np.arange(0, 7, 2)
    seq_lens = rng.integers(np.diff(cum), np.diff(cum) + 40).astype(np.int32)  # windows shorter than swa_topk_lens
    seq_lens[-1] += 200  # and one past 128
    args = sm120_args(p)
    args.update(seq_lens=torch.from_numpy(seq_lens), sparse_topk_lens=torch.zeros(6, dtype=torch.int32))
    if mapping == "varlen":
        args.update(cum_seq_lens_q=torch.from_numpy(cum.astype(np.int32)), max_q_len=3)
    if mapping == "uniform 4-D":
        args["query"] = args["query"].reshape(3, 2, *args["query"].shape[1:])
    out = trtllm_batch_decode_sparse_mla_dsv4(**args).reshape(p.q.shape)
    expected = reference(p, positions=positions_of(seq_lens, cum))[0]
    assert_matches_exactly_rounded(bits(out), expected, seed)
    assert not np.array_equal(expected, reference(p)[0]), f"seed={seed}: the window changes nothing here"


@pytest.mark.parametrize(
    "change, exception, message",
    [
        # Refused by FlashInfer's SM120 path too: the same type.
        (dict(bmm2_scale=2.0), ValueError,
         r"^bmm2_scale: expected 1\.0 with packed caches \(docs/spec\.md, section 2\), got 2\.0$"),
        (dict(bmm1_scale=torch.tensor([0.1])), ValueError, r"^bmm1_scale: the packed-row .* takes a Python float"),
        (dict(bmm2_scale=torch.tensor([1.0])), ValueError, r"^bmm2_scale: the packed-row .* takes a Python float"),
        (dict(hca_seq_lens=torch.ones(5, dtype=torch.int32)), ValueError,
         r"^hca_seq_lens: backend='sparse' does not accept hca_seq_lens \("),
        (dict(backend="fa3"), ValueError, r"^backend: expected one of 'auto', 'trtllm-gen', 'cute-dsl', 'sparse'"),
        (dict(seq_lens=torch.ones(4, dtype=torch.int32)), ValueError,
         r"^seq_lens: expected B elements with B dividing"),
    ],
)
def test_refusals(rng, change, exception, message):
    p = make_packed_problem(rng)
    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16)
    with pytest.raises(exception, match=message):
        trtllm_batch_decode_sparse_mla_dsv4(**{**sm120_args(p), **change}, out=out)
    assert torch.isnan(out.float()).all(), "nothing is written when a call is refused"


def test_argument_errors(rng):
    p = make_packed_problem(rng)
    args = sm120_args(p)
    with pytest.raises(ValueError, match=r"^query: the packed-row \(SM120 'sparse'\) argument set only supports BF16 "
                                         r"query, expected torch\.bfloat16, got torch\.float8"):
        trtllm_batch_decode_sparse_mla_dsv4(**{**args, "query": args["query"].to(torch.float8_e4m3fn)})
    with pytest.raises(ValueError, match=r"^sparse_indices: required by the packed-row argument set"):
        trtllm_batch_decode_sparse_mla_dsv4(**{**args, "sparse_indices": None})
    with pytest.raises(ValueError, match=r"^swa_kv_cache: expected HND \[pages, 1, page_size, 584\]"):
        trtllm_batch_decode_sparse_mla_dsv4(**{**sm120_args(p, "NHD"), "kv_layout": "HND"})
    # FlashInfer requires extra_sparse_topk_lens with extra_sparse_indices, and the reverse (ValueError).
    with pytest.raises(ValueError, match=r"^extra_sparse_topk_lens: expected a tensor together with extra_sparse_ind"):
        trtllm_batch_decode_sparse_mla_dsv4(**{**args, "extra_sparse_topk_lens": None})
    with pytest.raises(ValueError, match=r"^extra_sparse_indices: expected a tensor together with extra_sparse_topk"):
        trtllm_batch_decode_sparse_mla_dsv4(**{**args, "extra_sparse_indices": None})
    with pytest.raises(ValueError, match=r"^compressed_kv_cache: expected the packed pool of extra_sparse_indices"):
        trtllm_batch_decode_sparse_mla_dsv4(**{**args, "compressed_kv_cache": None})


def test_sparse_backend_with_plain_caches_is_refused(rng):
    p = make_plain_problem(rng, dtype="bf16", layout="NHD")
    k = plain_torch_kwargs(p)
    with pytest.raises(ValueError, match=r"^swa_kv_cache: expected uint8 \(1-byte elements"):
        trtllm_batch_decode_sparse_mla_dsv4(
            k["q"], k["swa_kv"], torch.zeros(16, dtype=torch.uint8), k["indices"], kv_layout="NHD", backend="sparse"
        )
