"""Framework conveniences before arrays cross DLPack into the extension.

The extension reads any DLPack array. What it cannot learn from DLPack is
handled here, per framework, without importing a framework the caller did
not use:
- FP8 and BF16 arrays that DLPack cannot carry (NumPy with ml_dtypes) or may
  not carry (torch float8) are passed as integer views of the same bytes;
- the stream of a CUDA call: torch's or CuPy's current stream of the array's
  device unless one is given;
- the current device: torch refuses to export a tensor of another device, and
  the library launches on the current one.
"""

from __future__ import annotations

import contextlib
import numbers
from typing import Any, Optional, Tuple


def _framework(array: Any) -> str:
    return type(array).__module__.split(".", 1)[0]


def plain(array: Any, name: str) -> Any:
    """The array itself, or an integer view of its bytes where DLPack needs one."""
    if array is None:
        return None
    framework = _framework(array)
    if framework == "torch":
        import torch

        if array.requires_grad:  # torch refuses to export these; nothing here is differentiated
            array = array.detach()
        if array.dtype == torch.float8_e4m3fn:
            return array.view(torch.uint8)
        dtype_name = str(array.dtype).replace("torch.", "")
    else:
        dtype_name = getattr(getattr(array, "dtype", None), "name", "")
    if dtype_name.startswith("float8") and dtype_name != "float8_e4m3fn":
        raise ValueError(f"{name}: expected FP8 E4M3 (float8_e4m3fn), got {dtype_name}")
    # NumPy cannot export ml_dtypes' types through DLPack: pass their bytes.
    if framework == "numpy" and dtype_name == "float8_e4m3fn":
        return array.view("uint8")
    if framework == "numpy" and dtype_name == "bfloat16":
        return array.view("uint16")
    return array


def scale(value: Any, name: str) -> Tuple[float, Optional[Any]]:
    """(value, None) for a number; (1.0, array) for a 1-element float32 array read at run time."""
    if isinstance(value, numbers.Real):
        return float(value), None
    if not hasattr(value, "shape"):
        raise TypeError(f"{name}: expected a float or a 1-element float32 array, got {type(value).__name__}")
    return 1.0, plain(value, name)


def launch_context(q: Any, stream: Optional[int]):
    """(context manager, stream int) for a call whose arrays live where q does."""
    framework = _framework(q)
    if framework == "torch" and q.is_cuda:
        import torch

        device = q.device
        if stream is None:
            stream = torch.cuda.current_stream(device).cuda_stream
        same = device.index is None or device.index == torch.cuda.current_device()
        return (contextlib.nullcontext() if same else torch.cuda.device(device)), stream
    if framework == "cupy":
        import cupy

        with q.device:
            current = cupy.cuda.get_current_stream().ptr
        return q.device, current if stream is None else stream
    # CPU arrays ignore the stream; other CUDA frameworks: the caller's or the legacy default.
    return contextlib.nullcontext(), 0 if stream is None else stream


def cuda_scratch(like: Any, nbytes: int, stream: int) -> Optional[Any]:
    """An uninitialized uint8 [nbytes] array on like's CUDA device, or None (other arrays, or a CuPy stream
    being captured into a graph). It is allocated on `stream`, the stream the kernels run on, so that the
    caching allocator reuses it only after them. torch under torch.cuda.graph takes it from the graph's
    private pool; CuPy's pool is not graph-aware, so nothing is allocated while a CuPy stream is captured."""
    framework = _framework(like)
    if framework == "torch" and like.is_cuda:
        import torch

        on_current = stream == torch.cuda.current_stream(like.device).cuda_stream
        with contextlib.nullcontext() if on_current else torch.cuda.stream(
            torch.cuda.ExternalStream(stream, device=like.device)
        ):
            return torch.empty(nbytes, dtype=torch.uint8, device=like.device)
    if framework == "cupy":
        import cupy

        with like.device:
            external = cupy.cuda.ExternalStream(stream)
            if external.is_capturing():
                return None
            with external:
                return cupy.empty(nbytes, dtype=cupy.uint8)
    return None


def empty_int32(like: Any, shape: Tuple[int, ...]) -> Any:
    """A zeroed int32 array of `shape` from like's framework and device (the converter's outputs)."""
    framework = _framework(like)
    if framework == "torch":
        import torch

        return torch.zeros(shape, dtype=torch.int32, device=like.device)
    if framework == "cupy":
        import cupy

        with like.device:
            return cupy.zeros(shape, dtype=cupy.int32)
    if framework == "numpy":
        import numpy

        return numpy.zeros(shape, dtype=numpy.int32)
    raise TypeError(f"cannot allocate outputs like a {type(like).__name__}: pass swa_rows, swa_lens, block_table "
                    "and hca_seq_lens")


def on_host(array: Any) -> bool:
    """Whether `array` lives in host memory (NumPy, a CPU torch tensor, anything with no CUDA device)."""
    framework = _framework(array)
    if framework == "torch":
        return not array.is_cuda
    if framework == "cupy":
        return False
    return not hasattr(array, "__cuda_array_interface__")


def host_values(array: Any) -> Any:
    """The elements of a host array as a flat sequence of Python numbers."""
    if _framework(array) == "torch":
        return array.reshape(-1).tolist()
    import numpy

    return numpy.asarray(array).reshape(-1).tolist()
