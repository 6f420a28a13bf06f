#!/usr/bin/env python3
"""IREE on the benchmark shapes S1-S10: each component compiled by iree-compile for this CPU,
run by iree.runtime on the shapes frank-shapes uses, checked against NumPy, timed like
peers_torch.py, and written as Google Benchmark JSON so that bench/report.py puts it in the
same table and plot. The names, FLOP and byte counts match frank-shapes.

IREE runs the components themselves (components/*/*.mlir, their dynamic shapes unchanged), so
it reads the same layouts as frank-jit: mul_mat_id and the MoE block read every expert's
weights, as frank-shapes counts them. moe_ffn_block calls mul_mat_id and swiglu; iree-link
puts them into its module before iree-compile. Weights of S8, S9 and S10 are cold, rotated as
in peers_torch.py. Arguments are copied to the device before the timing; each call waits for
its result (the functions have IREE's synchronous ABI).

`<id> <shape>/iree-compile` is iree-link (where needed) plus iree-compile, both as processes,
the median of --compile-repetitions runs. IREE compiles a component once for every shape, so
shapes of one component share the measurement.

Each shape runs in a process of its own. A component that IREE cannot compile, a run that fails
or crashes, and a result that differs from the NumPy reference are reported as skipped with the
first line of the error; the other shapes still run.

Usage: peers_iree.py --out=iree.json [--repetitions=5] [--min-time=0.2] [--filter=REGEX]
                     [--compile-repetitions=3] [--threads=N]
"""
import argparse
import importlib.metadata
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from peers_torch import cold_copies, time_call

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPILE_FLAGS = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
# Components that call other components, with the ones they call.
LINKS = {"moe/moe_ffn_block.mlir": ["moe/mul_mat_id.mlir", "activation/swiglu.mlir"]}
DRIVER = "local-task"


# NumPy references, written from the maths in each component's header.

def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def swiglu(gate, up):
    return gate * up / (1 + np.exp(-up))


def embedding_lookup(table, ids):
    return table[ids]


