"""Request views and any q_len from Python (docs/spec.md, section 1, "Strides (request views)").

A [B, q_len, ...] q, index table, lens, out or lse whose two leading dims do
not merge into one token stride (a view of a larger, padded buffer, as
engines and FlashMLA's own tests pass) is read and written in place. CPU:
NumPy and torch against the float64 reference, the padding of written views
untouched; the drop-ins with such views and FlashInfer's long queries. GPU:
the same views on CUDA tensors against the reference and, bit for bit,
against the contiguous call.
"""

import numpy as np
import pytest

import sparse_decode
from dsv4_reference import (SWA, assert_close_l2, assert_matches_exactly_rounded, make_problem, reference,
                            token_positions)
from helpers import numpy_kwargs, to_torch
from hca_dsa_reference import hca_kwargs, make_hca_problem
from packed_reference import make_packed_problem
from packed_reference import reference as packed_reference

BF16_NAN = 0x7FC0


def padded(a, B, q_len, fill, extra_tokens=2, extra_last=4):
    """A [B, q_len, ...] view of a buffer with extra_tokens more tokens a request and extra_last more
    elements in the last dim (none for 1-D arrays), holding a's [T, ...] values; the padding is `fill`."""
    a = np.asarray(a)
    per_token = a.shape[1:]
    last = (per_token[-1] + extra_last,) if per_token else ()
    buffer = np.full((B, q_len + extra_tokens, *per_token[:-1], *last), fill, a.dtype)
    view = buffer[:, :q_len, ..., : per_token[-1]] if per_token else buffer[:, :q_len]
    view[...] = a.reshape(B, q_len, *per_token)
    return view, buffer


def unmerged(view):
    """The view's two leading dims do not merge into one token stride (a request view)."""
    return view.strides[0] != view.shape[1] * view.strides[1]


def check_padding_untouched(buffer, q_len, fill):
    assert np.all(buffer[:, q_len:] == fill), "the padding between requests is not written"


@pytest.mark.parametrize("B, q_len", [(3, 2), (2, 129)])
def test_dsv4_decode_reads_and_writes_views_in_place(rng, seed, B, q_len):
    p = make_problem(rng, tokens=B * q_len, width=256 if q_len < 16 else 132, seq_lens="uniform", q_len=q_len)
    q, _ = padded(p.q, B, q_len, 0x7F, extra_last=0)
    indices, _ = padded(p.indices, B, q_len, -1)
    lens, _ = padded(p.lens, B, q_len, 0)
    out, out_buffer = padded(np.zeros(p.q.shape, np.uint16), B, q_len, BF16_NAN, extra_last=0)
    out[...] = BF16_NAN
    lse, lse_buffer = padded(np.zeros(p.q.shape[:2], np.float32), B, q_len, np.float32(7.5), extra_last=0)
    assert all(unmerged(a) for a in (q, indices, lens, out, lse))
    kwargs = dict(numpy_kwargs(p), q=q, indices=indices, lens=lens, q_len=None)
    sparse_decode.dsv4_decode(**kwargs, out=out, lse=lse)
    ref_out, ref_lse, _ = reference(p)
    assert_matches_exactly_rounded(out.reshape(p.q.shape), ref_out, seed)
    got = lse.reshape(ref_lse.shape)
    assert np.array_equal(np.isneginf(got), np.isneginf(ref_lse)), f"seed={seed}: lse -inf pattern"
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(got[finite], ref_lse[finite], rtol=1e-6, atol=1e-6, err_msg=f"seed={seed}")
    check_padding_untouched(out_buffer, q_len, BF16_NAN)
    check_padding_untouched(lse_buffer, q_len, np.float32(7.5))


