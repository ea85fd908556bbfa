"""merge_states on CUDA tensors (the GPU kernel): against the float64 NumPy oracle, one rank's partial
back bit for bit, the same bits from a captured CUDA graph and through torch.compile; skipped without a
CUDA device."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sparse_decode  # noqa: E402
from dsv4_reference import assert_close_l2  # noqa: E402
from helpers import gpu_marks  # noqa: E402
from test_merge_numpy import expected, make_case  # noqa: E402
from test_merge_torch_cpu import poisoned, raw, to_torch  # noqa: E402

pytestmark = gpu_marks(torch)


def check(partials, lse, out, out_lse, seed):
    ref, ref_lse = expected(partials, lse)
    got = raw(out)
    if out.dtype == torch.bfloat16:
        assert_close_l2(got, ref, seed)
    else:
        assert not np.isnan(got).any(), f"seed={seed}"
        error = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
        assert error <= 1e-5, f"seed={seed}: relative L2 error {error:.3e}"
    empty = np.isneginf(ref_lse)
    assert np.all(got[empty].view(np.uint8) == 0), f"seed={seed}: rows empty on every rank are +0.0"
    got_lse = out_lse.cpu().numpy()
    assert np.array_equal(np.isneginf(got_lse), empty), f"seed={seed}"
    np.testing.assert_allclose(got_lse[~empty], ref_lse[~empty], rtol=1e-5, atol=1e-5, err_msg=f"seed={seed}")


@pytest.mark.parametrize("in_dtype", ["bf16", "float32"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("ranks", [2, 5, 8, 17])
def test_cuda_tensors_match_the_spec(rng, seed, in_dtype, out_dtype, ranks):
    partials, lse = make_case(rng, ranks=ranks, tokens=33, heads=16, dim=512, dtype=in_dtype)
    t_partials, t_lse = to_torch(partials, lse, "cuda")
    out, out_lse = poisoned(33, 16, 512, out_dtype, "cuda")
    sparse_decode.merge_states(t_partials, t_lse, out, out_lse=out_lse)
    torch.cuda.synchronize()
    check(partials, lse, out, out_lse, seed)


def test_one_rank_gives_its_partial_back(rng, seed):
    partials, lse = make_case(rng, ranks=1, tokens=9, heads=16, dim=512, empty=0.0, empty_token=False)
    t_partials, t_lse = to_torch(partials, lse, "cuda")
    out, out_lse = poisoned(9, 16, 512, device="cuda")
    sparse_decode.merge_states([t_partials[0]], [t_lse[0]], out, out_lse=out_lse)
    assert np.array_equal(raw(out), partials[0]), f"seed={seed}"
    assert np.array_equal(out_lse.cpu().numpy(), lse[0]), f"seed={seed}"


def test_graph_replay_and_torch_compile_give_the_same_bits(rng, seed):
    partials, lse = make_case(rng, ranks=4, tokens=12, heads=16, dim=512)
    t_partials, t_lse = to_torch(partials, lse, "cuda")
    out, out_lse = poisoned(12, 16, 512, device="cuda")
    torch.ops.sparse_decode.merge_states([t_partials], [t_lse], out, out_lse, True)
    torch.cuda.synchronize()
    check(partials, lse, out, out_lse, seed)
    eager = raw(out).copy()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.ops.sparse_decode.merge_states([t_partials], [t_lse], out, out_lse, True, True)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert np.array_equal(raw(out), eager), f"seed={seed}: graph replay"

    def step(p, s, o):
        torch.ops.sparse_decode.merge_states([p], [s], o, None, True)
        return o.float().sum()

    compiled = torch.compile(step, fullgraph=True)
    out.fill_(float("nan"))
    compiled(t_partials, t_lse, out)
    torch.cuda.synchronize()
    assert np.array_equal(raw(out), eager), f"seed={seed}: torch.compile"
