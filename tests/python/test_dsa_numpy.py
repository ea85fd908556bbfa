"""dsa_decode (docs/spec.md section 4) from Python: NumPy / torch CPU against the float64
reference, splits, errors, the Step5 drop-in; GPU: served or refused with the
library's reason."""

import numpy as np
import pytest

import sparse_decode
from dsv4_reference import BF16_NAN, assert_matches_exactly_rounded
from hca_dsa_reference import dsa_kwargs, dsa_reference, make_dsa_problem


def run_dsa(p, **overrides):
    out = np.full(p.q.shape, BF16_NAN, np.uint16)
    sparse_decode.dsa_decode(**{**dsa_kwargs(p), **overrides}, out=out)
    return out


def check(p, seed, **overrides):
    out = run_dsa(p, **overrides)
    ref = dsa_reference(p)
    active = p.active != 0
    assert_matches_exactly_rounded(out[active], ref[active], seed)
    assert np.all(out[~active] == 0), f"seed={seed}: inactive rows are zeroed (clear_inactive)"
    assert np.abs(ref).max() > 0, f"seed={seed}: a problem with no visible key checks little"
    return out


@pytest.mark.parametrize("cache", ["bf16", "fp8"])
@pytest.mark.parametrize("groups, heads, query_len", [(1, 16, 1), (2, 4, 2), (3, 1, 1)])
def test_numpy_matches_reference(rng, seed, cache, groups, heads, query_len):
    check(make_dsa_problem(rng, cache=cache, groups=groups, heads=heads, query_len=query_len), seed)


@pytest.mark.parametrize("gate", ["bf16", "float32", "float16"])
def test_gate(rng, seed, gate):
    check(make_dsa_problem(rng, gate=gate), seed)


def test_same_bits_for_every_split(rng, seed):
    p = make_dsa_problem(rng, regions=7)
    first = run_dsa(p, splits=1)
    for splits in (2, 3, 32, None):
        assert np.array_equal(run_dsa(p, splits=splits), first), f"seed={seed}: splits={splits}"


def test_clear_inactive_off_leaves_rows_untouched(rng, seed):
    p = make_dsa_problem(rng)
    p.active[0] = 0
    out = run_dsa(p, clear_inactive=False)
    assert np.all(out[p.active == 0] == BF16_NAN), f"seed={seed}"


def test_splits_for():
    def seed_rule(rows):
        splits = 1
        while splits < 32 and rows * splits * 2 <= 256:
            splits *= 2
        return splits

    for rows in (0, 1, 3, 8, 64, 100, 128, 129, 4096):
        assert sparse_decode.dsa_splits_for(rows) == seed_rule(rows), rows
    assert sparse_decode.dsa_workspace_size(8, 16, 4, on_gpu=False) == 0
    assert sparse_decode.dsa_workspace_size(8, 16, 1) == 0
    assert sparse_decode.dsa_workspace_size(8, 16, 4) == 8 * 4 * 16 * 193 * 4


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p: dict(q=p.q.astype(np.float32)), r"^q: expected bfloat16"),
        (lambda p: dict(q=p.q[None]), r"^q: expected \[rows, heads, 192\]"),
        (lambda p: dict(cache=np.ascontiguousarray(p.cache[..., :256])), r"^cache: expected \[pages, G, block, 384\]"),
        (lambda p: dict(cache=p.cache.astype(np.float32)), r"^cache: expected bfloat16 or FP8"),
        (lambda p: dict(regions=p.regions[:-2]), r"^regions: expected 8 rows like q"),
        (lambda p: dict(regions=p.regions.astype(np.int64)), r"^regions: expected int32"),
        (lambda p: dict(block_table=p.block_table.astype(np.float32)), r"^block_table: expected int32"),
        (lambda p: dict(positions=p.positions[:3]), r"^positions: expected 8 elements"),
        (lambda p: dict(active=p.active.astype(bool)), r"^active: expected int32"),
        (lambda p: dict(gate=np.zeros((4, 3), np.float32)), r"^gate: expected \[tokens, G \* heads\] = \[4, 8\]"),
        (lambda p: dict(splits=33), r"^splits: expected 1\.\.32"),
        (lambda p: dict(query_len=3), r"^q \(rows\): expected a multiple of num_groups \* query_len"),
        (lambda p: dict(cache=p.cache.view(np.uint8)[..., :384], k_scale=None),
         r"^k_scale: expected an array with an FP8 cache, got None$"),
        (lambda p: dict(workspace=np.zeros(64, np.uint8)[::2]), r"^workspace: expected a contiguous array"),
    ],
)
def test_errors_name_the_argument(rng, change, message):
    p = make_dsa_problem(rng)
    out = np.full(p.q.shape, BF16_NAN, np.uint16)
    with pytest.raises(ValueError, match=message):
        sparse_decode.dsa_decode(**{**dsa_kwargs(p), **change(p)}, out=out)
    assert np.all(out == BF16_NAN), "nothing is written when a call is refused"