def test_lens_with_token_stride_zero_is_one_value_a_request(rng, seed):
    # [B] lengths expanded to [B, q_len] (strides [1, 0]): FlashMLA's topk_length, read in place.
    p = make_problem(rng, tokens=6, seq_lens="uniform", q_len=3)
    per_request = p.lens.reshape(2, 3).min(axis=1)  # shorter only: columns past a token's lens may be poison
    p.lens = np.repeat(per_request, 3)
    expanded = np.lib.stride_tricks.as_strided(per_request, (2, 3), (4, 0))
    out = p.out_like()
    sparse_decode.dsv4_decode(**dict(numpy_kwargs(p), lens=expanded), out=out)
    assert_matches_exactly_rounded(out, reference(p)[0], seed)


@pytest.mark.parametrize("B, q_len", [(2, 3), (3, 1)])
def test_dsv4_decode_packed_views_and_window(rng, seed, B, q_len):
    p = make_packed_problem(rng, tokens=B * q_len, q_len=q_len)
    seq_lens = rng.integers(q_len, q_len + 60, B).astype(np.int32)
    positions = np.repeat(seq_lens, q_len) - q_len + np.tile(np.arange(q_len), B)
    k = p.kwargs()
    views = {name: padded(k[name], B, q_len, fill)[0]
             for name, fill in (("swa_indices", -1), ("extra_indices", -1), ("swa_lens", 0), ("extra_lens", 0))}
    views["q"] = padded(k["q"], B, q_len, 0, extra_last=0)[0]
    out, out_buffer = padded(p.out_like(), B, q_len, BF16_NAN, extra_last=0)
    lse, _ = padded(p.lse_like(), B, q_len, np.float32(np.nan), extra_last=0)
    sparse_decode.dsv4_decode_packed(**{**k, **views}, seq_lens=seq_lens, out=out, lse=lse)
    ref_out, ref_lse, _ = packed_reference(p, positions=positions)
    assert_matches_exactly_rounded(out.reshape(p.q.shape), ref_out, seed)
    check_padding_untouched(out_buffer, q_len, BF16_NAN)
    if q_len > 1:
        assert not np.array_equal(ref_out, packed_reference(p)[0]), f"seed={seed}: the window changes nothing"


def test_dsv4_decode_hca_views_same_bits_as_flat(rng, seed):
    p = make_hca_problem(rng, tokens=6, q_len=3)
    k = hca_kwargs(p)
    flat = np.full(p.q.shape, BF16_NAN, np.uint16)
    sparse_decode.dsv4_decode_hca(**k, out=flat)
    q, _ = padded(p.q, 2, 3, 0, extra_last=0)
    out, buffer = padded(np.full(p.q.shape, BF16_NAN, np.uint16), 2, 3, BF16_NAN, extra_last=0)
    sparse_decode.dsv4_decode_hca(**dict(k, q=q, q_len=None), out=out)
    assert np.array_equal(out.reshape(flat.shape), flat), f"seed={seed}"
    check_padding_untouched(buffer, 3, BF16_NAN)


def hca_metadata_views(p, B, q_len, layout):
    """p's swa_rows, swa_lens, block_table and lens as views that are not contiguous: [B, q_len, ...]
    request views of padded buffers ("padded"), of [q_len, B, ...] storage ("interleaved"), or [T, ...]
    arrays with a token stride past the row ("strided"); the padding holds values that change the
    result if read (row 0, page 0, a full window, lens past every footprint)."""
    fills = dict(swa_rows=0, swa_lens=SWA, block_table=0, lens=1 << 30)
    views = {}
    for name, fill in fills.items():
        a = getattr(p, name)
        if layout == "padded":
            view = padded(a, B, q_len, fill, extra_last=4)[0]
        elif layout == "interleaved":
            storage = np.full((q_len, B, *a.shape[1:]), fill, a.dtype)
            view = storage.transpose(1, 0, *range(2, a.ndim + 1))
            view[...] = a.reshape(B, q_len, *a.shape[1:])
        else:
            storage = np.full((a.shape[0], a.shape[1] + 4) if a.ndim == 2 else (2 * a.shape[0],), fill, a.dtype)
            view = storage[:, : a.shape[1]] if a.ndim == 2 else storage[::2]
            view[...] = a
        assert not view.flags.c_contiguous and (layout == "strided" or unmerged(view)), name
        views[name] = view
    return views


