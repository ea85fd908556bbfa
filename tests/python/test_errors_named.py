"""Refusals name what the caller passed: the package function's or the drop-in's argument, never a binding
parameter or a C++ struct field, with the expected value; a refused call writes nothing."""

import numpy as np
import pytest

import sparse_decode
from sparse_decode import _errors, _names  # noqa: F401  (the entry tables)
from dsv4_reference import make_problem
from hca_dsa_reference import dsa_kwargs, hca_kwargs, make_canonical_table, make_dsa_problem, make_hca_problem
from helpers import numpy_kwargs
from packed_reference import make_packed_problem

# Names a caller never wrote: the binding's own parameters and the C++ structs' fields.
INTERNAL = ("bmm1_scale_array", "bmm2_scale_array", "hnd", "size_only", "incompatible function arguments",
            ".data:", ".pool", "swa.", "extra.", "_stride:", "num_requests", "num_tokens")


def refused(call, exception, message):
    """call() raises `exception` matching `message`, naming no internal parameter or field."""
    with pytest.raises(exception, match=message) as caught:
        call()
    text = str(caught.value)
    assert not any(name in text for name in INTERNAL), f"an internal name in {text!r}"
    return caught.value


# ---------------------------------------------------------------- the tables


@pytest.mark.parametrize(
    "entry, field, caller",
    [
        ("dsv4_decode", "compressed_kv.data: expected a non-null pointer (required when width > 128)",
         "compressed_kv: expected an array (required when width > 128), got None"),
        ("dsv4_decode", "swa_kv.page_stride: x", "swa_kv (page stride): x"),
        ("dsv4_decode", "q_token_stride: x", "q (token stride): x"),
        ("dsv4_decode", "indices_stride: x", "indices (row stride): x"),
        ("dsv4_decode", "width: x", "indices (width): x"),
        ("dsv4_decode", "num_requests: x", "seq_lens: x"),
        ("dsv4_decode", "bmm1_scale.device: x", "bmm1_scale: x"),
        ("dsv4_decode", "workspace_bytes: x", "workspace: x"),
        ("dsv4_decode_packed", "extra.pool.page_stride: x", "extra_cache (page stride): x"),
        ("dsv4_decode_packed", "swa.indices_stride: x", "swa_indices (row stride): x"),
        ("dsv4_decode_packed", "extra.lens: expected a non-null pointer", "extra_lens: expected an array, got None"),
        ("dsv4_decode_hca", "max_pages: x", "block_table (width): x"),
        ("dsv4_decode_hca", "swa_rows_stride: x", "swa_rows (row stride): x"),
        ("dsv4_decode_hca", "num_requests: x", "hca_seq_lens: x"),
        ("convert_page_aligned_indices", "num_requests: x", "seq_lens: x"),
        ("dsa_decode", "cache_group_stride: x", "cache (group stride): x"),
        ("dsa_decode", "num_groups: x", "cache (groups): x"),
        ("flashinfer.trtllm-gen", "swa_kv (page stride): x", "swa_kv_cache (page stride): x"),
        ("flashinfer.trtllm-gen", "lens: expected 6 elements", "sparse_topk_lens: expected 6 elements"),
        ("flashinfer.trtllm-gen", "out: expected 6 tokens like q", "out: expected 6 tokens like query"),
        ("flashinfer.sparse", "extra_lens: x", "extra_sparse_topk_lens: x"),
        ("flashinfer.sparse", "softmax_scale: x", "bmm1_scale: x"),
        ("flashinfer.cute-dsl", "block_table (width): x", "hca_compressed_block_tables (width): x"),
        ("flashinfer.convert", "convert_page_aligned_indices: x", "convert_compressed_page_aligned_sparse_indices_"
                                                                  "to_hca_metadata: x"),
        ("flashmla", "swa_cache (page stride): x", "k_cache (page stride): x"),
        ("flashmla", "sinks: x", "attn_sink: x"),
        ("step5", "out: expected 8 rows like q", "output: expected 8 rows like query"),
        ("dsv4_decode", "cum_seq_lens_q: expected null with a request stride (q_request_stride = 8)",
         "cum_seq_lens_q: expected null with a request stride (q (request stride) = 8)"),
        ("dsv4_decode_packed", "swa.indices_request_stride: x", "swa_indices (request stride): x"),
        ("dsv4_decode_packed", "extra.lens_token_stride: x", "extra_lens (token stride): x"),
        ("flashinfer.trtllm-gen", "out: x (q (request stride) = 8)", "out: x (query (request stride) = 8)"),
        ("flashmla", "swa_indices (request stride): x", "indices (request stride): x"),
        ("convert_page_aligned_indices", "lens[3] = 129: expected 128", "lens[3] = 129: expected 128"),
        ("flashinfer.convert", "lens[3] = 129: expected 128", "sparse_topk_lens[3] = 129: expected 128"),
        ("flashinfer.convert", "seq_lens[1] = 1: expected >= q_len = 2", "seq_lens[1] = 1: expected >= q_len = 2"),
        ("dsv4_decode", "internal error: x", "internal error: x"),  # not a name: as it is
    ],
)
def test_each_entry_renames_what_it_knows(entry, field, caller):
    assert _errors._ENTRIES[entry].message(field) == caller


