"""torch CUDA tensors on the GPU kernels; every test is skipped without a CUDA device.

A call that the library does not serve on this GPU yet (NotImplementedError,
e.g. a head count or dtype without a kernel) is reported as skipped with the
library's reason, so these tests start checking a path the day it lands.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sparse_decode  # noqa: E402
from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4  # noqa: E402
from dsv4_reference import assert_close_l2, make_problem, reference  # noqa: E402
from helpers import bits, gpu_marks, served, torch_kwargs, torch_outputs  # noqa: E402

pytestmark = gpu_marks(torch)


def decode_on_gpu(p, **overrides):
    kwargs = torch_kwargs(p, "cuda")
    kwargs.update(overrides)
    out, lse, count = torch_outputs(p, "cuda")
    served(lambda: sparse_decode.dsv4_decode(**kwargs, out=out, lse=lse, out_of_range_count=count))
    torch.cuda.synchronize()
    return out, lse, count


def check_against_reference(p, seed, out, lse=None, count=None, scales=None):
    ref_out, ref_lse, ref_count = reference(p, *(scales or ()))
    assert_close_l2(bits(out), ref_out.reshape(out.shape), seed)
    if lse is not None:
        got = lse.cpu().numpy().reshape(ref_lse.shape)
        assert np.array_equal(np.isneginf(got), np.isneginf(ref_lse)), f"seed={seed}: lse -inf pattern"
        finite = np.isfinite(ref_lse)
        np.testing.assert_allclose(got[finite], ref_lse[finite], rtol=1e-3, atol=1e-2, err_msg=f"seed={seed}")
    if count is not None:
        assert int(count.item()) - 7 == ref_count, f"seed={seed}: out-of-range count"


@pytest.mark.parametrize("tokens", [1, 6, 48, 300])
@pytest.mark.parametrize("width", [128, 640, 1152])
@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_fp8_16_heads_matches_reference(rng, seed, tokens, width, layout):
    p = make_problem(rng, tokens=tokens, width=width, layout=layout, page_size=64, pages=8)
    check_against_reference(p, seed, *decode_on_gpu(p))


@pytest.mark.parametrize(
    "options",
    [
        dict(dtype="bf16"),
        dict(heads=8),
        dict(heads=32),
        dict(heads=64),
        dict(heads=128),
        dict(seq_lens="uniform", q_len=2, tokens=8),
        dict(seq_lens="varlen", tokens=9),
        dict(layout="rows", row_pad=64),
        dict(layout="pages", page_size=1, page_pad=1),
        dict(lens=False, sinks=False, out_of_range=False),
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_other_shapes_match_reference_or_are_refused(rng, seed, options):
    p = make_problem(rng, **{"tokens": 6, "width": 640, **options})
    check_against_reference(p, seed, *decode_on_gpu(p))


def test_infinite_sinks_and_empty_tokens(rng, seed):
    p = make_problem(rng, tokens=4, width=256, empty_token=False)
    p.sinks[::2], p.sinks[1::2] = np.inf, -np.inf
    p.lens[1] = 0
    p.indices[2] = -1
    out, lse, count = decode_on_gpu(p)
    check_against_reference(p, seed, out, lse, count)
    assert torch.all(out[1:3] == 0)


def test_same_bits_run_after_run_and_on_an_explicit_stream(rng):
    p = make_problem(rng, tokens=12, width=640)
    first = bits(decode_on_gpu(p)[0])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    out, _, _ = torch_outputs(p, "cuda")
    kwargs = torch_kwargs(p, "cuda")
    sparse_decode.dsv4_decode(**kwargs, out=out, stream=side.cuda_stream)
    side.synchronize()
    assert np.array_equal(bits(out), first)


def test_arrays_on_another_device_are_refused(rng):
    p = make_problem(rng)
    kwargs = torch_kwargs(p, "cuda")
    kwargs["indices"] = kwargs["indices"].cpu()
    out, _, _ = torch_outputs(p, "cuda")
    with pytest.raises(ValueError, match=r"^indices: expected an array on the same device as q"):
        sparse_decode.dsv4_decode(**kwargs, out=out)


def fill_problem(tensors, p):
    """Writes a new problem of the same shapes into the captured tensors, in place."""
    new = torch_kwargs(p, "cuda")
    for name in ("q", "swa_kv", "compressed_kv", "indices", "lens", "sinks"):
        tensors[name].copy_(new[name])


@pytest.mark.parametrize("entry", ["low-level", "custom-op", "flashinfer"])
def test_cuda_graph_replay_sees_new_scales_and_indices(rng, seed, entry):
    shapes = dict(tokens=6, width=640, layout="HND", page_size=64, pages=8)
    first, second = make_problem(rng, **shapes), make_problem(rng, **shapes)
    t = torch_kwargs(first, "cuda")
    scale1 = torch.tensor([first.bmm1_scale], dtype=torch.float32, device="cuda")
    scale2 = torch.tensor([first.bmm2_scale], dtype=torch.float32, device="cuda")
    out, lse, count = torch_outputs(first, "cuda")
    workspace = torch.empty(2 << 20, dtype=torch.uint8, device="cuda")

    # Every tensor exists before capture, except the low-level entry's split
    # workspace (torch's graph pool serves it). The FlashInfer entry gets half
    # of `workspace` (1 MiB), too little for the split path (1.9 MB): it runs the
    # cluster kernel.
    def step():
        if entry == "low-level":
            sparse_decode.dsv4_decode(**{**t, "bmm1_scale": scale1, "bmm2_scale": scale2}, out=out, lse=lse)
        elif entry == "custom-op":
            torch.ops.sparse_decode.dsv4_decode(
                t["q"],
                t["swa_kv"],
                t["compressed_kv"],
                t["indices"],
                out,
                lse,
                None,
                workspace,
                t["lens"],
                sinks=t["sinks"],
                bmm1_scale_tensor=scale1,
                bmm2_scale_tensor=scale2,
                page_layout="HND",
            )
        else:
            trtllm_batch_decode_sparse_mla_dsv4(
                t["q"],
                t["swa_kv"],
                workspace,
                t["indices"],
                t["compressed_kv"],
                t["lens"],
                out=out,
                bmm1_scale=scale1,
                bmm2_scale=scale2,
                sinks=t["sinks"],
                kv_layout="HND",
            )

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        served(step)  # warm-up outside capture (kernel attributes are set once)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check_against_reference(first, seed, out)

    # New indices (and rows, q, lens, sinks) and new scale values, written in place.
    fill_problem(t, second)
    scale1.fill_(second.bmm1_scale * 0.5)
    scale2.fill_(second.bmm2_scale * 3.0)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check_against_reference(second, seed, out, scales=(second.bmm1_scale * 0.5, second.bmm2_scale * 3.0))


def test_torch_compile_calls_the_op(rng, seed):
    p = make_problem(rng, tokens=6, width=640)
    t = torch_kwargs(p, "cuda")
    scale = torch.tensor([p.bmm1_scale], dtype=torch.float32, device="cuda")

    def attention(q_bf16, out):
        # Some work around the op, as in a model: quantize q, then decode.
        q = (q_bf16 * 1.0).to(torch.float8_e4m3fn)
        torch.ops.sparse_decode.dsv4_decode(
            q,
            t["swa_kv"],
            t["compressed_kv"],
            t["indices"],
            out,
            None,
            None,
            None,
            t["lens"],
            sinks=t["sinks"],
            bmm1_scale_tensor=scale,
            bmm2_scale=p.bmm2_scale,
        )
        return out.float().sum(dim=-1)

    q_bf16 = t["q"].to(torch.bfloat16)
    eager_out, _, _ = torch_outputs(p, "cuda")
    served(lambda: attention(q_bf16, eager_out))
    torch._dynamo.reset()
    compiled = torch.compile(attention, fullgraph=True)
    compiled_out, _, _ = torch_outputs(p, "cuda")
    result = compiled(q_bf16, compiled_out)
    torch.cuda.synchronize()
    assert np.array_equal(bits(compiled_out), bits(eager_out)), f"seed={seed}"
    torch.testing.assert_close(result, eager_out.float().sum(dim=-1))  # inductor may sum in another order
    check_against_reference(p, seed, compiled_out)


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_flashinfer_drop_in_gives_the_same_bits_as_the_low_level_call(rng, seed, layout):
    p = make_problem(rng, tokens=8, width=640, layout=layout, page_size=64, pages=8, q4d=True, q_len=2)
    low_level, _, _ = decode_on_gpu(p)
    t = torch_kwargs(p, "cuda")
    workspace = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda")
    out = served(
        lambda: trtllm_batch_decode_sparse_mla_dsv4(
            t["q"],
            t["swa_kv"],
            workspace,
            sparse_indices=t["indices"],
            compressed_kv_cache=t["compressed_kv"],
            sparse_topk_lens=t["lens"],
            bmm1_scale=p.bmm1_scale,
            bmm2_scale=p.bmm2_scale,
            sinks=t["sinks"],
            kv_layout=layout,
        )
    )
    torch.cuda.synchronize()
    assert out.shape == p.q.shape and out.dtype == torch.bfloat16
    assert np.array_equal(bits(out), bits(low_level)), f"seed={seed}: the drop-in differs from the low-level call"


def test_split_path_workspace_from_python(rng, seed):
    """T = 24 at W = 640 runs the split kernel on the H200 (kAuto: up to 37 units): with the workspace the
    call allocates, with FlashInfer's workspace_buffer (its upper half), and without room for it (the
    stream kernel above 20 units): same bits."""
    p = make_problem(rng, tokens=24, width=640, layout="HND", page_size=64, pages=8)
    allocated, _, _ = decode_on_gpu(p)
    check_against_reference(p, seed, allocated)
    too_small, _, _ = decode_on_gpu(p, workspace=torch.empty(16, dtype=torch.uint8, device="cuda"))
    t = torch_kwargs(p, "cuda")
    flashinfer = trtllm_batch_decode_sparse_mla_dsv4(
        t["q"], t["swa_kv"], torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"),
        sparse_indices=t["indices"], compressed_kv_cache=t["compressed_kv"], sparse_topk_lens=t["lens"],
        bmm1_scale=p.bmm1_scale, bmm2_scale=p.bmm2_scale, sinks=t["sinks"], kv_layout="HND",
    )
    torch.cuda.synchronize()
    assert np.array_equal(bits(allocated), bits(too_small)), f"seed={seed}: split and stream differ"
    assert np.array_equal(bits(allocated), bits(flashinfer)), f"seed={seed}: the drop-in differs"


@pytest.mark.parametrize("sink_term", ["in_output_and_lse", "none"])
@pytest.mark.parametrize("tokens", [3, 300])
def test_sink_terms_match_reference(rng, seed, sink_term, tokens):
    # The sink term of a rank whose partial is merged (docs/spec.md, sections 1 and 5); +-inf sinks too.
    p = make_problem(rng, tokens=tokens, width=640, layout="NHD", page_size=64, pages=8)
    p.sinks[0], p.sinks[1] = np.inf, -np.inf
    out, lse, count = decode_on_gpu(p, sink_term=sink_term)
    ref_out, ref_lse, ref_count = reference(p, sink_term=sink_term)
    assert_close_l2(bits(out), ref_out, seed)
    got = lse.cpu().numpy()
    assert np.array_equal(np.isinf(got), np.isinf(ref_lse)), f"seed={seed}: lse inf pattern"
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(got[finite], ref_lse[finite], rtol=1e-3, atol=1e-2, err_msg=f"seed={seed}")
    assert int(count.item()) - 7 == ref_count, f"seed={seed}: out-of-range count"