@pytest.mark.parametrize("layout", ["padded", "interleaved", "strided"])
def test_dsv4_decode_hca_metadata_views_same_bits_as_flat(rng, seed, layout):
    p = make_hca_problem(rng, tokens=6, q_len=3)
    k = hca_kwargs(p)
    flat = np.full(p.q.shape, BF16_NAN, np.uint16)
    flat_count = np.zeros(1, np.int32)
    sparse_decode.dsv4_decode_hca(**k, out=flat, out_of_range_count=flat_count)
    assert np.all(flat != BF16_NAN), f"seed={seed}: the flat call left out unwritten"
    out = np.full(p.q.shape, BF16_NAN, np.uint16)
    count = np.zeros(1, np.int32)
    sparse_decode.dsv4_decode_hca(**dict(k, **hca_metadata_views(p, 2, 3, layout)), out=out,
                                  out_of_range_count=count)
    assert np.array_equal(out, flat), f"seed={seed}: metadata views vs flat"
    assert count[0] == flat_count[0], f"seed={seed}: out_of_range_count"


def test_dsv4_decode_hca_metadata_view_of_other_requests_is_refused(rng):
    p = make_hca_problem(rng, tokens=6, q_len=3)
    rows = padded(p.swa_rows, 3, 2, 0, extra_last=4)[0]  # [3, 2, 128]: the call has B = 2, q_len = 3
    out = np.full(p.q.shape, BF16_NAN, np.uint16)
    with pytest.raises(ValueError, match=r"^swa_rows: expected a \[B, q_len, \.\.\.\] view with B = 2 requests of "
                                         r"q_len = 3 tokens, got shape \[3, 2, 128\]"):
        sparse_decode.dsv4_decode_hca(**dict(hca_kwargs(p), swa_rows=rows), out=out)
    assert np.all(out == BF16_NAN)


# ---------------------------------------------------------------- the drop-ins (torch CPU)


def test_flashinfer_trtllm_gen_views_and_long_queries(rng, seed):
    torch = pytest.importorskip("torch")
    from helpers import bits
    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4

    B, q_len = 2, 128  # prefill-style queries: any q_len
    p = make_problem(rng, tokens=B * q_len, width=132, seq_lens="uniform", q_len=q_len, layout="NHD")
    out_view, out_buffer = padded(np.zeros(p.q.shape, np.uint16), B, q_len, BF16_NAN, extra_last=0)
    out_view[...] = BF16_NAN
    out = to_torch(out_view, element="bf16")
    returned = trtllm_batch_decode_sparse_mla_dsv4(
        query=to_torch(padded(p.q, B, q_len, 0, extra_last=0)[0], element=p.dtype),
        swa_kv_cache=to_torch(p.swa_kv, element=p.dtype), workspace_buffer=torch.zeros(1024, dtype=torch.uint8),
        sparse_indices=to_torch(padded(p.indices, B, q_len, -1)[0]),
        compressed_kv_cache=to_torch(p.compressed_kv, element=p.dtype),
        sparse_topk_lens=to_torch(padded(p.lens, B, q_len, 0)[0]), seq_lens=to_torch(p.seq_lens), out=out,
        bmm1_scale=p.bmm1_scale, bmm2_scale=p.bmm2_scale, sinks=to_torch(p.sinks), kv_layout="NHD")
    assert returned is out
    assert_matches_exactly_rounded(bits(out).reshape(p.q.shape), reference(p)[0], seed)
    written = bits(torch.from_numpy(out_buffer.view(np.int16)).view(torch.bfloat16))
    assert np.all(written[:, q_len:] == BF16_NAN), "the padding between requests is not written"