def rope(x, pos, base, scale):
    d = x.shape[-1]
    theta = (base ** (-(2 * np.arange(d // 2, dtype=np.float32) / d)) * scale).astype(np.float32)
    angle = pos.astype(np.int32).astype(np.float32)[:, :, None, None] * theta  # [B, S, 1, D/2]
    cos, sin = np.cos(angle), np.sin(angle)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2], y[..., 1::2] = x0 * cos - x1 * sin, x0 * sin + x1 * cos
    return y


def softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def attention(q, k, v, scale, causal=False):
    group = q.shape[2] // k.shape[2]  # query head h reads KV head h // group
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    logits = scale * np.einsum("bshd,bjhd->bhsj", q, k)
    if causal:
        s, skv = q.shape[1], k.shape[1]
        logits[..., np.arange(skv)[None, :] > np.arange(s)[:, None] + (skv - s)] = -np.inf
    return np.einsum("bhsj,bjhd->bshd", softmax(logits, -1), v)


def mul_mat_id(w, x, ids):
    experts = np.moveaxis(w, 2, 0)  # [X, n_out, n_in]
    out = np.empty((w.shape[0],) + ids.shape, np.float32)
    for e, t in np.ndindex(*ids.shape):
        out[:, e, t] = experts[ids[e, t]] @ x[:, e, t]
    return out


def moe_ffn_block(x, router, up_w, gate_w, down_w, n_expert, used, n_embd, n_ff, normalize):
    probs = softmax(router @ x.T, 0)  # [X, T]
    ids = np.argsort(-probs, axis=0, kind="stable")[:used].astype(np.int32)
    weights = np.take_along_axis(probs, ids, 0)
    if normalize:
        weights = weights / weights.sum(0)
    rep = np.repeat(x.T[:, None, :], used, axis=1)  # [E, k, T]
    act = swiglu(mul_mat_id(gate_w, rep, ids), mul_mat_id(up_w, rep, ids))
    return np.einsum("ekt,kt->te", mul_mat_id(down_w, act, ids), weights)


def shapes(rng):
    """Yields (id, description, component, function, flops, bytes, cold, make, reference) with
    make() -> the argument sets (several for cold weights) and reference the NumPy function."""
    def rand(*shape, lo=-1.0, hi=1.0):
        return rng.uniform(lo, hi, shape).astype(np.float32)

    for sid, rows in (("S1", 32), ("S1d", 1)):
        yield (sid, f"rms_norm {rows}x4096", "normalization/rms_norm.mlir", "rms_norm_linalg",
               4.0 * rows * 4096, 4.0 * (2 * rows * 4096 + 4096), False,
               lambda rows=rows: [[rand(rows, 4096), rand(4096, lo=0.5, hi=1.5), 1e-6]], rms_norm)

    n2 = 32 * 14336
    yield ("S2", "swiglu 1x32x14336", "activation/swiglu.mlir", "swiglu", 6.0 * n2, 12.0 * n2,
           False, lambda: [[rand(1, 32, 14336, lo=-4, hi=4), rand(1, 32, 14336, lo=-8, hi=8)]],
           swiglu)

    ids = np.resize(np.array([17, 31990, 5, 2048, 999, 12345, 0, 31999]), (1, 128))
    yield ("S3", "embedding_lookup 32000x2048 ids 1x128", "embedding/embedding_lookup.mlir",
           "embedding_lookup", 0.0, 4.0 * 2 * 128 * 2048 + 8 * 128, False,
           lambda: [[rand(32000, 2048), ids]], embedding_lookup)

    n4 = 128 * 32 * 128
    yield ("S4", "rope 1x128x32x128", "position/rope.mlir", "rope", 3.0 * n4, 8.0 * n4 + 8 * 128,
           False, lambda: [[rand(1, 128, 32, 128), np.arange(128).reshape(1, 128), 10000.0, 1.0]],
           rope)

    scale = 1.0 / math.sqrt(128.0)
    for sid, fn, causal, pairs in (("S5", "attention_gqa", False, 128.0 * 128),
                                   ("S5c", "attention_gqa_causal", True, 128.0 * 129 / 2)):
        yield (sid, f"{fn} 1x128x32x128 kv 8 heads", "attention/attention_gqa.mlir", fn,
               4.0 * 32 * 128 * pairs, 4.0 * (2 * 128 * 32 * 128 + 2 * 128 * 8 * 128), False,
               lambda: [[rand(1, 128, 32, 128), rand(1, 128, 8, 128), rand(1, 128, 8, 128),
                         scale]],
               lambda q, k, v, s, causal=causal: attention(q, k, v, s, causal))
    yield ("S6", "attention_gqa_decode q 1x1x32x128 kv 1x512x8x128",
           "attention/attention_gqa.mlir", "attention_gqa_decode", 4.0 * 32 * 512 * 128,
           4.0 * (2 * 32 * 128 + 2 * 512 * 8 * 128), False,
           lambda: [[rand(1, 1, 32, 128), rand(1, 512, 8, 128), rand(1, 512, 8, 128), scale]],
           attention)

    for sid, m, cold in (("S7", 128, False), ("S8", 1, True)):
        def make_matmul(m=m, cold=cold):
            x = rand(m, 4096)
            copies = cold_copies(4096 * 4096 * 4) if cold else 1
            return [[x, rand(4096, 4096, lo=-0.05, hi=0.05)] for _ in range(copies)]
        yield (sid, f"matmul {m}x4096x4096", "linear/matmul.mlir", "matmul",
               2.0 * m * 4096 * 4096, 4.0 * (m * 4096 + 4096 * 4096 + m * 4096), cold,
               make_matmul, np.matmul)

    n_out, n_in, experts, used = 3584, 1024, 8, 2
    for tokens in (1, 32):
        seq = [3, 5] if tokens == 1 else [1, 6, 3, 0, 5, 2, 7, 4]
        def make_mul_mat_id(tokens=tokens, seq=seq):
            x = rand(n_in, used, tokens)
            ids = np.resize(np.array(seq, np.int32), (used, tokens))
            copies = cold_copies(n_out * n_in * experts * 4)
            return [[rand(n_out, n_in, experts, lo=-0.03, hi=0.03), x, ids]
                    for _ in range(copies)]
        yield (f"S9t{tokens}", f"mul_mat_id T={tokens}", "moe/mul_mat_id.mlir", "mul_mat_id",
               2.0 * n_out * n_in * used * tokens,
               4.0 * (n_out * n_in * experts + n_in * used * tokens + n_out * used * tokens),
               True, make_mul_mat_id, mul_mat_id)

    e, f = 1024, 3584
    for tokens in (1, 32):
        def make_moe(tokens=tokens):
            x, router = rand(tokens, e), rand(experts, e)
            copies = cold_copies(3 * f * e * experts * 4)
            # normalize_weights (i1): iree.runtime takes the integer 1 (it refuses True).
            return [[x, router, rand(f, e, experts, lo=-0.03, hi=0.03),
                     rand(f, e, experts, lo=-0.03, hi=0.03),
                     rand(e, f, experts, lo=-0.02, hi=0.02), experts, used, e, f, 1]
                    for _ in range(copies)]
        yield (f"S10t{tokens}", f"moe_ffn_block T={tokens}", "moe/moe_ffn_block.mlir",
               "moe_ffn_block",
               2.0 * tokens * experts * e + 3 * 2.0 * f * e * used * tokens
               + 2.0 * tokens * used * e,
               4.0 * (3 * f * e * experts + experts * e + 2 * tokens * e), True, make_moe,
               moe_ffn_block)


def first_line(text):
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "unknown error")


def for_iree(component, tmp):
    """The component's path, or that of a copy in the syntax the installed IREE reads: IREE 3
    takes attention's indexing maps as a property (`<{indexing_maps = [...]}>`) and rejects the
    attribute dictionary of earlier releases, which the components use."""
    path = os.path.join("components", component)
    with open(os.path.join(ROOT, path)) as f:
        text = f.read()
    adapted = re.sub(r"(iree_linalg_ext\.attention\s*)\{(\s*indexing_maps\s*=\s*\[[^\]]*\])\s*\}",
                     r"\1<{\2}>", text)
    if adapted == text:
        return path
    copy = os.path.join(tmp, component.replace("/", "_"))
    with open(copy, "w") as f:
        f.write(adapted)
    return copy


def build(component, vmfb, tmp):
    """iree-link (for components that call others) and iree-compile; returns the seconds taken.
    Raises RuntimeError with the first line of the tool's error."""
    from iree.compiler.tools.binaries import find_tool
    steps, source = [], for_iree(component, tmp)
    if component in LINKS:
        linked = os.path.join(tmp, "linked.mlir")
        steps.append([find_tool("iree-link"), source, "-o", linked] +
                     [f"--link-module={os.path.join('components', m)}" for m in LINKS[component]])
        source = linked
    steps.append([find_tool("iree-compile"), source, *COMPILE_FLAGS, "-o", vmfb])
    start = time.perf_counter()
    for step in steps:
        done = subprocess.run(step, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(first_line(done.stderr or done.stdout))
    return time.perf_counter() - start


def check(out, ref):
    """None if out matches the NumPy reference, else what differs."""
    ref = np.asarray(ref, np.float32)
    if out.shape != ref.shape:
        return f"result shape {list(out.shape)}, the NumPy reference's {list(ref.shape)}"
    err = float(np.max(np.abs(out - ref))) if out.size else 0.0
    if not err <= 1e-3 * max(1.0, float(np.max(np.abs(ref)))):  # also catches NaN
        return f"result differs from the NumPy reference by up to {err:.3g}"
    return None


def aggregate(name, seconds, unit, repetitions, iterations, **counters):
    scale = {"us": 1e6, "ms": 1e3}[unit]
    return {"name": f"{name}_median", "run_name": name, "run_type": "aggregate",
            "aggregate_name": "median", "repetitions": repetitions, "iterations": iterations,
            "real_time": seconds * scale, "time_unit": unit, **counters}


def skipped(name, message):
    print(f"{name}: skipped: {message}", file=sys.stderr)
    return {"name": name, "run_name": name, "run_type": "iteration", "iterations": 0,
            "real_time": 0, "time_unit": "us", "error_occurred": True, "error_message": message}


def run_shape(args):
    """The child process of one shape: runs its function from args.vmfb, checks the result and
    times it; prints the benchmark entry as JSON on stdout."""
    import iree.runtime as rt
    # The local-task driver's worker count, read when the device is created (see
    # `iree-run-module --help`: --task_topology_max_group_count caps the workers it creates).
    rt.flags.parse_flags(f"--task_topology_max_group_count={args.threads}")
    config = rt.Config(DRIVER)
    sid, desc, _, function, flops, nbytes, cold, make, reference = next(
        s for s in shapes(np.random.default_rng(0)) if s[0] == args.shape)
    name = f"{sid} {desc}/iree"
    try:
        context = rt.SystemContext(config=config)
        module = rt.VmModule.mmap(config.vm_instance, args.vmfb)
        context.add_vm_module(module)
        fn = context.modules[module.name][function]
        arg_sets = make()
        wrong = check(fn(*arg_sets[0]).to_host(), reference(*arg_sets[0]))
        if wrong:
            print(json.dumps(skipped(name, wrong)))
            return 0
        on_device = [[rt.asdevicearray(config.device, a) if isinstance(a, np.ndarray) else a
                      for a in s] for s in arg_sets]
        del arg_sets
        runs = [time_call(lambda c: fn(*on_device[c % len(on_device)]), args.min_time)
                for _ in range(args.repetitions)]
    except Exception as e:  # an IREE runtime error
        print(json.dumps(skipped(name, first_line(e))))
        return 0
    median = statistics.median(s for s, _ in runs)
    print(f"{name}: {median * 1e6:.1f} us", file=sys.stderr)
    print(json.dumps(aggregate(name, median, "us", args.repetitions, runs[0][1], flops=flops,
                               bytes=nbytes, cold=1 if cold else 0)))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.2)
    parser.add_argument("--compile-repetitions", type=int, default=3)
    parser.add_argument("--filter", default="")
    parser.add_argument("--threads", type=int,
                        default=int(os.environ.get("FRANK_NUM_THREADS", os.cpu_count() or 1)))
    parser.add_argument("--shape", help=argparse.SUPPRESS)  # the child process of one shape
    parser.add_argument("--vmfb", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.shape:
        return run_shape(args)
    if not args.out:
        parser.error("--out is required")
    try:
        import iree.compiler  # noqa: F401  (iree-compile and iree-link)
        import iree.runtime  # noqa: F401
    except ImportError as e:
        print(f"peers_iree.py: IREE is not installed ({e}); skipped", file=sys.stderr)
        return 0
    builds = {}  # component -> (vmfb, compile seconds) or an error message
    benchmarks = []
    with tempfile.TemporaryDirectory() as tmp:
        for sid, desc, component, *_ in shapes(np.random.default_rng(0)):
            name = f"{sid} {desc}"
            if args.filter and not re.search(args.filter, f"{name}/iree"):
                continue
            if component not in builds:
                vmfb = os.path.join(tmp, component.replace("/", "_") + ".vmfb")
                try:
                    times = [build(component, vmfb, tmp) for _ in range(args.compile_repetitions)]
                    builds[component] = (vmfb, statistics.median(times))
                except (RuntimeError, OSError, ValueError) as e:  # a compile error, no tool
                    builds[component] = first_line(e)
            if isinstance(builds[component], str):
                benchmarks.append(skipped(f"{name}/iree-compile", builds[component]))
                benchmarks.append(skipped(f"{name}/iree", builds[component]))
                continue
            vmfb, seconds = builds[component]
            print(f"{name}/iree-compile: {seconds * 1e3:.0f} ms", file=sys.stderr)
            benchmarks.append(aggregate(f"{name}/iree-compile", seconds, "ms",
                                        args.compile_repetitions, 1))
            # Its own process: a crash in IREE's runtime costs this shape only.
            child = subprocess.run(
                [sys.executable, os.path.abspath(__file__), f"--shape={sid}", f"--vmfb={vmfb}",
                 f"--repetitions={args.repetitions}", f"--min-time={args.min_time}",
                 f"--threads={args.threads}"], stdout=subprocess.PIPE, text=True)
            try:
                benchmarks.append(json.loads(child.stdout.strip().splitlines()[-1]))
            except (IndexError, ValueError):
                crash = (f"the IREE run crashed ({signal.Signals(-child.returncode).name})"
                         if child.returncode < 0 else f"no result (exit status {child.returncode})")
                benchmarks.append(skipped(f"{name}/iree", crash))
    context = {"iree": importlib.metadata.version("iree-base-runtime"), "driver": DRIVER,
               "threads": str(args.threads), "compile_flags": " ".join(COMPILE_FLAGS)}
    with open(args.out, "w") as out:
        json.dump({"context": context, "benchmarks": benchmarks}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
