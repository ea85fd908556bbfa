#!/usr/bin/env python3
"""How much do P.V weights rounded to BF16 cost in accuracy, per 64-dim block?

    diagnostics/scripts/weight_rounding.py [--blocks 20000] [--seed 1]

Simulates one output block (a head's 64 dims of one scale tile) the way the
packed 64-head form computes it: scores drawn N(0, sigma^2), P = exp2 of the
scores less their maximum in FP32, V exact in BF16 (as in the key tile),
P.V accumulated in FP32, divided by the softmax sum, rounded to a BF16
output. The weights enter P.V as

    hi+lo       BF16 hi + BF16 lo (the form's weights)
    single      one BF16, the sum from the FP32 P
    consistent  one BF16, the sum from the same BF16 weights

and each block's relative L2 error against fp64 is reported as the mean,
the 99.9th percentile and the largest over the blocks. The tests bound it
by 3e-3 for every block (tests/support/dsv4_packed_checks.h). Needs numpy.
"""
import argparse

import numpy as np


def bf16(x):
    """Round FP32 to BF16 (nearest, ties to even), returned as FP32."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def block_errors(rng, sigma, keys, blocks, dims=64, batch=200):
    errors = {name: [] for name in ("hi+lo", "single", "consistent")}
    for _ in range(blocks // batch):
        scores = rng.normal(0.0, sigma, (batch, keys))
        values = bf16(rng.normal(0.0, 1.0, (batch, keys, dims))).astype(np.float64)
        top = scores.max(1, keepdims=True)
        exact = np.exp(scores - top)
        want = (exact[..., None] * values).sum(1) / exact.sum(1)[:, None]
        p = np.exp2(((scores - top) * np.log2(np.e)).astype(np.float32))
        hi = bf16(p)
        lo = bf16(p - hi)
        for name in errors:
            weights = hi.astype(np.float64) + (lo if name == "hi+lo" else 0.0)
            acc = np.einsum("bn,bnd->bd", weights.astype(np.float32), values.astype(np.float32))
            total = hi.sum(1, dtype=np.float32) if name == "consistent" else p.sum(1, dtype=np.float32)
            got = bf16(acc / total[:, None]).astype(np.float64)
            errors[name].append(np.sqrt(((got - want) ** 2).sum(1) / (want**2).sum(1)))
    return {name: np.concatenate(e) for name, e in errors.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{args.blocks} blocks a row; relative L2 a block: mean / 99.9th percentile / largest")
    for sigma in (1, 2, 3, 5):
        for keys in (64, 640):
            errors = block_errors(rng, sigma, keys, args.blocks)
            cells = "  ".join(
                f"{name} {e.mean():.2e} / {np.quantile(e, 0.999):.2e} / {e.max():.2e}" for name, e in errors.items())
            print(f"sigma {sigma}, {keys:3d} keys: {cells}")


if __name__ == "__main__":
    main()