def test_flashinfer_varlen_query_longer_than_256(rng, seed):
    torch = pytest.importorskip("torch")
    from helpers import bits, torch_kwargs
    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4

    p = make_problem(rng, tokens=260, width=128, layout="HND")
    p.seq_lens = np.array([257 + 40, 3], np.int32)
    p.cum_seq_lens_q, p.max_q_len = np.array([0, 257, 260], np.int32), 257
    k = torch_kwargs(p)
    out = trtllm_batch_decode_sparse_mla_dsv4(
        query=k["q"], swa_kv_cache=k["swa_kv"], workspace_buffer=torch.zeros(1024, dtype=torch.uint8),
        sparse_indices=k["indices"], sparse_topk_lens=k["lens"], seq_lens=k["seq_lens"],
        cum_seq_lens_q=k["cum_seq_lens_q"], max_q_len=257, bmm1_scale=p.bmm1_scale, bmm2_scale=p.bmm2_scale,
        sinks=k["sinks"], kv_layout="HND")
    assert token_positions(p)[256] == 296
    assert_matches_exactly_rounded(bits(out), reference(p)[0], seed)


@pytest.mark.parametrize("b, s_q", [(2, 3), (2, 64)])
def test_flashmla_padded_q_and_indices(rng, seed, b, s_q):
    torch = pytest.importorskip("torch")
    from helpers import bits
    from packed_helpers import torch_kwargs as packed_torch_kwargs
    from sparse_decode.flashmla_compat import flash_mla_with_kvcache, get_mla_metadata

    p = make_packed_problem(rng, tokens=b * s_q, q_len=s_q, four_d=True, extra_width=128 if s_q > 8 else 256)
    k = packed_torch_kwargs(p)
    four_d = lambda cache: cache if cache.dim() == 4 else cache.unsqueeze(2)  # noqa: E731
    args = dict(k_cache=four_d(k["swa_cache"]), block_table=None, cache_seqlens=None, head_dim_v=512,
                num_splits=None, softmax_scale=p.softmax_scale, is_fp8_kvcache=True, attn_sink=k["sinks"],
                extra_k_cache=four_d(k["extra_cache"]), topk_length=k["swa_lens"].reshape(b, s_q)[:, 0].clone(),
                extra_topk_length=k["extra_lens"].reshape(b, s_q)[:, 0].clone())
    # FlashMLA's own generator pads every dim: q and the indices are views of larger buffers.
    q = to_torch(padded(p.q, b, s_q, 0, extra_tokens=1, extra_last=0)[0], element="bf16")
    indices = to_torch(padded(p.swa.indices, b, s_q, -1)[0])
    extra = to_torch(padded(p.extra.indices, b, s_q, -1, extra_tokens=3, extra_last=8)[0])
    assert not q.is_contiguous() and not indices.is_contiguous() and not extra.is_contiguous()
    out, lse = flash_mla_with_kvcache(q=q, indices=indices, extra_indices_in_kvcache=extra,
                                      tile_scheduler_metadata=get_mla_metadata()[0], **args)
    assert_matches_exactly_rounded(bits(out).reshape(p.q.shape), packed_reference(p)[0], seed)
    contiguous, contiguous_lse = flash_mla_with_kvcache(
        q=q.contiguous(), indices=indices.contiguous(), extra_indices_in_kvcache=extra.contiguous(),
        tile_scheduler_metadata=get_mla_metadata()[0], **args)
    assert torch.equal(bits_tensor(out), bits_tensor(contiguous)), f"seed={seed}: views vs contiguous"
    assert torch.equal(lse, contiguous_lse), f"seed={seed}: lse"


