"""One DeepSeek-V4 decode step on two GPUs (decode context parallelism) against one GPU.

    PYTHONPATH=build-python/site python3 bench/merge_two_gpu.py --csv two_gpu.csv
    (or torchrun --nproc-per-node 2 bench/merge_two_gpu.py ...; without torchrun's variables
    the script spawns its two processes itself)

The method of DESIGN.md "How performance is measured": L layers in one CUDA graph, each with its own
indices into FP8 pools of 2 GiB on every GPU, the L2 flushed before every replay (untimed), the median of
the replays divided by L. 16 heads, every column active.

- one GPU: dsv4_decode over all W columns of a token (W = 128 window + top-k).
- two GPUs: the KV rows are sharded by position parity, as decode context parallelism shards a
  sequence: rank r holds the window rows and the compressed rows whose position is r mod 2. Each rank
  runs dsv4_decode over its own columns (64 window columns, then its top-k columns, -1 after them:
  W' = 128 + about half the top-k) into its StateExchange send rows, then StateExchange.merge: one
  NCCL all-gather of every rank's (out, lse) and merge_states. Timed on both ranks; the slower rank's
  median is the step.
- the parts, each in a graph of its own: the half decode, the all-gather alone, the merge alone.

Layer 0 of every shape is checked: the two-GPU result against the one-GPU call (relative L2, both
BF16, each within 3e-3 of the fp64 reference by the tests).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import sparse_decode
from sparse_decode.distributed import StateExchange

HEADS, DIM, WINDOW = 16, 512, 128
POOL_BYTES = {"swa": 512 << 20, "compressed": 1536 << 20}
FLUSH_BYTES = 512 << 20


def parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1,6,12,48,128,512,2048")
    parser.add_argument("--widths", default="640,2176")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--replays", type=int, default=30)
    parser.add_argument("--pdl", action="store_true")
    parser.add_argument("--csv", default="")
    return parser.parse_args()


def fp8_bytes(count, generator, device):
    """Finite E4M3 bytes (|x| <= 7.5: exponents 0..9), as the bench's problems draw them."""
    sign = torch.randint(0, 2, (count,), generator=generator, device=device, dtype=torch.uint8) << 7
    exponent = torch.randint(0, 10, (count,), generator=generator, device=device, dtype=torch.uint8) << 3
    mantissa = torch.randint(0, 8, (count,), generator=generator, device=device, dtype=torch.uint8)
    return (sign | exponent | mantissa).view(torch.float8_e4m3fn)


