"""dsv4_decode_packed on torch CUDA tensors; every test is skipped without a CUDA device.

The packed-row kernel (docs/kernels/packed.md) serves device memory on
sm_90a. Where the library refuses it (another GPU, a build without the
kernel) it raises NotImplementedError and each test skips with the library's
reason; test_device_calls_are_served_or_refused_cleanly checks either outcome.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sparse_decode  # noqa: E402
from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4  # noqa: E402
from sparse_decode.flashmla_compat import flash_mla_with_kvcache, get_mla_metadata  # noqa: E402
from helpers import bits, gpu_marks, served  # noqa: E402
from packed_helpers import torch_kwargs, torch_outputs  # noqa: E402
from packed_reference import assert_groups_close, finish, make_packed_problem, reference  # noqa: E402

pytestmark = gpu_marks(torch)


def decode_on_gpu(p, **overrides):
    kwargs = {**torch_kwargs(p, "cuda"), **overrides}
    out, lse, count = torch_outputs(p, "cuda")
    served(lambda: sparse_decode.dsv4_decode_packed(**kwargs, out=out, lse=lse, out_of_range_count=count))
    torch.cuda.synchronize()
    return out, lse, count


def check_against_reference(p, seed, out, lse=None, count=None, softmax_scale=None):
    ref_out, ref_lse, ref_count = reference(p, softmax_scale)
    assert_groups_close(bits(out), ref_out.reshape(out.shape), seed)
    if lse is not None:
        got = lse.cpu().numpy().reshape(ref_lse.shape)
        assert np.array_equal(np.isneginf(got), np.isneginf(ref_lse)), f"seed={seed}: lse -inf pattern"
        finite = np.isfinite(ref_lse)
        np.testing.assert_allclose(got[finite], ref_lse[finite], rtol=1e-3, atol=1e-2, err_msg=f"seed={seed}")
    if count is not None:
        assert int(count.item()) - 7 == ref_count, f"seed={seed}: out-of-range count"


def test_device_calls_are_served_or_refused_cleanly(rng, seed):
    p = make_packed_problem(rng, tokens=4)
    kwargs = torch_kwargs(p, "cuda")
    out, lse, count = torch_outputs(p, "cuda")
    try:
        sparse_decode.dsv4_decode_packed(**kwargs, out=out, lse=lse, out_of_range_count=count)
    except NotImplementedError as error:
        torch.cuda.synchronize()
        assert str(error).startswith("dsv4_decode_packed: "), "the library's message"
        assert torch.isnan(out.float()).all() and int(count.item()) == 7, "nothing is written when refused"
        return
    torch.cuda.synchronize()
    check_against_reference(p, seed, out, lse, count)


@pytest.mark.parametrize("tokens", [1, 6, 48, 130])
@pytest.mark.parametrize("widths", [(128, 512), (128, None)], ids=["128+512", "128"])
@pytest.mark.parametrize("page_size", [64, 61, 1])
def test_16_heads_match_reference(rng, seed, tokens, widths, page_size):
    p = make_packed_problem(rng, tokens=tokens, swa_width=widths[0], extra_width=widths[1], page_size=page_size)
    check_against_reference(p, seed, *decode_on_gpu(p))


@pytest.mark.parametrize(
    "options",
    [
        dict(heads=8),
        dict(heads=32),
        dict(heads=64),
        dict(heads=128),
        dict(page_size=2, four_d=True),
        dict(page_size=256, extra_page_size=61, extra_stride=32),
        dict(swa_width=130, extra_width=1024),
        dict(swa_lens=False, sinks=False, out_of_range=0.0),
        dict(tokens=6, q_len=3),
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_other_shapes_match_reference(rng, seed, options):
    p = make_packed_problem(rng, **{"tokens": 5, **options})
    check_against_reference(p, seed, *decode_on_gpu(p))


def test_scale_bytes_across_the_ue8m0_range(rng, seed):
    p = make_packed_problem(rng, tokens=12)
    finish(rng, p, scale_range=(100, 150), extreme_fraction=0.2)
    check_against_reference(p, seed, *decode_on_gpu(p))


def test_infinite_sinks_and_empty_tokens(rng, seed):
    p = make_packed_problem(rng, tokens=4, empty_token=False)
    p.sinks[::2], p.sinks[1::2] = np.inf, -np.inf
    p.swa.lens[1], p.extra.lens[1] = 0, 0
    p.swa.indices[2], p.extra.indices[2] = -1, -1
    out, lse, count = decode_on_gpu(p)
    check_against_reference(p, seed, out, lse, count)
    assert torch.all(out[1:3] == 0) and torch.all(out[:, ::2] == 0)


def test_same_bits_run_after_run_and_on_an_explicit_stream(rng):
    p = make_packed_problem(rng, tokens=12)
    first = bits(decode_on_gpu(p)[0])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    out, _, _ = torch_outputs(p, "cuda")
    sparse_decode.dsv4_decode_packed(**torch_kwargs(p, "cuda"), out=out, stream=side.cuda_stream)
    side.synchronize()
    assert np.array_equal(bits(out), first)


def test_arrays_on_another_device_are_refused(rng):
    p = make_packed_problem(rng)
    kwargs = torch_kwargs(p, "cuda")
    kwargs["extra_indices"] = kwargs["extra_indices"].cpu()
    out, _, _ = torch_outputs(p, "cuda")
    with pytest.raises(ValueError, match=r"^extra_indices: expected an array on the same device as q"):
        sparse_decode.dsv4_decode_packed(**kwargs, out=out)


def test_flashmla_drop_in(rng, seed):
    b, s_q = 4, 2
    p = make_packed_problem(rng, tokens=b * s_q, q_len=s_q, four_d=True)
    k = torch_kwargs(p, "cuda")
    out, lse = served(
        lambda: flash_mla_with_kvcache(
            k["q"].reshape(b, s_q, p.heads, 512),
            k["swa_cache"],
            None,
            None,
            512,
            get_mla_metadata()[0],
            softmax_scale=p.softmax_scale,
            is_fp8_kvcache=True,
            indices=k["swa_indices"].reshape(b, s_q, -1),
            attn_sink=k["sinks"],
            extra_k_cache=k["extra_cache"],
            extra_indices_in_kvcache=k["extra_indices"].reshape(b, s_q, -1),
            topk_length=k["swa_lens"].reshape(b, s_q)[:, 0].contiguous(),
            extra_topk_length=k["extra_lens"].reshape(b, s_q)[:, 0].contiguous(),
        )
    )
    torch.cuda.synchronize()
    assert out.shape == (b, s_q, p.heads, 512) and lse.shape == (b, p.heads, s_q)
    flat_lse = lse.transpose(1, 2).reshape(-1, p.heads)
    assert torch.isposinf(flat_lse).any(), "FlashMLA's +inf for a token with no valid index"
    check_against_reference(
        p, seed, out.reshape(p.q.shape), torch.where(torch.isposinf(flat_lse), -torch.inf, flat_lse)
    )


def test_flashinfer_drop_in_gives_the_same_bits_as_the_low_level_call(rng, seed):
    p = make_packed_problem(rng, tokens=8)
    low_level, _, _ = decode_on_gpu(p)
    k = torch_kwargs(p, "cuda")
    out = trtllm_batch_decode_sparse_mla_dsv4(
        k["q"].unsqueeze(1),
        k["swa_cache"].unsqueeze(2),
        # FlashInfer callers pass a large workspace (vLLM: 128 MiB and more): the
        # split path's fits, so the drop-in runs the kernel the low-level call runs.
        torch.zeros(32 << 20, dtype=torch.uint8, device="cuda"),
        k["swa_indices"],
        k["extra_cache"].unsqueeze(2),
        out=torch.empty(p.q.shape, dtype=torch.bfloat16, device="cuda"),
        bmm1_scale=p.softmax_scale,
        sinks=k["sinks"],
        kv_layout="NHD",
        swa_topk_lens=k["swa_lens"],
        extra_sparse_indices=k["extra_indices"],
        extra_sparse_topk_lens=k["extra_lens"],
    )
    torch.cuda.synchronize()
    assert np.array_equal(bits(out), bits(low_level)), f"seed={seed}: the drop-in differs from the low-level call"


@pytest.mark.parametrize("entry", ["low-level", "custom-op", "flashinfer", "flashmla"])
def test_cuda_graph_replay_sees_new_data(rng, seed, entry):
    first, second = (make_packed_problem(rng, tokens=6, empty_token=False) for _ in range(2))
    t = torch_kwargs(first, "cuda")
    out, lse, _ = torch_outputs(first, "cuda")
    workspace = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda")
    result = {}
    meta = get_mla_metadata()[0]  # FlashMLA's scheduler object, planned at the warm-up

    def step():  # the caches, indices and outputs all exist before capture
        if entry == "low-level":
            sparse_decode.dsv4_decode_packed(**t, out=out, lse=lse)
        elif entry == "custom-op":
            args = [t[n] for n in ("swa_lens", "extra_cache", "extra_indices", "extra_lens", "sinks")]
            torch.ops.sparse_decode.dsv4_decode_packed(
                t["q"], t["swa_cache"], t["swa_indices"], out, lse, None, workspace, t["softmax_scale"], *args
            )
        elif entry == "flashinfer":
            trtllm_batch_decode_sparse_mla_dsv4(
                t["q"], t["swa_cache"], workspace, t["swa_indices"], t["extra_cache"], out=out,
                bmm1_scale=t["softmax_scale"], sinks=t["sinks"], kv_layout="NHD", swa_topk_lens=t["swa_lens"],
                extra_sparse_indices=t["extra_indices"], extra_sparse_topk_lens=t["extra_lens"],
            )  # fmt: skip
        else:  # FlashMLA allocates its outputs: from the graph's pool, the same memory at every replay
            result["out"], _ = flash_mla_with_kvcache(
                t["q"][:, None], t["swa_cache"][:, :, None], None, None, 512, meta,
                softmax_scale=t["softmax_scale"], is_fp8_kvcache=True, indices=t["swa_indices"][:, None],
                attn_sink=t["sinks"], extra_k_cache=t["extra_cache"][:, :, None],
                extra_indices_in_kvcache=t["extra_indices"][:, None], topk_length=t["swa_lens"],
                extra_topk_length=t["extra_lens"],
            )  # fmt: skip

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        served(step)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    result_out = lambda: result.get("out", out).reshape(first.q.shape)  # noqa: E731

    for problem in (first, second):  # the second one's data copied into the captured tensors
        new = torch_kwargs(problem, "cuda")
        for name in (
            "q",
            "swa_cache",
            "swa_indices",
            "swa_lens",
            "extra_cache",
            "extra_indices",
            "extra_lens",
            "sinks",
        ):
            t[name].copy_(new[name])
        result_out().fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        # The softmax scale is a float baked into the graph: the first problem's.
        check_against_reference(problem, seed, result_out(), softmax_scale=first.softmax_scale)


@pytest.mark.parametrize("sink_term", ["in_output", "in_output_and_lse", "none"])
@pytest.mark.parametrize("B, q_len", [(3, 2), (1, 130)])
def test_window_views_and_sink_term(rng, seed, sink_term, B, q_len):
    # seq_lens (section 1's window on the SWA segment), [B, q_len] lens views with token stride 0, any q_len
    # and every sink term, against the reference.
    p = make_packed_problem(rng, tokens=B * q_len, q_len=q_len)
    seq_lens = rng.integers(q_len, q_len + 60, B).astype(np.int32)
    positions = np.repeat(seq_lens, q_len) - q_len + np.tile(np.arange(q_len), B)
    k = torch_kwargs(p, "cuda")
    views = {name: k[name].reshape(B, q_len)[:, 0].clone()[:, None].expand(B, q_len)
             for name in ("swa_lens", "extra_lens")}
    out, lse, count = decode_on_gpu(p, **views, seq_lens=torch.from_numpy(seq_lens).cuda(), sink_term=sink_term)
    ref_out, ref_lse, ref_count = reference(p, positions=positions, sink_term=sink_term)
    assert_groups_close(bits(out), ref_out, seed)
    got = lse.cpu().numpy()
    assert np.array_equal(np.isinf(got), np.isinf(ref_lse)), f"seed={seed}: lse inf pattern"
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(got[finite], ref_lse[finite], rtol=1e-3, atol=1e-2, err_msg=f"seed={seed}")
    assert int(count.item()) - 7 == ref_count, f"seed={seed}: out-of-range count"


def test_batch_invariant_flag_keeps_a_tokens_bits(rng, seed):
    # 12 tokens of 16 heads take the split path by default; with the flag each
    # token's bits are those it gets alone (and within the accuracy bound).
    p = make_packed_problem(rng, tokens=12)
    out, lse, count = decode_on_gpu(p, batch_invariant=True)
    check_against_reference(p, seed, out, lse, count)
    kwargs = torch_kwargs(p, "cuda")
    for t in (0, 5, 11):
        alone = {name: (value[t : t + 1] if name in ("q", "swa_indices", "swa_lens", "extra_indices", "extra_lens")
                        and value is not None else value) for name, value in kwargs.items()}
        out_t = torch.full_like(out[t : t + 1], float("nan"))
        lse_t = torch.full_like(lse[t : t + 1], float("nan"))
        sparse_decode.dsv4_decode_packed(**alone, out=out_t, lse=lse_t, batch_invariant=True)
        torch.cuda.synchronize()
        assert np.array_equal(bits(out_t), bits(out[t : t + 1])), f"seed={seed}: token {t} alone"
        assert torch.equal(lse_t.view(torch.int32), lse[t : t + 1].view(torch.int32)), f"seed={seed}: lse of token {t}"
