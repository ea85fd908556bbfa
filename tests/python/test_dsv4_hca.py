"""dsv4_decode_hca (docs/spec.md section 3) from Python: NumPy / torch CPU
against the float64 reference, errors, the FlashInfer cute-dsl drop-in;
GPU: the device path against the float64 reference and, bit for bit,
against dsv4_decode on the expansion (docs/formats/hca_layout.md). The
converter's tests: test_dsv4_hca_convert.py."""

import numpy as np
import pytest

import sparse_decode
from dsv4_reference import SWA, assert_matches_exactly_rounded
from hca_dsa_reference import hca_kwargs, hca_reference, make_canonical_table, make_hca_problem


def run_hca(p, **overrides):
    kwargs = hca_kwargs(p)
    kwargs.update(overrides)
    out = np.full(p.q.shape, 0x7FC0, np.uint16)
    lse = np.full(p.q.shape[:2], np.nan, np.float32)
    count = np.array([7], np.int32)
    sparse_decode.dsv4_decode_hca(**kwargs, out=out, lse=lse, out_of_range_count=count)
    return out, lse, int(count[0]) - 7


def check(p, seed, **overrides):
    out, lse, count = run_hca(p, **overrides)
    ref_out, ref_lse, ref_count = hca_reference(p)
    assert_matches_exactly_rounded(out, ref_out, seed)
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)), f"seed={seed}: lse -inf pattern"
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=1e-6, atol=1e-6, err_msg=f"seed={seed}")
    assert count == ref_count, f"seed={seed}: out-of-range count {count}, expected {ref_count}"
    assert np.abs(ref_out).max() > 0, f"seed={seed}: a problem with nothing to attend checks little"
    return out


@pytest.mark.parametrize("page_size, max_pages", [(1, 20), (4, 5), (61, 2)])
@pytest.mark.parametrize("layout", ["pages", "NHD", "HND"])
def test_numpy_matches_reference(rng, seed, page_size, max_pages, layout):
    check(make_hca_problem(rng, page_size=page_size, max_pages=max_pages, layout=layout), seed)


@pytest.mark.parametrize("q_len, varlen", [(1, False), (3, False), (None, True)])
def test_request_mappings(rng, seed, q_len, varlen):
    check(make_hca_problem(rng, tokens=6, q_len=q_len or 1, varlen=varlen), seed)


def test_four_dim_query_and_no_sinks(rng, seed):
    p = make_hca_problem(rng, tokens=6, q_len=2)
    p.sinks = None
    out = check(p, seed, q=p.q.reshape(3, 2, 16, 512), q_len=None)
    assert out.shape == (6, 16, 512)


def test_torch_cpu_same_bits_as_numpy(rng, seed):
    torch = pytest.importorskip("torch")
    from helpers import bits, to_torch

    p = make_hca_problem(rng, layout="HND")
    expected = run_hca(p)[0]
    k = hca_kwargs(p)
    tensors = {n: to_torch(v, element="fp8" if n in ("q", "swa_kv", "compressed_kv") else None)
               for n, v in k.items() if isinstance(v, np.ndarray)}
    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16)
    sparse_decode.dsv4_decode_hca(**{**k, **tensors}, out=out)
    assert np.array_equal(bits(out), expected), f"seed={seed}"
    out2 = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16)
    torch.ops.sparse_decode.dsv4_decode_hca(
        tensors["q"], tensors["swa_kv"], tensors["compressed_kv"], tensors["swa_rows"], tensors["swa_lens"],
        tensors["block_table"], tensors["lens"], tensors["hca_seq_lens"], out2, None, None, None,
        q_len=p.q_len, sinks=tensors["sinks"], bmm1_scale=p.bmm1_scale, bmm2_scale=p.bmm2_scale,
        page_layout="HND")
    assert np.array_equal(bits(out2), expected), f"seed={seed}: the custom op"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p: dict(q=p.q.view(np.uint16)[..., :256]), r"^q: expected FP8 E4M3"),
        (lambda p: dict(compressed_kv=p.compressed_kv.astype(np.float32)), r"^compressed_kv: expected FP8 E4M3"),
        (lambda p: dict(swa_rows=np.ascontiguousarray(p.swa_rows[:, :64])), r"^swa_rows: expected \[T, 128\]"),
        (lambda p: dict(block_table=p.block_table.astype(np.int64)), r"^block_table: expected int32"),
        (lambda p: dict(lens=p.lens[:3]), r"^lens: expected 6 elements"),
        (lambda p: dict(swa_lens=p.swa_lens.astype(np.float32)), r"^swa_lens: expected int32"),
        (lambda p: dict(hca_seq_lens=p.hca_seq_lens[:2]),
         r"^hca_seq_lens: expected B = T / q_len = 3 elements \(T = 6 query tokens, q_len = 2\), got shape \[2\]$"),
        (lambda p: dict(bmm1_scale=float("nan")), r"^bmm1_scale: expected a number, got NaN$"),
        (lambda p: dict(page_layout="HDN"), r"^page_layout: expected 'NHD' or 'HND'"),
    ],
)
def test_errors_name_the_argument(rng, change, message):
    p = make_hca_problem(rng, tokens=6, q_len=2)
    kwargs = {**hca_kwargs(p), **change(p)}
    out = np.full(p.q.shape, 0x7FC0, np.uint16)
    with pytest.raises(ValueError, match=message):
        sparse_decode.dsv4_decode_hca(**kwargs, out=out)
    assert np.all(out == 0x7FC0), "nothing is written when a call is refused"