def test_drop_in_entries_take_their_upstreams_exception_types():
    with pytest.raises(RuntimeError, match=r"^k_cache: x$"), _errors.entry("flashmla"):
        raise ValueError("swa_cache: x")
    with pytest.raises(AssertionError, match=r"^query: x$"), _errors.entry("step5"):
        raise ValueError("q: x")
    with pytest.raises(TypeError, match=r"^query: x$"), _errors.entry("flashinfer.trtllm-gen"):
        raise TypeError("q: x")
    with pytest.raises(NotImplementedError, match=r"^sparse_indices \(width\): x$"), _errors.entry("flashinfer.sparse"):
        raise NotImplementedError("swa_indices (width): x")
    with pytest.raises(ValueError) as caught, _errors.entry("flashmla"):
        raise ValueError("q: x")
    assert isinstance(caught.value, RuntimeError), "a ValueError too, as the package raises for bad arguments"


# ---------------------------------------------------------------- package functions (NumPy, CPU)


@pytest.fixture
def plain(rng):
    return make_problem(rng, tokens=3, width=256)


def decode(p, **overrides):
    kwargs = {**numpy_kwargs(p), "out": p.out_like(), **overrides}
    return lambda: sparse_decode.dsv4_decode(**kwargs)


@pytest.mark.parametrize(
    "name, value, exception, message",
    [
        ("q", None, TypeError, r"^q: expected an array \(any DLPack array: torch, NumPy, CuPy, \.\.\.\), got None$"),
        ("indices", [[0, 1]], TypeError, r"^indices: expected an array .*, got list$"),
        ("lens", "3", TypeError, r"^lens: expected an array .*, got str$"),
        ("out", "read-only", TypeError, r"^out: expected a writable array, got a read-only numpy\.ndarray$"),
        ("bmm1_scale", [0.1], TypeError, r"^bmm1_scale: expected a float or a 1-element float32 array, got list$"),
        ("q_len", 2.0, TypeError, r"^q_len: expected an int, got float$"),
        ("q_len", 2**40, ValueError, r"^q_len: expected an int in \[-2147483648, 2147483647\], got 1099511627776$"),
        ("stream", "0", TypeError, r"^stream: expected a CUDA stream handle as an int, got str$"),
        ("indices", "reversed", ValueError,
         r"^indices: expected non-negative strides, got strides \[-256, 1\] for shape \[3, 256\] \(a reversed view"),
    ],
)
def test_package_function_arguments_are_named(plain, name, value, exception, message):
    if value == "read-only":
        value = plain.out_like()
        value.flags.writeable = False
    elif value == "reversed":
        value = plain.indices[::-1]
    out = plain.out_like()
    refused(decode(plain, **{name: value}, **({} if name == "out" else {"out": out})), exception, message)
    assert np.all(out == 0x7FC0), "nothing is written when a call is refused"


def test_the_library_fields_come_back_as_arguments(plain, rng):
    refused(decode(plain, compressed_kv=None), ValueError,
            r"^compressed_kv: expected an array \(required when width > 128\), got None$")
    padded = make_problem(rng, row_pad=8)  # 520-byte FP8 rows: not a multiple of 16 bytes
    refused(decode(padded), ValueError, r"^swa_kv \((row|page) stride\): expected a multiple of 16 bytes")
    p = make_packed_problem(rng, tokens=3)
    kwargs = {**p.kwargs(), "out": p.out_like(), "extra_lens": None}
    refused(lambda: sparse_decode.dsv4_decode_packed(**kwargs), ValueError,
            r"^extra_lens: expected an array \(required with the extra segment\), got None$")


