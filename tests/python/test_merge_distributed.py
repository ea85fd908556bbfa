"""sparse_decode.distributed across processes: a dsv4_decode problem's active columns dealt to the
ranks of a process group (window and top-k columns in any split, a rank with none for some tokens),
each rank's call over its own columns written into its StateExchange send rows, the exchange's
all-gather and merge, compared on every rank with the float64 reference of the single call over all
columns (relative L2 <= 3e-3, zeros for tokens without an active column) and, for tokens whose active
columns all sit on one rank, with the single call's bits.

gloo: two CPU processes, in CI. NCCL: two processes on two GPUs (marked gpu, skipped without two
CUDA devices), eager and replayed from a captured CUDA graph. Sinks: every rank runs without sinks;
a sink counted once needs the decode calls' argument that makes exactly one rank add the sink term
(docs/spec.md section 5), and the sink case of this test comes with that argument.
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
from dsv4_reference import SWA, assert_close_l2, make_problem, pool_rows, reference, token_positions  # noqa: E402
from helpers import bits, torch_kwargs, torch_outputs  # noqa: E402

WORLD = 2


def active_columns(p):
    """[T, W] bool: the columns SPEC section 1 counts (lens, -1, the window by position, inside the pool)."""
    positions = token_positions(p)
    rows = (len(pool_rows(p.swa_kv, p.layout)), len(pool_rows(p.compressed_kv, p.layout)))
    tokens, width = p.indices.shape
    active = np.zeros((tokens, width), bool)
    for t in range(tokens):
        for c in range(width):
            index = int(p.indices[t, c])
            if (p.lens is not None and c >= p.lens[t]) or index < 0:
                continue
            if c < SWA and positions is not None and c >= min(SWA, positions[t] + 1):
                continue
            active[t, c] = index < rows[0 if c < SWA else 1]
    return active


def split_problem(p, ranks, seed):
    """(the problem as each rank sees it, [T] whole): token t % 3 == 0 goes whole to one rank (the others
    hold none of its columns), t % 3 == 1 is dealt column by column at random, t % 3 == 2 has its window
    columns on rank 0 and its top-k columns on the others. Non-owned active columns become -1; rank 0
    also loses the columns after its last one through lens (dealt tokens)."""
    rng = np.random.default_rng(seed)
    active = active_columns(p)
    tokens, width = p.indices.shape
    lens = p.lens if p.lens is not None else np.full(tokens, width, np.int32)
    indices = [p.indices.copy() for _ in range(ranks)]
    rank_lens = [lens.copy() for _ in range(ranks)]
    whole = np.arange(tokens) % 3 == 0
    for t in range(tokens):
        whole_owner = int(rng.integers(ranks))
        last = np.full(ranks, -1)
        for c in np.flatnonzero(active[t]):
            if whole[t]:
                owner = whole_owner
            elif t % 3 == 1 or ranks == 1:
                owner = int(rng.integers(ranks))
            else:
                owner = 0 if c < SWA else int(rng.integers(1, ranks))
            for r in range(ranks):
                if r != owner:
                    indices[r][t, c] = -1
            last[owner] = c
        if not whole[t]:
            rank_lens[0][t] = min(lens[t], last[0] + 1)
    return [dataclasses.replace(p, indices=indices[r], lens=rank_lens[r]) for r in range(ranks)], whole


def problem_for(seed):
    p = make_problem(np.random.default_rng(seed), tokens=7, width=384, sinks=False, seq_lens="varlen")
    return p, *split_problem(p, WORLD, seed + 1)


def check_merged(p, whole, out, out_lse, single_out, single_lse, seed):
    ref_out, ref_lse, _ = reference(p)
    assert_close_l2(bits(out), ref_out, seed)
    got_lse = out_lse.cpu().numpy()
    assert np.array_equal(np.isneginf(got_lse), np.isneginf(ref_lse)), f"seed={seed}: lse -inf pattern"
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(got_lse[finite], ref_lse[finite], rtol=1e-3, atol=1e-3, err_msg=f"seed={seed}")
    assert np.array_equal(bits(out)[whole], bits(single_out)[whole]), f"seed={seed}: whole tokens' bits"
    assert np.array_equal(got_lse[whole], single_lse.cpu().numpy()[whole]), f"seed={seed}: whole tokens' lse"


def gloo_worker(rank, init_file, seed):
    from sparse_decode.distributed import StateExchange, merge_across_ranks

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        p, ranks, whole = problem_for(seed)
        exchange = StateExchange(16, p.heads, device="cpu")
        part_out, part_lse = exchange.partial(p.tokens)
        sparse_decode.dsv4_decode(**torch_kwargs(ranks[rank]), out=part_out, lse=part_lse)
        out, out_lse, _ = torch_outputs(p)
        exchange.merge(out, out_lse)
        single_out, single_lse, _ = torch_outputs(p)
        sparse_decode.dsv4_decode(**torch_kwargs(p), out=single_out, lse=single_lse)
        check_merged(p, whole, out, out_lse, single_out, single_lse, seed)

        # The one-off form: the rank's own (out, lse) tensors, copied into a fresh exchange.
        own_out, own_lse, _ = torch_outputs(p)
        sparse_decode.dsv4_decode(**torch_kwargs(ranks[rank]), out=own_out, lse=own_lse)
        again, again_lse, _ = torch_outputs(p)
        merge_across_ranks(own_out, own_lse, again, again_lse)
        assert torch.equal(again.view(torch.int16), out.view(torch.int16)), f"seed={seed}"
    finally:
        dist.destroy_process_group()


def test_two_cpu_processes_over_gloo(tmp_path, seed):
    torch.multiprocessing.spawn(gloo_worker, args=(str(tmp_path / "rendezvous"), seed), nprocs=WORLD, join=True)


def nccl_worker(rank, init_file, seed):
    from sparse_decode.distributed import StateExchange

    assert os.environ.get("NCCL_NVLS_ENABLE") == "0"
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        p, ranks, whole = problem_for(seed)
        exchange = StateExchange(16, p.heads)
        kwargs = torch_kwargs(ranks[rank], "cuda")
        workspace = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        part_out, part_lse = exchange.partial(p.tokens)
        out, out_lse, _ = torch_outputs(p, "cuda")

        def step():
            sparse_decode.dsv4_decode(**kwargs, out=part_out, lse=part_lse, workspace=workspace)
            exchange.merge(out, out_lse)

        step()
        torch.cuda.synchronize()
        single_out, single_lse, _ = torch_outputs(p, "cuda")
        sparse_decode.dsv4_decode(**torch_kwargs(p, "cuda"), out=single_out, lse=single_lse, workspace=workspace)
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
def test_two_gpus_over_nccl(tmp_path, seed):
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # inherited by the spawned processes
    torch.multiprocessing.spawn(nccl_worker, args=(str(tmp_path / "rendezvous"), seed), nprocs=WORLD, join=True)
