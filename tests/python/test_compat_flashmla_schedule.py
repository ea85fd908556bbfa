"""FlashMLA's scheduling state through the drop-in: FlashMLASchedMeta and its config, and the older interface.

From FlashMLA's documented interface: get_mla_metadata() returns a new
FlashMLASchedMeta (have_initialized, config, tile_scheduler_metadata,
num_splits); its first flash_mla_with_kvcache call records the call's shape in
`config` (b, s_q, h_q, page_block_size, h_k, causal, is_fp8_kvcache, topk,
extra_page_block_size, extra_topk), and a later call with another shape is an
AssertionError. The older interface passes get_mla_metadata's two tensors
(tile_scheduler_metadata int32 [num_sm_parts, n], num_splits int32 [b + 1]) and
takes descale_q / descale_k, which its sparse path does not read.
"""

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import compat_args  # noqa: E402
from dsv4_reference import assert_matches_exactly_rounded  # noqa: E402
from helpers import bits, served  # noqa: E402
from packed_reference import assert_groups_close, make_packed_problem, reference  # noqa: E402
from sparse_decode.flashmla_compat import FlashMLASchedMeta, flash_mla_with_kvcache, get_mla_metadata  # noqa: E402

CONFIG_FIELDS = ["b", "s_q", "h_q", "page_block_size", "h_k", "causal", "is_fp8_kvcache", "topk",
                 "extra_page_block_size", "extra_topk"]


def test_sched_meta_has_flashmlas_fields():
    assert [f.name for f in dataclasses.fields(FlashMLASchedMeta)] == [
        "have_initialized", "config", "tile_scheduler_metadata", "num_splits"]
    assert [f.name for f in dataclasses.fields(FlashMLASchedMeta.Config)] == CONFIG_FIELDS
    first, none = get_mla_metadata(torch.zeros(2, dtype=torch.int32), 16, 1, num_heads_q=16, topk=128)
    second = get_mla_metadata()[0]
    assert none is None and first is not second, "a new FlashMLASchedMeta a call"
    assert (first.have_initialized, first.config, first.tile_scheduler_metadata, first.num_splits) == (
        False, None, None, None)


def problem(rng, tokens=4, q_len=2, extra_width=256):
    return make_packed_problem(rng, tokens=tokens, q_len=q_len, four_d=True, extra_width=extra_width)


def check(p, seed, out, lse, b, s_q):
    ref_out, ref_lse, _ = reference(p)
    assert_matches_exactly_rounded(bits(out), ref_out.reshape(out.shape), seed)
    assert lse.shape == (b, p.heads, s_q)


def test_first_call_records_the_shape_and_later_calls_reuse_it(rng, seed):
    p = problem(rng)
    args = compat_args.flashmla(p, 2, 2)
    meta = args["tile_scheduler_metadata"]
    out, lse = flash_mla_with_kvcache(**args)
    check(p, seed, out, lse, 2, 2)
    assert meta.have_initialized is True
    assert dataclasses.asdict(meta.config) == dict(
        b=2, s_q=2, h_q=p.heads, page_block_size=int(args["k_cache"].shape[1]), h_k=1, causal=False,
        is_fp8_kvcache=True, topk=int(args["indices"].shape[-1]),
        extra_page_block_size=int(args["extra_k_cache"].shape[1]),
        extra_topk=int(args["extra_indices_in_kvcache"].shape[-1]))
    assert meta.tile_scheduler_metadata is None and meta.num_splits is None, "sparse_decode keeps no schedule"
    again, _ = flash_mla_with_kvcache(**args)  # the same shape, the same object: served, the same bits
    assert torch.equal(again.view(torch.int16), out.view(torch.int16)), f"seed={seed}"


@pytest.mark.parametrize("field", ["b", "s_q", "topk", "extra_topk"])
def test_a_call_of_another_shape_is_an_assertion_error(rng, field):
    p = problem(rng)
    args = compat_args.flashmla(p, 2, 2)
    meta = args["tile_scheduler_metadata"]
    flash_mla_with_kvcache(**args)
    recorded = dataclasses.replace(meta.config)
    if field in ("b", "s_q"):
        b, s_q = (1, 2) if field == "b" else (2, 1)
        other = compat_args.flashmla(problem(rng, tokens=b * s_q, q_len=s_q), b, s_q, tile_scheduler_metadata=meta)
    elif field == "topk":
        other = dict(args, indices=args["indices"][..., :64].contiguous())
    else:
        other = dict(args, extra_indices_in_kvcache=args["extra_indices_in_kvcache"][..., :128].contiguous(),
                     extra_topk_length=None)
    with pytest.raises(AssertionError, match=rf"^tile_scheduler_metadata: config\.{field} = "):
        flash_mla_with_kvcache(**other)
    assert meta.config == recorded, "a refused call leaves the recorded shape as it was"