@pytest.mark.parametrize(
    "overrides, message",
    [
        # Three tokens do not split evenly over two requests.
        (dict(seq_lens=np.array([9, 9], np.int32)),
         r"^seq_lens: expected B elements with B dividing the T = 3 query tokens .*, got shape \[2\]$"),
        (dict(seq_lens=np.array([9, 9], np.int32), q_len=3),
         r"^seq_lens: expected B = T / q_len = 1 elements \(T = 3 query tokens, q_len = 3\), got shape \[2\]$"),
        (dict(seq_lens=np.array([9, 9], np.int32), cum_seq_lens_q=np.array([0, 1, 2, 3], np.int32), max_q_len=1),
         r"^seq_lens: expected B = 3 elements, one per request of cum_seq_lens_q \(B \+ 1 = 4 offsets\), got shape"),
    ],
)
def test_a_seq_lens_of_the_wrong_length_is_named(plain, overrides, message):
    refused(decode(plain, **overrides), ValueError, message)


def test_a_seq_lens_of_the_wrong_length_for_a_four_dim_query(rng):
    p = make_problem(rng, tokens=6, seq_lens="uniform", q_len=2, q4d=True)
    kwargs = dict(q_len=None, seq_lens=p.seq_lens[:2])
    refused(decode(p, **kwargs), ValueError, r"^seq_lens: expected B = T / q_len = 3 elements \(T = 6 query tokens, "
                                             r"q_len = 2 from the \[B, q_len, \.\.\.\] query\), got shape \[2\]$")


@pytest.mark.parametrize("offsets", [[0, 7, 2], [-1, 2, 3], [0, 2, 9], [0, 0, 3]])
def test_inconsistent_cum_seq_lens_q_is_refused_on_the_cpu(rng, offsets):
    # [0, 7, 2] decreases, [-1, 2, 3] starts below 0, [0, 2, 9] ends past T = 3 tokens,
    # [0, 0, 3] has a request of 3 tokens with max_q_len = 2.
    p = make_problem(rng, tokens=3, width=256)
    overrides = dict(seq_lens=np.array([40, 50], np.int32), cum_seq_lens_q=np.array(offsets, np.int32), max_q_len=2)
    got = ", ".join(map(str, offsets))
    refused(decode(p, **overrides), ValueError, r"^cum_seq_lens_q: expected offsets >= 0, non-decreasing, each step "
                                                rf"<= max_q_len = 2, the last <= T = 3, got \[{got}\]$")


def test_hca_converter_and_dsa_name_their_arguments(rng):
    p = make_hca_problem(rng, tokens=6, q_len=2)
    kwargs = {**hca_kwargs(p), "out": np.full(p.q.shape, 0x7FC0, np.uint16)}
    refused(lambda: sparse_decode.dsv4_decode_hca(**{**kwargs, "block_table": None}), TypeError,
            r"^block_table: expected an array .*, got None$")
    four = np.resize(p.hca_seq_lens, 4)  # 6 tokens do not split evenly over 4 requests
    refused(lambda: sparse_decode.dsv4_decode_hca(**{**kwargs, "q_len": None, "hca_seq_lens": four}), ValueError,
            r"^hca_seq_lens: expected B elements with B dividing the T = 6 query tokens")
    t = make_canonical_table(rng)
    refused(lambda: sparse_decode.convert_page_aligned_indices(t.indices, None, t.seq_lens, q_len=2, page_size=4),
            TypeError, r"^lens: expected an array .*, got None$")
    refused(lambda: sparse_decode.convert_page_aligned_indices(t.indices, t.lens, t.seq_lens[:2], q_len=2,
                                                               page_size=4),
            ValueError, r"^seq_lens: expected B = T / q_len = 3 elements")
    d = make_dsa_problem(rng)
    out = np.full(d.q.shape, 0x7FC0, np.uint16)
    out.flags.writeable = False
    refused(lambda: sparse_decode.dsa_decode(**dsa_kwargs(d), out=out), TypeError,
            r"^out: expected a writable array, got a read-only numpy\.ndarray$")
    refused(lambda: sparse_decode.dsa_decode(**{**dsa_kwargs(d), "query_len": "2"}, out=out), TypeError,
            r"^query_len: expected an int, got str$")


# ---------------------------------------------------------------- drop-ins (torch, CPU)