def test_flashinfer_cute_dsl_same_bits_as_low_level(rng, seed):
    torch = pytest.importorskip("torch")
    from helpers import bits, to_torch
    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4

    p = make_hca_problem(rng, layout="HND", tokens=6, q_len=2)
    expected = run_hca(p)[0]
    out = trtllm_batch_decode_sparse_mla_dsv4(
        to_torch(p.q, element="fp8").reshape(3, 2, 16, 512), to_torch(p.swa_kv, element="fp8"),
        torch.zeros(16, dtype=torch.uint8), compressed_kv_cache=to_torch(p.compressed_kv, element="fp8"),
        sparse_topk_lens=to_torch(p.lens), bmm1_scale=p.bmm1_scale, bmm2_scale=p.bmm2_scale,
        sinks=to_torch(p.sinks), kv_layout="HND", backend="cute-dsl", hca_swa_indices=to_torch(p.swa_rows),
        hca_compressed_block_tables=to_torch(p.block_table), hca_seq_lens=to_torch(p.hca_seq_lens),
        swa_topk_lens=to_torch(p.swa_lens), hca_use_persistent=True)
    assert out.shape == (3, 2, 16, 512) and np.array_equal(bits(out).reshape(expected.shape), expected), f"seed={seed}"


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_flashinfer_page_aligned_format_matches_trtllm_gen(rng, seed, layout):
    torch = pytest.importorskip("torch")
    from helpers import bits, to_torch
    from sparse_decode.flashinfer_compat import (
        convert_compressed_page_aligned_sparse_indices_to_hca_metadata, trtllm_batch_decode_sparse_mla_dsv4)

    t = make_canonical_table(rng, page_size=4, width=148)
    pools = [to_torch(a, element="fp8") for a in (t.swa, t.comp)]
    pools = [x[:, None] if layout == "HND" else x[:, :, None] for x in pools]
    common = dict(query=to_torch(t.q, element="fp8"), swa_kv_cache=pools[0], compressed_kv_cache=pools[1],
                  workspace_buffer=torch.zeros(16, dtype=torch.uint8), sparse_topk_lens=to_torch(t.lens),
                  bmm1_scale=t.bmm1_scale, sinks=to_torch(t.sinks), kv_layout=layout)
    seq_lens, indices = to_torch(t.seq_lens), to_torch(t.indices)
    section1 = trtllm_batch_decode_sparse_mla_dsv4(**common, sparse_indices=indices, seq_lens=seq_lens)
    converted = trtllm_batch_decode_sparse_mla_dsv4(**common, sparse_indices=indices, seq_lens=seq_lens,
                                                    backend="cute-dsl",
                                                    hca_sparse_indices_format="compressed-page-aligned")
    assert np.array_equal(bits(converted), bits(section1)), f"seed={seed}: converted path vs trtllm-gen"
    metadata = convert_compressed_page_aligned_sparse_indices_to_hca_metadata(
        indices, common["sparse_topk_lens"], seq_lens, pools[0], pools[1], q_len=t.q_len, kv_layout=layout)
    assert metadata.hca_is_causal is True  # FlashInfer's DSV4HCAMetadata has the field
    explicit = trtllm_batch_decode_sparse_mla_dsv4(**common, backend="cute-dsl", **metadata._asdict())
    assert np.array_equal(bits(explicit), bits(section1)), f"seed={seed}: precomputed metadata vs trtllm-gen"


