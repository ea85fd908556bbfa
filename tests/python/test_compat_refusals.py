"""Each drop-in refuses what its upstream refuses, with the upstream's exception type.

Written from the upstream contracts: FlashInfer's trtllm_batch_decode_sparse_mla_dsv4
raises ValueError for a bad argument and for an argument the resolved backend does
not take ("backend='trtllm-gen' does not accept ..."), TypeError for a tensor scale
that is not float32; FlashMLA's flash_mla_with_kvcache asserts in Python
(AssertionError) and checks in C++ with TORCH_CHECK (RuntimeError); seed 002's
sparse_decode_attention asserts. What the upstream accepts and this build does not
serve is a NotImplementedError. Every refusal leaves a given `out` untouched.
"""

import pytest

torch = pytest.importorskip("torch")

import compat_args  # noqa: E402
from dsv4_reference import make_problem  # noqa: E402
from hca_dsa_reference import make_canonical_table, make_dsa_problem, make_hca_problem  # noqa: E402
from helpers import to_torch  # noqa: E402
from packed_reference import make_packed_problem  # noqa: E402
from sparse_decode.flashinfer_compat import (  # noqa: E402
    batch_decode_sparse_mla_dsv4,
    convert_compressed_page_aligned_sparse_indices_to_hca_metadata,
    trtllm_batch_decode_sparse_mla_dsv4,
)
from sparse_decode.flashmla_compat import flash_mla_with_kvcache  # noqa: E402
from sparse_decode.step5_compat import sparse_decode_attention  # noqa: E402

I32 = torch.int32


def poisoned_like(query):
    return torch.full(query.shape, float("nan"), dtype=torch.bfloat16, device=query.device)


def refused(call, args, exception, message):
    """call(**args) raises `exception` (exactly that type or the package's subclass of it) matching
    `message`, and writes nothing into the given out."""
    out = args.get("out")
    with pytest.raises(exception, match=message):
        call(**args)
    if out is not None:
        assert torch.isnan(out.float()).all(), "nothing is written when a call is refused"


# ---------------------------------------------------------------- FlashInfer


def trtllm_gen(rng):
    p = make_problem(rng, layout="HND", tokens=6, seq_lens="uniform", q_len=2, q4d=True)
    args = compat_args.flashinfer_trtllm_gen(p)
    return dict(args, out=poisoned_like(args["query"]))


def packed(rng):
    args = compat_args.flashinfer_sparse(make_packed_problem(rng))
    return dict(args, out=poisoned_like(args["query"]))


def cute_dsl(rng):
    args = compat_args.flashinfer_cute_dsl(make_hca_problem(rng, layout="HND", tokens=6, q_len=2))
    return dict(args, out=poisoned_like(args["query"]))


FLASHINFER = [
    # (argument set, change, FlashInfer's exception, message)
    ("cute-dsl", dict(hca_is_causal=False), ValueError, r"^hca_is_causal: backend='cute-dsl' supports causal HCA only"),
    ("cute-dsl", dict(bmm1_scale=torch.ones(1)), ValueError, r"^bmm1_scale: the HCA argument set .* Python float"),
    ("cute-dsl", dict(bmm2_scale=torch.ones(1)), ValueError, r"^bmm2_scale: the HCA argument set .* Python float"),
    ("cute-dsl", "seq_lens", ValueError, r"^seq_lens: expected None: the explicit HCA metadata .* uses hca_seq_lens"),
    ("cute-dsl", "sparse_indices", ValueError, r"^sparse_indices: sparse_indices must be None with the explicit HCA"),
    ("cute-dsl", dict(hca_sparse_indices_format="page-aligned"), ValueError,
     r"^hca_sparse_indices_format: expected None or 'compressed-page-aligned', got 'page-aligned'$"),
    ("cute-dsl", "extra_sparse_indices", ValueError,
     r"^extra_sparse_indices: backend='cute-dsl' does not accept extra_sparse_indices \("),
    ("trtllm-gen", "hca_swa_indices", ValueError,
     r"^hca_swa_indices: backend='trtllm-gen' does not accept hca_swa_indices \("),
    ("trtllm-gen", dict(hca_is_causal=False), ValueError,
     r"^hca_is_causal: backend='trtllm-gen' does not accept hca_is_causal \("),
    ("trtllm-gen", dict(hca_use_persistent=True), ValueError, r"^hca_use_persistent: backend='trtllm-gen' does not"),
    ("trtllm-gen", "swa_topk_lens", ValueError, r"^swa_topk_lens: an argument of the packed-row \(SM120 'sparse'\)"),
    ("trtllm-gen", dict(backend="fa3"), ValueError, r"^backend: expected one of 'auto', 'trtllm-gen'"),
    ("trtllm-gen", dict(kv_layout="HDN"), ValueError, r"^kv_layout: expected 'HND' or 'NHD', got 'HDN'$"),
    ("trtllm-gen", dict(bmm1_scale=torch.ones(1, dtype=torch.float64)), TypeError,
     r"^bmm1_scale: expected a float or a float32 tensor, got a torch\.float64 tensor$"),
    ("trtllm-gen", dict(sinks=torch.zeros(3)), ValueError, r"^sinks: expected 16 elements"),
    ("sparse", "hca_seq_lens", ValueError, r"^hca_seq_lens: backend='sparse' does not accept hca_seq_lens \("),
    ("sparse", dict(bmm1_scale=torch.ones(1)), ValueError, r"^bmm1_scale: the packed-row .* takes a Python float"),
    ("sparse", dict(bmm2_scale=0.5), ValueError, r"^bmm2_scale: expected 1\.0 with packed caches"),
    ("sparse", dict(extra_sparse_topk_lens=None), ValueError,
     r"^extra_sparse_topk_lens: expected a tensor together with extra_sparse_indices"),
]