def test_drop_ins_name_their_signatures_arguments(rng):
    torch = pytest.importorskip("torch")
    import compat_args
    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4
    from sparse_decode.flashmla_compat import flash_mla_with_kvcache
    from sparse_decode.step5_compat import sparse_decode_attention

    p = make_problem(rng, layout="HND", tokens=6)
    fi = compat_args.flashinfer_trtllm_gen(p)
    call = lambda **change: lambda: trtllm_batch_decode_sparse_mla_dsv4(**{**fi, **change})  # noqa: E731
    refused(call(query=None), TypeError, r"^query: expected a torch\.Tensor, got NoneType$")
    refused(call(sparse_topk_lens=[3] * 6), TypeError,
            r"^sparse_topk_lens: expected a torch\.Tensor or None, got list$")
    refused(call(bmm1_scale="0.1"), TypeError, r"^bmm1_scale: expected a float or a float32 tensor, got str$")
    refused(call(max_q_len="4"), TypeError, r"^max_q_len: expected an int or None, got str$")
    refused(call(compressed_kv_cache=None), ValueError,
            r"^compressed_kv_cache: expected an array \(required when width > 128\), got None$")
    refused(call(sparse_topk_lens=fi["sparse_topk_lens"][:4].clone()), ValueError,
            r"^sparse_topk_lens: expected 6 elements, got shape \[4\]$")
    refused(call(sparse_indices=fi["sparse_indices"][:, :130].contiguous()), ValueError,
            r"^sparse_indices \(width\): expected a multiple of 4 in \[128, 16512\], got 130$")

    packed = make_packed_problem(rng, tokens=4, q_len=2, four_d=True)
    mla = compat_args.flashmla(packed, 2, 2)
    refused(lambda: flash_mla_with_kvcache(**{**mla, "q": None}), TypeError, r"^q: expected a torch\.Tensor")
    refused(lambda: flash_mla_with_kvcache(**{**mla, "attn_sink": [0.0] * 16}), TypeError,
            r"^attn_sink: expected a torch\.Tensor or None, got list$")
    refused(lambda: flash_mla_with_kvcache(**{**mla, "extra_topk_length": mla["extra_topk_length"].float()}),
            RuntimeError, r"^extra_topk_length: expected int32, got float32$")

    d = make_dsa_problem(rng)
    step = compat_args.step5(d)
    refused(lambda: sparse_decode_attention(**{**step, "output": None}), TypeError,
            r"^output: expected a torch\.Tensor, got NoneType$")
    refused(lambda: sparse_decode_attention(**{**step, "splits": "2"}), TypeError,
            r"^splits: expected an int, got str$")
    refused(lambda: sparse_decode_attention(**{**step, "output": step["output"][:, :, :96]}), AssertionError,
            r"^output: expected shape \[T, 4, 192\]")
    assert torch.isnan(step["output"].float()).all(), "nothing is written when a call is refused"


def test_compiled_drop_in_names_the_same_arguments(rng):
    # The renaming runs inside the custom op, so a compiled call's refusal reads as an eager one's.
    torch = pytest.importorskip("torch")
    import compat_args
    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4

    p = make_problem(rng, layout="HND", tokens=6)
    args = compat_args.flashinfer_trtllm_gen(p)
    args["sparse_topk_lens"] = args["sparse_topk_lens"][:4].clone()
    torch._dynamo.reset()
    compiled = torch.compile(trtllm_batch_decode_sparse_mla_dsv4, backend="aot_eager", fullgraph=True)
    refused(lambda: compiled(**args), ValueError, r"^sparse_topk_lens: expected 6 elements, got shape \[4\]$")


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_gpu_refusals_name_the_arguments(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    import compat_args
    from helpers import to_torch, torch_kwargs
    from sparse_decode.flashinfer_compat import trtllm_batch_decode_sparse_mla_dsv4

    p = make_problem(rng, tokens=6, seq_lens="uniform", q_len=2, q4d=True)
    k = torch_kwargs(p, "cuda")
    out = torch.full(p.q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    run = lambda **change: lambda: sparse_decode.dsv4_decode(**{**k, "out": out, "q_len": None, **change})  # noqa: E731
    refused(run(seq_lens=to_torch(p.seq_lens[:2], "cuda")), ValueError, r"^seq_lens: expected B = T / q_len = 3 ")
    refused(run(lens=[1] * 6), TypeError, r"^lens: expected an array .*, got list$")
    refused(run(compressed_kv=None), ValueError, r"^compressed_kv: expected an array \(required when width > 128\)")
    refused(run(lens=k["lens"].cpu()), ValueError, r"^lens: expected an array on the same device as q \(cuda:\d+\), "
                                                   r"got cpu:0$")
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all(), "nothing is written when a call is refused"
    q = make_problem(rng, layout="HND", tokens=6)
    fi = compat_args.flashinfer_trtllm_gen(q, "cuda")
    refused(lambda: trtllm_batch_decode_sparse_mla_dsv4(**{**fi, "sparse_topk_lens": fi["sparse_topk_lens"][:4]}),
            ValueError, r"^sparse_topk_lens: expected 6 elements, got shape \[4\]$")
