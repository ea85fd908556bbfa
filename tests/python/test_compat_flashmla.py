"""The FlashMLA drop-in: FlashMLA's signature, its (out, lse) conventions, its argument rules (CPU tensors)."""

import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sparse_decode  # noqa: E402
from sparse_decode.flashmla_compat import FlashMLASchedMeta, flash_mla_with_kvcache, get_mla_metadata  # noqa: E402
from dsv4_reference import assert_matches_exactly_rounded  # noqa: E402
from helpers import bits, to_torch  # noqa: E402
from packed_helpers import check_lse, torch_kwargs, torch_outputs  # noqa: E402
from packed_reference import make_packed_problem, reference  # noqa: E402

# flash_mla.flash_mla_with_kvcache (deepseek-ai/FlashMLA, flash_mla/flash_mla_interface.py): name, default.
E = inspect.Parameter.empty
FLASHMLA_PARAMETERS = [
    ("q", E),
    ("k_cache", E),
    ("block_table", E),
    ("cache_seqlens", E),
    ("head_dim_v", E),
    ("tile_scheduler_metadata", E),
    ("num_splits", None),
    ("softmax_scale", None),
    ("causal", False),
    ("is_fp8_kvcache", False),
    ("indices", None),
    ("attn_sink", None),
    ("extra_k_cache", None),
    ("extra_indices_in_kvcache", None),
    ("topk_length", None),
    ("extra_topk_length", None),
    # The older interface's, after the current signature (callers pass them by keyword).
    ("descale_q", None),
    ("descale_k", None),
]


def test_signature_is_flashmlas():
    parameters = inspect.signature(flash_mla_with_kvcache).parameters.values()
    assert [(p.name, p.default) for p in parameters] == FLASHMLA_PARAMETERS
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)


def test_get_mla_metadata_takes_anything():
    meta, none = get_mla_metadata(torch.zeros(3, dtype=torch.int32), 64, 1, num_heads_q=16, topk=640)
    assert isinstance(meta, FlashMLASchedMeta) and none is None


def flashmla_args(p, b, s_q, **overrides) -> dict:
    """Arguments of flash_mla_with_kvcache for a PackedProblem of b * s_q tokens, as an engine passes them."""
    k = torch_kwargs(p)
    four_d = lambda cache: cache if cache is None or cache.dim() == 4 else cache.unsqueeze(2)  # noqa: E731
    per_request = lambda lens: None if lens is None else lens.reshape(b, s_q)[:, 0].contiguous()  # noqa: E731
    args = dict(
        q=k["q"].reshape(b, s_q, p.heads, 512),
        k_cache=four_d(k["swa_cache"]),
        block_table=None,
        cache_seqlens=None,
        head_dim_v=512,
        tile_scheduler_metadata=get_mla_metadata()[0],
        num_splits=None,
        softmax_scale=p.softmax_scale,
        is_fp8_kvcache=True,
        indices=k["swa_indices"].reshape(b, s_q, -1),
        attn_sink=k["sinks"],
        extra_k_cache=four_d(k["extra_cache"]),
        extra_indices_in_kvcache=None if p.extra is None else k["extra_indices"].reshape(b, s_q, -1),
        topk_length=per_request(k["swa_lens"]),
        extra_topk_length=per_request(k["extra_lens"]),
    )
    args.update(overrides)
    return args


def flashmla_call(p, b, s_q, **overrides):
    return flash_mla_with_kvcache(**flashmla_args(p, b, s_q, **overrides))


def check_flashmla(p, seed, out, lse, b, s_q, softmax_scale=None):
    """FlashMLA's conventions: out [b, s_q, h, 512] BF16; lse [b, h, s_q] natural log, +inf where no token."""
    ref_out, ref_lse, _ = reference(p, softmax_scale)
    assert out.shape == (b, s_q, p.heads, 512) and out.dtype == torch.bfloat16
    assert lse.shape == (b, p.heads, s_q) and lse.dtype == torch.float32
    assert_matches_exactly_rounded(bits(out), ref_out.reshape(out.shape), seed)
    ref_lse = ref_lse.reshape(b, s_q, p.heads).transpose(0, 2, 1)
    got = lse.numpy()
    assert np.array_equal(np.isposinf(got), np.isneginf(ref_lse)), f"seed={seed}: +inf exactly where no valid token"
    check_lse(np.where(np.isposinf(got), -np.inf, got), ref_lse, seed)


@pytest.mark.parametrize("b, s_q", [(5, 1), (3, 2)])
@pytest.mark.parametrize("page_size", [64, 61])
def test_matches_reference(rng, seed, b, s_q, page_size):
    p = make_packed_problem(rng, tokens=b * s_q, q_len=s_q, page_size=page_size, four_d=True)
    out, lse = flashmla_call(p, b, s_q)
    check_flashmla(p, seed, out, lse, b, s_q)
    assert lse.stride() == (s_q * p.heads, 1, p.heads), "a transposed view of [b, s_q, h_q], as FlashMLA returns"
    assert torch.isposinf(lse).any(), "the problem has a request with no valid token"


