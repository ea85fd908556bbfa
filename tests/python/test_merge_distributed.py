"""sparse_decode.distributed across processes: a dsv4_decode problem's active columns dealt to the
ranks of a process group (window and top-k columns in any split, a rank with none for some tokens),
each rank's call over its own columns written into its StateExchange send rows, the exchange's
all-gather and merge, compared on every rank with the float64 reference of the single call over all
columns (relative L2 <= 3e-3, zeros for tokens without an active column) and, for tokens whose active
columns all sit on one rank, with the single call's bits.

gloo: two CPU processes, in CI. NCCL: two processes on two GPUs (marked gpu, skipped without two
CUDA devices), eager and replayed from a captured CUDA graph. Sinks: rank 0 calls with sink_term
"in_output_and_lse", the others with "none", so that the sink is counted once (docs/spec.md sections 1
and 5); the merge then equals the single call with its sinks, and its lse counts the sink. Bit for bit
only for whole tokens on rank 0 there: a token whole on another rank gets rank 0's sink-only partial
(out 0, lse = sink) as a second weight.
"""

import dataclasses
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import sparse_decode  # noqa: E402
from dsv4_reference import assert_close_l2, make_problem, reference  # noqa: E402
from helpers import bits, torch_kwargs, torch_outputs  # noqa: E402
from merge_split import SINK_TERMS, held_by, split_problem  # noqa: E402

WORLD = 2


def problem_for(seed, sinks=False):
    p = make_problem(np.random.default_rng(seed), tokens=7, width=384, sinks=sinks, seq_lens="varlen")
    ranks, whole = split_problem(p, WORLD, seed + 1)
    if sinks:
        whole = whole & held_by(p, ranks[0])  # the whole tokens whose merge has the single call's bits
    return p, ranks, whole


def check_merged(p, whole, out, out_lse, single_out, single_lse, seed):
    """single_lse: the single call's with the sink term of the merge (in_output_and_lse with sinks)."""
    ref_out, ref_lse, _ = reference(p, sink_term="in_output_and_lse")
    assert_close_l2(bits(out), ref_out, seed)
    got_lse = out_lse.cpu().numpy()
    assert np.array_equal(np.isneginf(got_lse), np.isneginf(ref_lse)), f"seed={seed}: lse -inf pattern"
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(got_lse[finite], ref_lse[finite], rtol=1e-3, atol=1e-3, err_msg=f"seed={seed}")
    assert np.array_equal(bits(out)[whole], bits(single_out)[whole]), f"seed={seed}: whole tokens' bits"
    assert np.array_equal(got_lse[whole], single_lse.cpu().numpy()[whole]), f"seed={seed}: whole tokens' lse"


def gloo_worker(rank, init_file, seed, sinks):
    from sparse_decode.distributed import StateExchange, merge_across_ranks

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        p, ranks, whole = problem_for(seed, sinks)
        sink_term = SINK_TERMS[rank]
        exchange = StateExchange(16, p.heads, device="cpu")
        part_out, part_lse = exchange.partial(p.tokens)
        sparse_decode.dsv4_decode(**torch_kwargs(ranks[rank]), out=part_out, lse=part_lse, sink_term=sink_term)
        out, out_lse, _ = torch_outputs(p)
        exchange.merge(out, out_lse)
        single_out, single_lse, _ = torch_outputs(p)
        sparse_decode.dsv4_decode(**torch_kwargs(p), out=single_out, lse=single_lse, sink_term="in_output_and_lse")
        check_merged(p, whole, out, out_lse, single_out, single_lse, seed)
        plain_out, _, _ = torch_outputs(p)
        sparse_decode.dsv4_decode(**torch_kwargs(p), out=plain_out)  # the default sink term: the same out
        assert torch.equal(plain_out.view(torch.int16), single_out.view(torch.int16)), f"seed={seed}"

        # The one-off form: the rank's own (out, lse) tensors, copied into a fresh exchange.
        own_out, own_lse, _ = torch_outputs(p)
        sparse_decode.dsv4_decode(**torch_kwargs(ranks[rank]), out=own_out, lse=own_lse, sink_term=sink_term)
        again, again_lse, _ = torch_outputs(p)
        merge_across_ranks(own_out, own_lse, again, again_lse)
        assert torch.equal(again.view(torch.int16), out.view(torch.int16)), f"seed={seed}"
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("sinks", [False, True])
def test_two_cpu_processes_over_gloo(tmp_path, seed, sinks):
    torch.multiprocessing.spawn(gloo_worker, args=(str(tmp_path / "rendezvous"), seed, sinks), nprocs=WORLD,
                                join=True)


def nccl_worker(rank, init_file, seed, sinks):
    from sparse_decode.distributed import StateExchange

    assert os.environ.get("NCCL_NVLS_ENABLE") == "0"
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        p, ranks, whole = problem_for(seed, sinks)
        exchange = StateExchange(16, p.heads)
        kwargs = dict(torch_kwargs(ranks[rank], "cuda"), sink_term=SINK_TERMS[rank])
        workspace = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        part_out, part_lse = exchange.partial(p.tokens)
        out, out_lse, _ = torch_outputs(p, "cuda")

        def step():
            sparse_decode.dsv4_decode(**kwargs, out=part_out, lse=part_lse, workspace=workspace)
            exchange.merge(out, out_lse)

        step()
        torch.cuda.synchronize()
        single_out, single_lse, _ = torch_outputs(p, "cuda")
        sparse_decode.dsv4_decode(**torch_kwargs(p, "cuda"), out=single_out, lse=single_lse, workspace=workspace,
                                  sink_term="in_output_and_lse")
        torch.cuda.synchronize()
        check_merged(p, whole, out, out_lse, single_out, single_lse, seed)
        eager = bits(out).copy()

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        out.fill_(float("nan"))
        out_lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert np.array_equal(bits(out), eager), f"seed={seed}: the replayed graph's bits"
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices (NCCL across two GPUs)")
@pytest.mark.parametrize("sinks", [False, True])
def test_two_gpus_over_nccl(tmp_path, seed, sinks):
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # inherited by the spawned processes
    torch.multiprocessing.spawn(nccl_worker, args=(str(tmp_path / "rendezvous"), seed, sinks), nprocs=WORLD,
                                join=True)
