#!/usr/bin/env python3
"""PyTorch on the benchmark shapes S1-S10, written as a PyTorch user writes them, timed like
frank-shapes times its cases, and written as Google Benchmark JSON so that bench/report.py puts
them in the same table and plot. The names, FLOP and byte counts match frank-shapes.

Weights of S8, S9 and S10 are cold: each call uses the next of several copies whose total is at
least twice the L3 the system reports, as frank-shapes does. The mixture-of-experts weights are kept
expert-major ([X, n_out, n_in]), the layout PyTorch models use, so a call reads only the experts
it selects.

Usage: peers_torch.py --out=torch.json [--repetitions=5] [--min-time=0.2] [--filter=REGEX]
"""
import argparse
import json
import math
import os
import re
import statistics
import sys
import time


def l3_bytes():
    """The L3 size the system reports (bench/Machine.h reads the same file), else 32 MiB."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            text = f.read().strip()
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
    except (OSError, ValueError, IndexError):
        return 32 << 20


L3_BYTES = l3_bytes()


def cold_copies(nbytes):
    return max(2, math.ceil(2 * L3_BYTES / nbytes))


def shapes(torch):
    """Yields (id, description, flops, bytes, cold, make) with make() -> a call taking a copy index."""
    F = torch.nn.functional

    def rand(*shape, lo=-1.0, hi=1.0):
        return torch.rand(*shape) * (hi - lo) + lo

    for sid, rows in (("S1", 32), ("S1d", 1)):
        def make_rms(rows=rows):
            x, w = rand(rows, 4096), rand(4096, lo=0.5, hi=1.5)
            return lambda c: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        yield sid, f"rms_norm {rows}x4096", 4.0 * rows * 4096, 4.0 * (2 * rows * 4096 + 4096), False, make_rms

    n2 = 32 * 14336

    def make_swiglu():
        gate, up = rand(1, 32, 14336, lo=-4, hi=4), rand(1, 32, 14336, lo=-8, hi=8)
        return lambda c: gate * F.silu(up)
    yield "S2", "swiglu 1x32x14336", 6.0 * n2, 12.0 * n2, False, make_swiglu

    def make_embedding():
        table = rand(32000, 2048)
        ids = torch.randint(0, 32000, (1, 128))
        return lambda c: F.embedding(ids, table)
    yield ("S3", "embedding_lookup 32000x2048 ids 1x128", 0.0, 4.0 * 2 * 128 * 2048 + 8 * 128,
           False, make_embedding)

    n4 = 128 * 32 * 128

    def make_rope():
        x = rand(1, 128, 32, 128)
        pos = torch.arange(128).reshape(1, 128)
        theta = 10000.0 ** (-(2 * torch.arange(64, dtype=torch.float32) / 128))

        def call(c):
            angle = pos.to(torch.float32)[..., None] * theta  # [1, S, D/2], shared by heads
            cos, sin = angle.cos()[:, :, None, :], angle.sin()[:, :, None, :]
            pairs = x.reshape(1, 128, 32, 64, 2)
            x0, x1 = pairs[..., 0], pairs[..., 1]
            return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).reshape(x.shape)
        return call
    yield "S4", "rope 1x128x32x128", 3.0 * n4, 8.0 * n4 + 8 * 128, False, make_rope

    scale = 1.0 / math.sqrt(128.0)
    for sid, fn, causal, pairs in (("S5", "attention_gqa", False, 128.0 * 128),
                                   ("S5c", "attention_gqa_causal", True, 128.0 * 129 / 2)):
        def make_attention(causal=causal):
            q = rand(1, 128, 32, 128).transpose(1, 2)
            k = rand(1, 128, 8, 128).transpose(1, 2)
            v = rand(1, 128, 8, 128).transpose(1, 2)
            return lambda c: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                            scale=scale, enable_gqa=True)
        yield (sid, f"{fn} 1x128x32x128 kv 8 heads", 4.0 * 32 * 128 * pairs,
               4.0 * (2 * 128 * 32 * 128 + 2 * 128 * 8 * 128), False, make_attention)

    def make_decode():
        q = rand(1, 1, 32, 128).transpose(1, 2)
        k = rand(1, 512, 8, 128).transpose(1, 2)
        v = rand(1, 512, 8, 128).transpose(1, 2)
        return lambda c: F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
    yield ("S6", "attention_gqa_decode q 1x1x32x128 kv 1x512x8x128", 4.0 * 32 * 512 * 128,
           4.0 * (2 * 32 * 128 + 2 * 512 * 8 * 128), False, make_decode)

    for sid, m, cold in (("S7", 128, False), ("S8", 1, True)):
        def make_matmul(m=m, cold=cold):
            x = rand(m, 4096)
            copies = cold_copies(4096 * 4096 * 4) if cold else 1
            ws = [rand(4096, 4096, lo=-0.05, hi=0.05) for _ in range(copies)]
            return lambda c: x @ ws[c % copies]
        yield (sid, f"matmul {m}x4096x4096", 2.0 * m * 4096 * 4096,
               4.0 * (m * 4096 + 4096 * 4096 + m * 4096), cold, make_matmul)

    n_out, n_in, experts, used = 3584, 1024, 8, 2
    for tokens in (1, 32):
        seq = [3, 5] if tokens == 1 else [1, 6, 3, 0, 5, 2, 7, 4]
        ids = torch.tensor([seq[i % len(seq)] for i in range(used * tokens)],
                           dtype=torch.int64).reshape(used, tokens)
        selected = len(set(ids.flatten().tolist()))

        def make_mul_mat_id(tokens=tokens, ids=ids, selected=selected):
            # Copies of the experts a call reads, spanning twice the L3 as the other peers' do
            # (copies of all 8 experts, of which one token reads 2, fitted in the L3 twice).
            copies = cold_copies(n_out * n_in * selected * 4)
            ws = [{e: rand(n_out, n_in, lo=-0.03, hi=0.03) for e in ids.unique().tolist()}
                  for _ in range(copies)]
            x = rand(used, tokens, n_in)  # [k, T, n_in]
            flat_ids, flat_x = ids.flatten(), x.reshape(used * tokens, n_in)

            def call(c):
                w = ws[c % copies]
                out = torch.empty(used * tokens, n_out)
                for e in flat_ids.unique().tolist():
                    rows = (flat_ids == e).nonzero().squeeze(1)
                    out[rows] = F.linear(flat_x[rows], w[e])
                return out
            return call
        yield (f"S9t{tokens}", f"mul_mat_id T={tokens}", 2.0 * n_out * n_in * used * tokens,
               4.0 * (n_out * n_in * selected + n_in * used * tokens + n_out * used * tokens),
               True, make_mul_mat_id)

    e, f = 1024, 3584
    for tokens in (1, 32):
        def make_moe(tokens=tokens):
            # Enough copies that the experts a call reads at most span twice the L3.
            copies = cold_copies(3 * f * e * min(experts, used * tokens) * 4)
            up = [rand(experts, f, e, lo=-0.03, hi=0.03) for _ in range(copies)]
            gate = [rand(experts, f, e, lo=-0.03, hi=0.03) for _ in range(copies)]
            down = [rand(experts, e, f, lo=-0.02, hi=0.02) for _ in range(copies)]
            router = rand(experts, e)
            x = rand(tokens, e)

            def call(c):
                i = c % copies
                probs = torch.softmax(x @ router.t(), dim=-1)
                weights, chosen = torch.topk(probs, used, dim=-1)
                weights = weights / weights.sum(-1, keepdim=True)
                out = torch.zeros(tokens, e)
                for ex in chosen.unique().tolist():
                    tok, slot = (chosen == ex).nonzero(as_tuple=True)
                    h = x[tok]
                    act = F.linear(h, gate[i][ex]) * F.silu(F.linear(h, up[i][ex]))
                    out.index_add_(0, tok, F.linear(act, down[i][ex]) * weights[tok, slot, None])
                return out
            return call
        # Expert-major, a call reads only the experts its tokens chose (at most used * tokens).
        chosen_experts = min(experts, used * tokens)
        yield (f"S10t{tokens}", f"moe_ffn_block T={tokens}",
               2.0 * tokens * experts * e + 3 * 2.0 * f * e * used * tokens + 2.0 * tokens * used * e,
               4.0 * (3 * f * e * chosen_experts + experts * e + 2 * tokens * e), True, make_moe)


def time_call(call, min_time):
    """Seconds per call: calls until min_time has passed, after one warm-up call."""
    call(0)
    calls, start = 0, time.perf_counter()
    while True:
        call(calls + 1)
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / calls, calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.2)
    parser.add_argument("--filter", default="")
    parser.add_argument("--threads", type=int,
                        default=int(os.environ.get("FRANK_NUM_THREADS", os.cpu_count() or 1)))
    args = parser.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"peers_torch.py: PyTorch is not installed ({e}); skipped", file=sys.stderr)
        return 0
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    benchmarks = []
    with torch.inference_mode():
        for sid, desc, flops, nbytes, cold, make in shapes(torch):
            name = f"{sid} {desc}/torch"
            if args.filter and not re.search(args.filter, name):
                continue
            call = make()
            runs = [time_call(call, args.min_time) for _ in range(args.repetitions)]
            median = statistics.median(seconds for seconds, _ in runs)
            print(f"{name}: {median * 1e6:.1f} us", file=sys.stderr)
            benchmarks.append({
                "name": f"{name}_median", "run_name": name, "run_type": "aggregate",
                "aggregate_name": "median", "repetitions": args.repetitions,
                "iterations": runs[0][1], "real_time": median * 1e6, "time_unit": "us",
                "flops": flops, "bytes": nbytes, "cold": 1 if cold else 0,
            })
            del call
    context = {"torch": torch.__version__, "threads": str(args.threads)}
    with open(args.out, "w") as out:
        json.dump({"context": context, "benchmarks": benchmarks}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