def test_flashinfer_cute_dsl_takes_strided_metadata_without_a_copy(rng, seed):
    """FlashInfer's HCA metadata shapes ([B * q_len, 128], [B * q_len, max_pages], [B * q_len]) as
    strided slices of larger buffers: read in place, the bits of the contiguous call."""
    torch = pytest.importorskip("torch")
    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4

    p = make_hca_problem(rng, tokens=6, q_len=2, layout="HND")
    views = hca_metadata_views(p, 3, 2, "strided")

    def call(rows, window, table, lens):
        return trtllm_batch_decode_sparse_mla_dsv4(
            to_torch(p.q, element="fp8").reshape(3, 2, 16, 512), to_torch(p.swa_kv, element="fp8"),
            torch.zeros(16, dtype=torch.uint8), compressed_kv_cache=to_torch(p.compressed_kv, element="fp8"),
            sparse_topk_lens=lens, bmm1_scale=p.bmm1_scale, bmm2_scale=p.bmm2_scale, sinks=to_torch(p.sinks),
            kv_layout="HND", backend="cute-dsl", hca_swa_indices=rows, hca_compressed_block_tables=table,
            hca_seq_lens=to_torch(p.hca_seq_lens), swa_topk_lens=window)

    contiguous = call(*(to_torch(getattr(p, n)) for n in ("swa_rows", "swa_lens", "block_table", "lens")))
    tensors = [to_torch(views[n]) for n in ("swa_rows", "swa_lens", "block_table", "lens")]
    assert not any(t.is_contiguous() for t in tensors)
    out = call(*tensors)
    assert torch.equal(bits_tensor(out), bits_tensor(contiguous)), f"seed={seed}"


def bits_tensor(tensor):
    import torch

    return tensor.view(torch.int16)


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("B, q_len", [(3, 2), (2, 257)])
def test_gpu_views_match_reference_and_the_contiguous_call(rng, seed, B, q_len):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    from helpers import bits, served

    p = make_problem(rng, tokens=B * q_len, width=640 if q_len < 16 else 256, seq_lens="uniform", q_len=q_len)
    kwargs = {name: to_torch(value, "cuda") if isinstance(value, np.ndarray) else value
              for name, value in numpy_kwargs(p).items()}
    kwargs.update(q=to_torch(p.q, "cuda", "fp8"), swa_kv=to_torch(p.swa_kv, "cuda", "fp8"),
                  compressed_kv=to_torch(p.compressed_kv, "cuda", "fp8"))
    flat = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    served(lambda: sparse_decode.dsv4_decode(**kwargs, out=flat))
    views = dict(kwargs, q_len=None, q=to_torch(padded(p.q, B, q_len, 0x7F, extra_last=0)[0], "cuda", "fp8"),
                 indices=to_torch(padded(p.indices, B, q_len, -1)[0], "cuda"),
                 lens=to_torch(padded(p.lens, B, q_len, 0)[0], "cuda"))
    out_view, out_buffer = padded(np.full(p.q.shape, BF16_NAN, np.uint16), B, q_len, BF16_NAN, extra_last=0)
    out = to_torch(out_view, "cuda", "bf16")
    lse_buffer = torch.full((B, q_len + 2, p.heads), 7.5, device="cuda")
    lse = lse_buffer[:, :q_len]
    sparse_decode.dsv4_decode(**views, out=out, lse=lse)
    torch.cuda.synchronize()
    assert np.array_equal(bits(out).reshape(p.q.shape), bits(flat)), f"seed={seed}: views vs contiguous"
    ref_out, ref_lse, _ = reference(p)
    assert_close_l2(bits(out).reshape(p.q.shape), ref_out, seed)
    got = lse.cpu().numpy().reshape(ref_lse.shape)
    assert np.array_equal(np.isneginf(got), np.isneginf(ref_lse)), f"seed={seed}: lse -inf pattern"
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(got[finite], ref_lse[finite], rtol=1e-3, atol=1e-2, err_msg=f"seed={seed}")
    assert bool((lse_buffer[:, q_len:] == 7.5).all()), f"seed={seed}: the lse padding is not written"
    written = bits(out.as_strided((B, q_len + 2, p.heads, 512), (out.stride(0), *out.stride()[1:])))
    assert np.all(written[:, q_len:] == BF16_NAN), f"seed={seed}: the out padding is not written"