def test_flashmlas_own_sched_meta_class_is_the_same_kind(rng, seed):
    # An engine may hold FlashMLA's own FlashMLASchedMeta (a class of that name with the same fields).
    @dataclasses.dataclass
    class FlashMLASchedMeta:  # noqa: F811  (FlashMLA's, not this module's)
        have_initialized: bool = False
        config: object = None
        tile_scheduler_metadata: object = None
        num_splits: object = None

    p = problem(rng)
    foreign = FlashMLASchedMeta()
    out, lse = flash_mla_with_kvcache(**compat_args.flashmla(p, 2, 2, tile_scheduler_metadata=foreign))
    check(p, seed, out, lse, 2, 2)
    assert foreign.have_initialized and foreign.config.b == 2


def older_interface(b):
    """get_mla_metadata's tensors in FlashMLA's older interface (their values are the scheduler's)."""
    return dict(tile_scheduler_metadata=torch.zeros(4, 8, dtype=torch.int32),
                num_splits=torch.zeros(b + 1, dtype=torch.int32))


def test_older_interface_and_its_descales(rng, seed):
    p = problem(rng)
    new_out, new_lse = flash_mla_with_kvcache(**compat_args.flashmla(p, 2, 2))
    for extra in ({}, dict(descale_q=torch.ones(1), descale_k=torch.full((1,), 3.0))):
        out, lse = flash_mla_with_kvcache(**compat_args.flashmla(p, 2, 2, **older_interface(2), **extra))
        assert torch.equal(out.view(torch.int16), new_out.view(torch.int16)), f"seed={seed}: {sorted(extra)}"
        assert torch.equal(lse, new_lse), f"seed={seed}"
    # The descales are the sparse path's no-op with a FlashMLASchedMeta too.
    out, _ = flash_mla_with_kvcache(**compat_args.flashmla(p, 2, 2, descale_q=torch.ones(1), descale_k=torch.ones(1)))
    assert torch.equal(out.view(torch.int16), new_out.view(torch.int16)), f"seed={seed}"


def test_torch_compile_reuses_the_sched_meta(rng, seed):
    p = problem(rng)
    args = compat_args.flashmla(p, 2, 2)
    torch._dynamo.reset()
    compiled = torch.compile(flash_mla_with_kvcache, backend="aot_eager", fullgraph=True)
    first, _ = compiled(**args)
    second, _ = compiled(**args)
    assert_matches_exactly_rounded(bits(first), reference(p)[0].reshape(first.shape), seed)
    assert torch.equal(first.view(torch.int16), second.view(torch.int16)), f"seed={seed}"
    assert args["tile_scheduler_metadata"].have_initialized and args["tile_scheduler_metadata"].config.s_q == 2


@pytest.mark.gpu
def test_gpu_sched_meta_and_older_interface(rng, seed):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    p = problem(rng, tokens=8, q_len=2)
    args = compat_args.flashmla(p, 4, 2, device="cuda")
    out, lse = served(lambda: flash_mla_with_kvcache(**args))
    again, _ = flash_mla_with_kvcache(**args)  # the recorded shape, reused
    old = {name: value.cuda() for name, value in older_interface(4).items()}
    older, older_lse = flash_mla_with_kvcache(**dict(args, **old, descale_q=torch.ones(1, device="cuda"),
                                                     descale_k=torch.ones(1, device="cuda")))
    torch.cuda.synchronize()
    ref_out, ref_lse, _ = reference(p)
    assert_groups_close(bits(out), ref_out.reshape(out.shape), seed)
    for other in (again, older):
        assert torch.equal(other.view(torch.int16), out.view(torch.int16)), f"seed={seed}: deterministic"
    assert torch.equal(older_lse, lse), f"seed={seed}"
    ref_lse = ref_lse.reshape(4, 2, p.heads).transpose(0, 2, 1)
    got = lse.cpu().numpy()
    assert np.array_equal(np.isposinf(got), np.isneginf(ref_lse)), f"seed={seed}: +inf where no valid token"
    with pytest.raises(AssertionError, match=r"^tile_scheduler_metadata: config\.topk = "):
        flash_mla_with_kvcache(**dict(args, indices=args["indices"][..., :64].contiguous()))