def test_flashinfer_cute_dsl_argument_errors(rng):
    torch = pytest.importorskip("torch")
    from helpers import to_torch
    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4

    p = make_hca_problem(rng, layout="HND")
    args = dict(query=to_torch(p.q, element="fp8"), swa_kv_cache=to_torch(p.swa_kv, element="fp8"),
                workspace_buffer=torch.zeros(16, dtype=torch.uint8), kv_layout="HND", backend="cute-dsl",
                compressed_kv_cache=to_torch(p.compressed_kv, element="fp8"), sparse_topk_lens=to_torch(p.lens),
                hca_swa_indices=to_torch(p.swa_rows), hca_compressed_block_tables=to_torch(p.block_table),
                hca_seq_lens=to_torch(p.hca_seq_lens), swa_topk_lens=to_torch(p.swa_lens))
    with pytest.raises(ValueError, match=r"^swa_topk_lens: required by the HCA argument set"):
        trtllm_batch_decode_sparse_mla_dsv4(**{**args, "swa_topk_lens": None})
    with pytest.raises(ValueError, match=r"^sparse_indices: sparse_indices must be None with the explicit HCA "):
        trtllm_batch_decode_sparse_mla_dsv4(**args, sparse_indices=args["hca_swa_indices"])
    with pytest.raises(ValueError, match=r"^bmm1_scale: the HCA argument set \(backend='cute-dsl'\) takes a Python"):
        trtllm_batch_decode_sparse_mla_dsv4(**args, bmm1_scale=torch.ones(1))
    with pytest.raises(ValueError, match=r"^hca_is_causal: backend='cute-dsl' supports causal HCA only"):
        trtllm_batch_decode_sparse_mla_dsv4(**args, hca_is_causal=False)
    with pytest.raises(ValueError, match=r"^hca_swa_indices: produced by the compressed-page-aligned conversion"):
        trtllm_batch_decode_sparse_mla_dsv4(**args, hca_sparse_indices_format="compressed-page-aligned")


# ---------------------------------------------------------------- GPU