BUILDERS = {"trtllm-gen": trtllm_gen, "sparse": packed, "cute-dsl": cute_dsl}


def int32_like(args, name):
    """A plausible int32 tensor for an argument the set does not take (its value does not matter)."""
    rows = args["query"].shape[0] * (args["query"].shape[1] if args["query"].dim() == 4 else 1)
    return torch.zeros((rows, 128) if name in ("hca_swa_indices", "sparse_indices", "extra_sparse_indices")
                       else (rows,), dtype=I32)


@pytest.mark.parametrize("argument_set, change, exception, message", FLASHINFER)
def test_flashinfer_refusals_have_flashinfers_types(rng, argument_set, change, exception, message):
    args = BUILDERS[argument_set](rng)
    change = {change: int32_like(args, change)} if isinstance(change, str) else change
    refused(trtllm_batch_decode_sparse_mla_dsv4, {**args, **change}, exception, message)


def test_backend_neutral_alias_is_the_same_function(rng, seed):
    # FlashInfer's batch_decode_sparse_mla_dsv4 is the same object as trtllm_batch_decode_sparse_mla_dsv4.
    assert batch_decode_sparse_mla_dsv4 is trtllm_batch_decode_sparse_mla_dsv4
    args = trtllm_gen(rng)
    out = batch_decode_sparse_mla_dsv4(**args)
    assert out is args["out"] and not torch.isnan(out.float()).any(), f"seed={seed}: the alias decodes"
    with pytest.raises(ValueError, match=r"^hca_seq_lens: backend='trtllm-gen' does not accept hca_seq_lens"):
        batch_decode_sparse_mla_dsv4(**{**args, "hca_seq_lens": torch.ones(3, dtype=I32)})


def converter_args(rng, device="cpu"):
    t = make_canonical_table(rng, page_size=4, width=148)
    pools = [to_torch(a, device, "fp8")[:, None] for a in (t.swa, t.comp)]  # HND
    return t, dict(sparse_indices=to_torch(t.indices), sparse_topk_lens=to_torch(t.lens),
                   seq_lens=to_torch(t.seq_lens), swa_kv_cache=pools[0], compressed_kv_cache=pools[1], q_len=t.q_len)


def test_flashinfer_converter_refuses_caches_on_another_device(rng):
    # FlashInfer: "swa_kv_cache must be on cpu" (ValueError). A meta tensor stands in for a CUDA one here.
    _, args = converter_args(rng)
    for name in ("swa_kv_cache", "compressed_kv_cache"):
        elsewhere = torch.empty(args[name].shape, dtype=args[name].dtype, device="meta")
        with pytest.raises(ValueError, match=rf"^{name}: {name} must be on cpu, sparse_indices' device, got meta$"):
            convert_compressed_page_aligned_sparse_indices_to_hca_metadata(**{**args, name: elsewhere})


def test_flashinfer_tagged_conversion_names_a_seq_lens_of_the_wrong_length(rng):
    # FlashInfer: "seq_lens with 2 entries" for a query batch of another size (ValueError).
    t, conv = converter_args(rng)
    args = dict(query=to_torch(t.q, element="fp8").reshape(3, 2, 16, 512), swa_kv_cache=conv["swa_kv_cache"],
                workspace_buffer=torch.zeros(16, dtype=torch.uint8), sparse_indices=conv["sparse_indices"],
                compressed_kv_cache=conv["compressed_kv_cache"], sparse_topk_lens=conv["sparse_topk_lens"],
                seq_lens=conv["seq_lens"][:2].clone(), backend="cute-dsl",
                hca_sparse_indices_format="compressed-page-aligned")
    args["out"] = poisoned_like(args["query"])
    refused(trtllm_batch_decode_sparse_mla_dsv4, args, ValueError,
            r"^seq_lens: expected seq_lens with 3 entries, one per request \(B = T / q_len: T = 6 query tokens, "
            r"q_len = 2\), got shape \[2\]$")


# ---------------------------------------------------------------- FlashMLA


def flashmla(rng, **overrides):
    p = make_packed_problem(rng, tokens=4, q_len=2, four_d=True)
    return compat_args.flashmla(p, 2, 2, **overrides)