def test_same_bits_as_the_low_level_call(rng, seed):
    p = make_packed_problem(rng, tokens=4)
    out, lse = flashmla_call(p, 4, 1)
    low_out, low_lse, _ = torch_outputs(p)
    sparse_decode.dsv4_decode_packed(**torch_kwargs(p), out=low_out, lse=low_lse)
    assert np.array_equal(bits(out).reshape(p.q.shape), bits(low_out)), f"seed={seed}"
    assert torch.equal(lse[:, :, 0], torch.where(torch.isneginf(low_lse), float("inf"), low_lse))


def test_without_lengths(rng, seed):
    # extra_topk_length None: every extra column counts (the library needs lengths: the width is passed).
    p = make_packed_problem(rng, tokens=4, swa_lens=False, extra_lens=False)
    out, lse = flashmla_call(p, 2, 2)
    check_flashmla(p, seed, out, lse, 2, 2)


def test_without_extra_cache_and_sink(rng, seed):
    p = make_packed_problem(rng, tokens=3, extra_width=None, sinks=False)
    out, lse = flashmla_call(p, 3, 1)
    check_flashmla(p, seed, out, lse, 3, 1)


def test_default_softmax_scale_is_flashmlas(rng, seed):
    p = make_packed_problem(rng, tokens=3)
    out, lse = flashmla_call(p, 3, 1, softmax_scale=None)
    check_flashmla(p, seed, out, lse, 3, 1, softmax_scale=512**-0.5)  # q.shape[-1] ** -0.5


def test_dense_path_arguments_are_accepted_on_the_sparse_path(rng, seed):
    # FlashMLA ignores block_table and cache_seqlens when indices are given; scheduling state of
    # either FlashMLA interface (FlashMLASchedMeta, or tensors) is not needed here.
    p = make_packed_problem(rng, tokens=2)
    meta, _ = get_mla_metadata()
    for _ in range(2):  # the same metadata object, call after call
        out, lse = flashmla_call(
            p,
            2,
            1,
            tile_scheduler_metadata=meta,
            block_table=torch.zeros(2, 4, dtype=torch.int32),
            cache_seqlens=torch.tensor([5, 9], dtype=torch.int32),
        )
        check_flashmla(p, seed, out, lse, 2, 1)
    old = flashmla_call(
        p,
        2,
        1,
        tile_scheduler_metadata=torch.zeros(4, 8, dtype=torch.int32),
        num_splits=torch.zeros(3, dtype=torch.int32),
    )
    assert torch.equal(old[0], out)


@pytest.mark.parametrize(
    "change, exception, message",
    [
        (dict(indices=None), NotImplementedError, r"^indices: None selects FlashMLA's dense decode"),
        ("v3.2", NotImplementedError, r"^k_cache: the DeepSeek-V3\.2 \(656 bytes per token\) cache format"),
        # FlashMLA's Python asserts: AssertionError.
        (dict(causal=True), AssertionError, r"^causal: expected False when indices are given"),
        (dict(is_fp8_kvcache=False), AssertionError, r"^is_fp8_kvcache: expected True"),
        # FlashMLA's C++ checks (TORCH_CHECK): RuntimeError.
        (dict(head_dim_v=576), RuntimeError, r"^head_dim_v: expected 512, got 576$"),
        (dict(extra_k_cache=None), RuntimeError, r"^extra_indices_in_kvcache: expected None without extra_k_cache$"),
        (dict(extra_indices_in_kvcache=None), RuntimeError,
         r"^extra_indices_in_kvcache: expected a tensor with extra_k_cache, got None$"),
        (dict(topk_length=torch.zeros(3, dtype=torch.int32)), RuntimeError, r"^topk_length: expected \[2\]"),
        ("q 3-D", RuntimeError, r"^q: expected \[b, s_q, h_q, 512\]"),
        ("fp8 q", RuntimeError, r"^q: expected bfloat16"),
        ("odd pages", RuntimeError, r"^k_cache \(page stride\): expected a multiple of 16 bytes, got 35624$"),
    ],
)
def test_argument_errors(rng, change, exception, message):
    p = make_packed_problem(rng, tokens=4, q_len=2, page_size=61)
    k = torch_kwargs(p)
    if change == "v3.2":
        change = dict(k_cache=torch.zeros(4, 64, 1, 656, dtype=torch.uint8))
    elif change == "q 3-D":
        change = dict(q=k["q"])
    elif change == "fp8 q":
        change = dict(q=k["q"].reshape(2, 2, 16, 512).to(torch.float8_e4m3fn))
    elif change == "odd pages":
        storage = p.swa.pool.storage[:, : 61 * 584].copy()
        change = dict(k_cache=to_torch(storage).reshape(-1, 61, 1, 584))
    with pytest.raises(exception, match=message):
        flashmla_call(p, 2, 2, **change)


def test_extra_topk_length_without_extra_cache(rng):
    p = make_packed_problem(rng, tokens=2, extra_width=None)
    with pytest.raises(RuntimeError, match=r"^extra_topk_length: expected None without extra_k_cache$"):
        flashmla_call(p, 2, 1, extra_topk_length=torch.zeros(2, dtype=torch.int32))


def test_torch_compile_fullgraph(rng, seed):
    p = make_packed_problem(rng, tokens=4, q_len=2)
    torch._dynamo.reset()
    compiled = torch.compile(flash_mla_with_kvcache, backend="aot_eager", fullgraph=True)
    out, lse = compiled(**flashmla_args(p, 2, 2))
    check_flashmla(p, seed, out, lse, 2, 2)