def expand_to_section1(p):
    """The section-1 table of an HCA problem (docs/formats/hca_layout.md): indices int32 [T, W'] with
    W' = 128 + max_pages * page_size rounded up to 4, and lens int32 [T] = 128 + slots."""
    tokens, max_pages = p.block_table.shape
    ps = p.page_size
    width = (SWA + max_pages * ps + 3) // 4 * 4
    indices = np.full((tokens, width), -1, np.int32)
    lens = np.empty(tokens, np.int32)
    for t in range(tokens):
        window = min(max(int(p.swa_lens[t]), 0), SWA)
        indices[t, :window] = p.swa_rows[t, :window]
        n = max(0, min(int(p.lens[t]) - SWA, int(p.hca_seq_lens[p.request[t]]) - SWA, max_pages * ps))
        for j in range(n):
            page = int(p.block_table[t, j // ps])
            indices[t, SWA + j] = -1 if page < 0 else min(page * ps + j % ps, 2**31 - 1)
        lens[t] = SWA + n
    return indices, lens


def cuda_tensors(p, to_torch):
    """hca_kwargs(p) with every array a CUDA tensor (FP8 views for q and the pools)."""
    k = hca_kwargs(p)
    tensors = {n: to_torch(v, "cuda", "fp8" if n in ("q", "swa_kv", "compressed_kv") else None)
               for n, v in k.items() if isinstance(v, np.ndarray)}
    return {**k, **tensors}


@pytest.mark.parametrize("page_size,max_pages,varlen,layout",
                         [(1, 40, False, "pages"), (4, 5, True, "NHD"), (61, 3, False, "HND"), (64, 2, True, "pages")])
def test_expansion_gives_the_same_bits_on_the_cpu(rng, seed, page_size, max_pages, varlen, layout):
    """The helper of the GPU test below: dsv4_decode on expand_to_section1 is dsv4_decode_hca, on the CPU."""
    p = make_hca_problem(rng, tokens=8, q_len=2, varlen=varlen, page_size=page_size, max_pages=max_pages,
                         layout=layout)
    out, lse, count = run_hca(p)
    indices, lens = expand_to_section1(p)
    k = hca_kwargs(p)
    out1 = np.full(p.q.shape, 0x7FC0, np.uint16)
    lse1 = np.full(p.q.shape[:2], np.nan, np.float32)
    count1 = np.array([7], np.int32)
    sparse_decode.dsv4_decode(p.q, p.swa_kv, p.compressed_kv, indices, out1, lens=lens, sinks=p.sinks,
                              bmm1_scale=p.bmm1_scale, bmm2_scale=p.bmm2_scale, lse=lse1, out_of_range_count=count1,
                              page_layout=k["page_layout"])
    assert np.array_equal(out, out1), f"seed={seed}"
    assert np.array_equal(lse.view(np.uint32), lse1.view(np.uint32)), f"seed={seed}"
    assert count == int(count1[0]) - 7, f"seed={seed}"


@pytest.mark.gpu
@pytest.mark.parametrize("page_size,max_pages,varlen,layout",
                         [(1, 40, False, "pages"), (4, 5, True, "NHD"), (61, 3, False, "HND"), (64, 2, True, "pages")])
def test_gpu_matches_reference_and_section1_on_the_expansion(rng, seed, page_size, max_pages, varlen, layout):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    from dsv4_reference import assert_close_l2
    from helpers import bits, to_torch

    p = make_hca_problem(rng, tokens=8, q_len=2, varlen=varlen, page_size=page_size, max_pages=max_pages,
                         layout=layout)
    k = cuda_tensors(p, to_torch)
    T, H = p.q.shape[:2]

    def outputs():
        return (torch.full((T, H, 512), float("nan"), dtype=torch.bfloat16, device="cuda"),
                torch.full((T, H), float("nan"), dtype=torch.float32, device="cuda"),
                torch.full((1,), 7, dtype=torch.int32, device="cuda"))

    out, lse, count = outputs()
    sparse_decode.dsv4_decode_hca(**k, out=out, lse=lse, out_of_range_count=count)  # workspace allocated
    torch.cuda.synchronize()
    ref_out, ref_lse, ref_count = hca_reference(p)
    assert_close_l2(bits(out), ref_out, seed)
    got_lse = lse.cpu().numpy()
    assert np.array_equal(np.isneginf(got_lse), np.isneginf(ref_lse)), f"seed={seed}: lse -inf pattern"
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(got_lse[finite], ref_lse[finite], rtol=1e-3, atol=1e-3, err_msg=f"seed={seed}")
    assert int(count.item()) - 7 == ref_count, f"seed={seed}: out_of_range_count"

    indices, lens = expand_to_section1(p)
    out1, lse1, count1 = outputs()
    sparse_decode.dsv4_decode(k["q"], k["swa_kv"], k["compressed_kv"], to_torch(indices, "cuda"), out1,
                              lens=to_torch(lens, "cuda"), sinks=k["sinks"], bmm1_scale=p.bmm1_scale,
                              bmm2_scale=p.bmm2_scale, lse=lse1, out_of_range_count=count1,
                              page_layout=k["page_layout"])
    torch.cuda.synchronize()
    assert np.array_equal(bits(out), bits(out1)), f"seed={seed}: dsv4_decode_hca vs dsv4_decode on the expansion"
    assert np.array_equal(lse.cpu().numpy().view(np.uint32), lse1.cpu().numpy().view(np.uint32)), f"seed={seed}"
    assert int(count.item()) == int(count1.item()), f"seed={seed}"


@pytest.mark.gpu
def test_gpu_workspace_is_optional(rng, seed):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    from helpers import bits, to_torch

    p = make_hca_problem(rng, tokens=6, q_len=2, page_size=64, max_pages=2)
    k = cuda_tensors(p, to_torch)
    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    out16 = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    sparse_decode.dsv4_decode_hca(**k, out=out)  # workspace allocated
    # A workspace too small for the split path runs without it: the same bits.
    sparse_decode.dsv4_decode_hca(**k, out=out16, workspace=torch.empty(16, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    assert np.array_equal(bits(out), bits(out16)), f"seed={seed}: a 16-byte workspace"
    q = make_hca_problem(rng, tokens=2, q_len=1, page_size=4, max_pages=4097)  # 16388 > 16384 slots
    with pytest.raises(NotImplementedError, match=r"^block_table \(width\): the GPU path walks"):
        sparse_decode.dsv4_decode_hca(**cuda_tensors(q, to_torch),
                                      out=torch.empty(q.q.shape, dtype=torch.bfloat16, device="cuda"))


@pytest.mark.gpu
def test_gpu_flashinfer_cute_dsl_same_bits_as_low_level(rng, seed):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    from helpers import bits, to_torch
    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4

    p = make_hca_problem(rng, layout="HND", tokens=6, q_len=2)
    k = cuda_tensors(p, to_torch)
    expected = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    sparse_decode.dsv4_decode_hca(**k, out=expected)
    out = trtllm_batch_decode_sparse_mla_dsv4(
        k["q"].reshape(3, 2, 16, 512), k["swa_kv"], torch.zeros(8 << 20, dtype=torch.uint8, device="cuda"),
        compressed_kv_cache=k["compressed_kv"], sparse_topk_lens=k["lens"], bmm1_scale=p.bmm1_scale,
        bmm2_scale=p.bmm2_scale, sinks=k["sinks"], kv_layout="HND", backend="cute-dsl",
        hca_swa_indices=k["swa_rows"], hca_compressed_block_tables=k["block_table"],
        hca_seq_lens=k["hca_seq_lens"], swa_topk_lens=k["swa_lens"])
    torch.cuda.synchronize()
    assert out.shape == (3, 2, 16, 512)
    assert np.array_equal(bits(out).reshape(-1), bits(expected).reshape(-1)), f"seed={seed}"