class Layer:
    """One layer's indices: the full table [T, W] and this rank's table [T, W'] (positions of parity rank)."""

    def __init__(self, tokens, width, rank, world, swa_rows, compressed_rows, generator, device):
        topk = width - WINDOW
        base = torch.randint(0, swa_rows - WINDOW - tokens, (1,), generator=generator, device=device)
        window = base + torch.arange(tokens, device=device)[:, None] + torch.arange(WINDOW, device=device)[None, :]
        compressed = torch.randint(0, compressed_rows, (tokens, topk), generator=generator, device=device)
        self.full = torch.cat([window, compressed], dim=1).to(torch.int32).contiguous()
        # This rank's window rows (64 of 128) and compressed rows (parity r), then -1.
        mine_window = torch.where(window % world == rank, window, -1)
        mine_window = torch.sort(mine_window, dim=1, descending=True).values  # own rows first, -1 after
        mine_compressed = torch.where(compressed % world == rank, compressed, -1)
        mine_compressed = torch.sort(mine_compressed, dim=1, descending=True).values
        keep = int((mine_compressed >= 0).sum(dim=1).max().item())
        own_width = WINDOW + -(-keep // 4) * 4
        own = torch.cat([mine_window, mine_compressed[:, : own_width - WINDOW]], dim=1)
        self.own = own.to(torch.int32).contiguous()


def median_us(graph, flush, replays, warmup=3):
    for _ in range(warmup):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for replay in range(replays):
        flush.fill_(replay & 0xFF)
        torch.cuda.synchronize()
        dist.barrier()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def capture(step):
    step()  # eager first: workspaces, communicators
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def slowest(value):
    """The largest of every rank's value (every rank gets it)."""
    t = torch.tensor([value], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def run_shape(args, rank, world, tokens, width, pools, flush, generator):
    device = torch.device("cuda", rank)
    swa, compressed = pools
    scale = 1.0 / DIM**0.5
    layers = [Layer(tokens, width, rank, world, swa.shape[0], compressed.shape[0], generator, device)
              for _ in range(args.layers)]
    q = [fp8_bytes(tokens * HEADS * DIM, generator, device).view(tokens, HEADS, DIM) for _ in range(args.layers)]
    workspace = torch.empty(64 << 20, dtype=torch.uint8, device=device)
    exchange = StateExchange(tokens, HEADS, device=device)
    part_out, part_lse = exchange.partial(tokens)
    single = [torch.empty(tokens, HEADS, DIM, dtype=torch.bfloat16, device=device) for _ in range(args.layers)]
    merged = [torch.empty(tokens, HEADS, DIM, dtype=torch.bfloat16, device=device) for _ in range(args.layers)]

    def decode(i, indices, out, lse=None):
        sparse_decode.dsv4_decode(q[i], swa, compressed, indices, out, lse=lse, bmm1_scale=scale,
                                  enable_pdl=args.pdl, workspace=workspace)

    def one_gpu():
        for i, layer in enumerate(layers):
            decode(i, layer.full, single[i])

    def two_gpus():
        for i, layer in enumerate(layers):
            decode(i, layer.own, part_out, part_lse)
            exchange.merge(merged[i], enable_pdl=args.pdl)

    def half_decode():
        for i, layer in enumerate(layers):
            decode(i, layer.own, part_out, part_lse)

    def all_gather():
        for _ in layers:
            exchange.all_gather(tokens)

    def merge_only():
        partials, lses = exchange.gathered(tokens)
        for i in range(len(layers)):
            sparse_decode.merge_states(partials, lses, merged[i], enable_pdl=args.pdl)

    times = {}
    for name, step in (("one_gpu", one_gpu), ("two_gpus", two_gpus), ("half_decode", half_decode),
                       ("all_gather", all_gather), ("merge", merge_only)):
        times[name] = slowest(median_us(capture(step), flush, args.replays) / args.layers)

    two_gpus()
    one_gpu()
    torch.cuda.synchronize()
    diff = (merged[0].float() - single[0].float()).norm() / single[0].float().norm().clamp_min(1e-30)
    return times, float(diff), layers[0].own.shape[1]


def worker(rank, world, args, port):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        generator = torch.Generator(device="cuda").manual_seed(1234 + rank)
        pools = tuple(fp8_bytes(POOL_BYTES[name], generator, "cuda").view(-1, DIM) for name in ("swa", "compressed"))
        flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        rows = []
        header = ("tokens,width,own_width,layers,one_gpu_us,two_gpu_us,speedup,half_decode_us,all_gather_us,merge_us,"
                  "rel_diff")
        if rank == 0:
            print(f"{torch.cuda.get_device_name()} x {world}, NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}, "
                  f"16 heads, FP8, median of {args.replays} replays (per layer = replay / L)")
            print(header.replace(",", "  "))
        for width in [int(w) for w in args.widths.split(",")]:
            for tokens in [int(t) for t in args.tokens.split(",")]:
                times, diff, own_width = run_shape(args, rank, world, tokens, width, pools, flush, generator)
                row = (f"{tokens},{width},{own_width},{args.layers},{times['one_gpu']:.2f},{times['two_gpus']:.2f},"
                       f"{times['one_gpu'] / times['two_gpus']:.2f},{times['half_decode']:.2f},"
                       f"{times['all_gather']:.2f},{times['merge']:.2f},{diff:.1e}")
                rows.append(row)
                if rank == 0:
                    print(row.replace(",", "  "), flush=True)
        if rank == 0 and args.csv:
            with open(args.csv, "w") as f:
                f.write(header + "\n" + "\n".join(rows) + "\n")
    finally:
        dist.destroy_process_group()


def main():
    args = parse()
    if "RANK" in os.environ:  # torchrun
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, 0)
        return
    if torch.cuda.device_count() < 2:
        sys.exit("merge_two_gpu.py: needs two CUDA devices")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(2, args, port), nprocs=2, join=True)


if __name__ == "__main__":
    main()