FLASHMLA = [
    # Python asserts: AssertionError.
    (dict(tile_scheduler_metadata=None), AssertionError, r"^tile_scheduler_metadata: expected a FlashMLASchedMeta"),
    (dict(tile_scheduler_metadata={"have_initialized": False}), AssertionError, r"^tile_scheduler_metadata: "),
    (dict(num_splits=torch.zeros(3, dtype=I32)), AssertionError, r"^num_splits: expected None with a FlashMLASched"),
    (dict(causal=True), AssertionError, r"^causal: expected False when indices are given"),
    (dict(is_fp8_kvcache=False), AssertionError, r"^is_fp8_kvcache: expected True when indices are given"),
    (dict(descale_q=torch.ones(1)), AssertionError, r"^descale_q and descale_k: expected both or neither"),
    (dict(descale_k=torch.ones(1)), AssertionError, r"^descale_q and descale_k: expected both or neither"),
    # C++ checks: RuntimeError.
    (dict(head_dim_v=576), RuntimeError, r"^head_dim_v: expected 512, got 576$"),
    (dict(extra_indices_in_kvcache=None), RuntimeError, r"^extra_indices_in_kvcache: expected a tensor with extra"),
    (dict(tile_scheduler_metadata=torch.zeros(4, 8, dtype=I32), num_splits=torch.zeros(2, dtype=I32)), RuntimeError,
     r"^num_splits: expected the int32 \[b \+ 1\] = \[3\] tensor of the older interface"),
    (dict(tile_scheduler_metadata=torch.zeros(4, 8, dtype=I32), num_splits=None), RuntimeError, r"^num_splits: "),
    (dict(tile_scheduler_metadata=torch.zeros(8), num_splits=torch.zeros(3, dtype=I32)), RuntimeError,
     r"^tile_scheduler_metadata: expected the int32 \[num_sm_parts, n\] tensor"),
    ("sinks", RuntimeError, r"^attn_sink: expected 16 elements"),
    ("lens", RuntimeError, r"^topk_length: expected int32, got int64$"),
    # FlashMLA serves these; this build does not.
    (dict(indices=None), NotImplementedError, r"^indices: None selects FlashMLA's dense decode"),
]


@pytest.mark.parametrize("change, exception, message", FLASHMLA)
def test_flashmla_refusals_have_flashmlas_types(rng, change, exception, message):
    args = flashmla(rng)
    if change == "sinks":
        change = dict(attn_sink=args["attn_sink"][:4].clone())
    elif change == "lens":
        change = dict(topk_length=args["topk_length"].long())
    with pytest.raises(exception, match=message) as caught:
        flash_mla_with_kvcache(**{**args, **change})
    if exception is not NotImplementedError:
        assert isinstance(caught.value, ValueError), "the package's bad-argument type too"


# ---------------------------------------------------------------- Step5 (seed 002 asserts)


@pytest.mark.parametrize(
    "change, message",
    [
        ("fp8 without scales", r"^k_scale: expected an array with an FP8 cache, got None$"),
        ("splits", r"^splits: expected 1\.\.32"),
        ("rows", r"^regions: expected 8 rows like query, got shape \[4, 5\]$"),
    ],
)
def test_step5_refusals_are_assertion_errors(rng, change, message):
    p = make_dsa_problem(rng, cache="fp8")
    args = compat_args.step5(p)
    if change == "fp8 without scales":
        args.update(k_scale=None)
    elif change == "splits":
        args.update(splits=33)
    else:
        args.update(regions=args["regions"][:4].clone())
    refused(sparse_decode_attention, args, AssertionError, message)


# ---------------------------------------------------------------- GPU: tensors on two devices


@pytest.mark.gpu
def test_gpu_tensors_on_two_devices_are_refused_by_name(rng):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    # FlashInfer: a CUDA cache with CPU indices (ValueError, naming the argument).
    args = trtllm_gen(rng)
    cuda = {name: value.cuda() if isinstance(value, torch.Tensor) and name != "sparse_indices" else value
            for name, value in args.items()}
    refused(trtllm_batch_decode_sparse_mla_dsv4, cuda, ValueError,
            r"^sparse_indices: expected an array on the same device as query \(cuda:\d+\), got cpu:0$")
    _, conv = converter_args(rng)
    with pytest.raises(ValueError, match=r"^swa_kv_cache: swa_kv_cache must be on cpu, sparse_indices' device"):
        convert_compressed_page_aligned_sparse_indices_to_hca_metadata(**{**conv,
                                                                           "swa_kv_cache": conv["swa_kv_cache"].cuda()})
    # FlashMLA: its C++ checks every tensor's device (RuntimeError).
    args = flashmla(rng)
    cuda = {name: value.cuda() if isinstance(value, torch.Tensor) and name != "indices" else value
            for name, value in args.items()}
    with pytest.raises(RuntimeError, match=r"^indices: expected an array on the same device as q \(cuda:\d+\)"):
        flash_mla_with_kvcache(**cuda)