@pytest.mark.gpu
def test_gpu_flashmla_padded_q_and_indices(rng, seed):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    from helpers import bits
    from packed_helpers import torch_kwargs as packed_torch_kwargs
    from packed_reference import assert_groups_close
    from sparse_decode.flashmla_compat import flash_mla_with_kvcache, get_mla_metadata

    b, s_q = 3, 4
    p = make_packed_problem(rng, tokens=b * s_q, q_len=s_q, four_d=True)
    k = packed_torch_kwargs(p, "cuda")
    args = dict(k_cache=k["swa_cache"], block_table=None, cache_seqlens=None, head_dim_v=512, num_splits=None,
                softmax_scale=p.softmax_scale, is_fp8_kvcache=True, attn_sink=k["sinks"],
                extra_k_cache=k["extra_cache"], topk_length=k["swa_lens"].reshape(b, s_q)[:, 0].clone(),
                extra_topk_length=k["extra_lens"].reshape(b, s_q)[:, 0].clone())
    q = to_torch(padded(p.q, b, s_q, 0, extra_tokens=1, extra_last=0)[0], "cuda", "bf16")
    indices = to_torch(padded(p.swa.indices, b, s_q, -1)[0], "cuda")
    extra = to_torch(padded(p.extra.indices, b, s_q, -1, extra_tokens=3, extra_last=8)[0], "cuda")
    out, lse = flash_mla_with_kvcache(q=q, indices=indices, extra_indices_in_kvcache=extra,
                                      tile_scheduler_metadata=get_mla_metadata()[0], **args)
    contiguous, contiguous_lse = flash_mla_with_kvcache(
        q=q.contiguous(), indices=indices.contiguous(), extra_indices_in_kvcache=extra.contiguous(),
        tile_scheduler_metadata=get_mla_metadata()[0], **args)
    torch.cuda.synchronize()
    assert_groups_close(bits(out).reshape(p.q.shape), packed_reference(p)[0], seed)
    assert np.array_equal(bits(out), bits(contiguous)), f"seed={seed}: views vs contiguous"
    assert torch.equal(lse, contiguous_lse), f"seed={seed}: lse"


@pytest.mark.gpu
def test_gpu_hca_views_same_bits_as_flat(rng, seed):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    from helpers import bits, served

    p = make_hca_problem(rng, tokens=6, q_len=3)
    k = {name: to_torch(value, "cuda", "fp8" if name in ("q", "swa_kv", "compressed_kv") else None)
         if isinstance(value, np.ndarray) else value for name, value in hca_kwargs(p).items()}
    flat = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    served(lambda: sparse_decode.dsv4_decode_hca(**k, out=flat))
    q = to_torch(padded(p.q, 2, 3, 0, extra_last=0)[0], "cuda", "fp8")
    out_view, _ = padded(np.full(p.q.shape, BF16_NAN, np.uint16), 2, 3, BF16_NAN, extra_last=0)
    out = to_torch(out_view, "cuda", "bf16")
    sparse_decode.dsv4_decode_hca(**dict(k, q=q, q_len=None), out=out)
    torch.cuda.synchronize()
    assert np.array_equal(bits(out).reshape(p.q.shape), bits(flat)), f"seed={seed}: views vs flat"
    heads = p.q.shape[-2]
    written = bits(out.as_strided((2, 5, heads, 512), (5 * heads * 512, heads * 512, 512, 1)))
    assert np.all(written[:, 3:] == BF16_NAN), f"seed={seed}: the padding between requests is not written"


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["padded", "interleaved", "strided"])
def test_gpu_hca_metadata_views_same_bits_as_flat(rng, seed, layout):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    from helpers import bits, served

    p = make_hca_problem(rng, tokens=6, q_len=3)
    k = {name: to_torch(value, "cuda", "fp8" if name in ("q", "swa_kv", "compressed_kv") else None)
         if isinstance(value, np.ndarray) else value for name, value in hca_kwargs(p).items()}
    flat = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    served(lambda: sparse_decode.dsv4_decode_hca(**k, out=flat))
    views = {name: to_torch(view, "cuda") for name, view in hca_metadata_views(p, 2, 3, layout).items()}
    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    sparse_decode.dsv4_decode_hca(**dict(k, **views), out=out)
    torch.cuda.synchronize()
    assert not torch.isnan(flat).any(), f"seed={seed}: the flat call left out unwritten"
    assert np.array_equal(bits(out), bits(flat)), f"seed={seed}: metadata views vs flat"