def torch_args(p, device="cpu"):
    torch = pytest.importorskip("torch")
    from helpers import to_torch

    cache = to_torch(p.cache, device, "bf16" if p.cache_kind == "bf16" else "fp8")
    gate = None if p.gate is None else to_torch(p.gate, device, "bf16" if p.gate.dtype == np.uint16 else None)
    return dict(query=to_torch(p.q, device, "bf16"), cache=cache, regions=to_torch(p.regions, device),
                block_table=to_torch(p.block_table, device), positions=to_torch(p.positions, device),
                active=to_torch(p.active, device), k_scale=to_torch(p.k_scale, device),
                v_scale=to_torch(p.v_scale, device), gate=gate), torch


@pytest.mark.parametrize("cache, gate", [("bf16", "bf16"), ("fp8", "float32"), ("fp8", None), ("bf16", "float16")])
def test_torch_cpu_and_step5_drop_in_same_bits_as_numpy(rng, seed, cache, gate):
    p = make_dsa_problem(rng, cache=cache, gate=gate)
    args, torch = torch_args(p)
    from helpers import bits
    from sparse_decode.step5_compat import sparse_decode_attention, sparse_decode_splits

    splits = sparse_decode_splits(p.q.shape[0])
    expected = run_dsa(p, splits=splits)
    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16)
    sparse_decode.dsa_decode(args["query"], args["cache"], args["regions"], args["block_table"], args["positions"],
                             args["active"], out, scale=p.scale, query_len=p.query_len, k_scale=args["k_scale"],
                             v_scale=args["v_scale"], gate=args["gate"])
    assert np.array_equal(bits(out), expected), f"seed={seed}: torch CPU"
    output = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16)
    sparse_decode_attention(**{k: v for k, v in args.items()}, output=output, scale=p.scale,
                            query_len=p.query_len, splits=splits)
    assert np.array_equal(bits(output), expected), f"seed={seed}: Step5 drop-in"


def test_custom_op_under_torch_compile(rng, seed):
    p = make_dsa_problem(rng)
    args, torch = torch_args(p)
    from helpers import bits

    expected = run_dsa(p, splits=2)

    @torch.compile(fullgraph=True, backend="eager")
    def step(q, cache, regions, block_table, positions, active, out):
        torch.ops.sparse_decode.dsa_decode(q, cache, regions, block_table, positions, active, out, None, p.scale, 2,
                                           query_len=p.query_len)
        return out

    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16)
    step(args["query"], args["cache"], args["regions"], args["block_table"], args["positions"], args["active"], out)
    assert np.array_equal(bits(out), expected), f"seed={seed}"


@pytest.mark.gpu
def test_gpu_served_or_refused_with_the_library_reason(rng, seed):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    from dsv4_reference import assert_close_l2
    from helpers import bits

    p = make_dsa_problem(rng, cache="fp8", gate="bf16", heads=16)
    args, _ = torch_args(p, "cuda")
    rows, splits = p.q.shape[0], 4
    size = sparse_decode.dsa_workspace_size(rows, p.heads, splits)
    workspace = torch.empty(size, dtype=torch.uint8, device="cuda")
    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    try:
        sparse_decode.dsa_decode(args["query"], args["cache"], args["regions"], args["block_table"],
                                 args["positions"], args["active"], out, scale=p.scale, query_len=p.query_len,
                                 splits=splits, k_scale=args["k_scale"], v_scale=args["v_scale"], gate=args["gate"],
                                 workspace=workspace)
    except NotImplementedError as error:  # today: no GPU kernel; the message is the library's
        assert str(error).startswith("dsa_decode: no GPU kernel yet for device memory"), str(error)
        assert torch.isnan(out.float()).all(), "nothing is written when refused"
    else:
        torch.cuda.synchronize()
        active = p.active != 0
        assert_close_l2(bits(out)[active], dsa_reference(p)[active], seed)
        assert torch.all(out[torch.from_numpy(~active).cuda()] == 0)
