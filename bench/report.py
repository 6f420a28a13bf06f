#!/usr/bin/env python3
"""frank-shapes' Google Benchmark JSON -> a JSON report, a roofline plot and a Markdown table.

    python3 bench/report.py INPUT.json [MORE.json ...] --json OUT.json --png OUT.png
    python3 bench/report.py --self-test

INPUT.json is `frank-shapes --benchmark_format=json` (with or without --benchmark_repetitions=N
--benchmark_report_aggregates_only=true). MORE.json files in the same format (e.g. from a PyTorch
script) add implementations; the machine numbers come from the first file whose context has them.

Benchmark names are "<shape id> <description>/<implementation>". Google Benchmark appends
"/iterations:N", "/real_time" and the like to the registered name; those are stripped first.
Implementations named "compile*" or "*-compile" (a peer's compiler, e.g. "iree-compile") are
compile times, and "disk-reload" is the time to load a compiled kernel from the disk cache
instead: they go to the compile section, which lists them shape by shape. "dram-read" is a cold
shape's own DRAM roof: a plain read of the weights the kernels read, the same pages;
"cache-copy" a warm shape's: a plain read of its inputs and write of its outputs, where they
stay cached. A result's
roofline fraction is its "roofline" counter when it has one (frank-shapes measures each
repetition's against a read of the weights right after it: this machine's DRAM bandwidth
drifts); else, for a cold shape with a dram-read, against that read's rate; else against the
machine's probes. dram-read and cache-copy are columns of the table but no implementations: no
speedup, no roofline fraction, no plot point.

The JSON report: {"machine": {peak_gflops, dram_gbps, l3_gbps, l3_bytes, l2_gbps, l2_bytes,
threads},
"implementations": [...], "shapes": [{"id", "description", "flops", "bytes", "intensity", "cold",
"results": {impl: {"seconds", "gflops", "gbps", "roofline", "speedup_vs_generic", "flops",
"bytes"} or {"skipped": message}}, "dram_gbps", "compile_ms"}],
"geomean_specialized_over_generic",
"geomean_shapes", "compile": [{"id", "description", "kind", "ms" or "skipped"}]}.
A result's flops/bytes are its own counters (a peer's layout may move other bytes than the
shape's); unknown numbers are null.

Needs only the standard library; the plot needs matplotlib (skipped with a message without it).
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
import tempfile

PROG = "report.py"

SPECIALIZED = "frank-specialized"
PARTIAL = "frank-partial"  # specialized but for the token count or KV length
GENERIC = "frank-generic"
# Table and legend order; implementations not listed follow in order of appearance.
DRAM_READ = "dram-read"  # a cold shape's weights read by a plain loop: its DRAM roof
CACHE_COPY = "cache-copy"  # a warm shape's inputs read and outputs written by plain loops
PLAIN_LOOPS = (DRAM_READ, CACHE_COPY)  # references, not implementations
KNOWN_IMPLS = [SPECIALIZED, PARTIAL, GENERIC, "openblas", "onednn", "libxsmm", "ggml", "torch",
               "iree", DRAM_READ, CACHE_COPY]

TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# User counters read from each entry (everything else is Google Benchmark's own fields).
COUNTERS = ("flops", "bytes", "roofline", "cold", "FLOP/s", "bytes_per_second", "compile_ms")
MACHINE_KEYS = ("peak_gflops", "dram_gbps", "l3_gbps", "l3_bytes", "l2_gbps", "l2_bytes",
                "threads")
# Name components Google Benchmark appends to the registered name (benchmark_name.cc).
GBENCH_SUFFIX = re.compile(
    r"^(real_time|manual_time|process_time|iterations:\d+|repeats:\d+|"
    r"min_time:[0-9.eE+-]+s?|min_warmup_time:[0-9.eE+-]+s?)$")
THREADS_SUFFIX = re.compile(r"^threads:(\d+)$")


class ReportError(Exception):
    pass


def shape_order(shape_id):
    """Shape ids in natural order (S1, S1d, S2, ..., S9t32, S10t1), whatever order the runs came
    in: `make bench` interleaves them at random."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.findall(r"\d+|\D+", shape_id)]


RELOAD = "disk-reload"


def is_compile(impl):
    """Compile times: frank-shapes' "compile-cold", a peer's "iree-compile"; and frank-shapes'
    "disk-reload", what loading the compiled kernel from the disk cache takes instead."""
    return impl.startswith("compile") or impl.endswith("-compile") or impl == RELOAD


def is_number(v):
    # bool is an int in Python, but a JSON true is no measurement.
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# ---------------------------------------------------------------------------------------------
# Parsing


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file")
    except OSError as e:
        raise ReportError(f"{path}: {e.strerror or e}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: not valid JSON ({e})")
    check_doc(doc, path)
    return doc


def check_doc(doc, where):
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ReportError(f"{where}: not Google Benchmark JSON (no \"benchmarks\" list); "
                         "was it written with --benchmark_format=json?")
    for i, entry in enumerate(doc["benchmarks"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ReportError(f"{where}: benchmarks[{i}] has no \"name\"")


def machine_from_contexts(docs):
    """Machine numbers from the first context that has peak_gflops (extra files may lack them)."""
    machine = {k: None for k in MACHINE_KEYS}
    for doc in docs:
        context = doc.get("context")
        if not isinstance(context, dict) or "peak_gflops" not in context:
            continue
        for key in MACHINE_KEYS:
            value = context.get(key)
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue  # absent or not a number: leave None rather than guess
            if not math.isfinite(number):
                continue
            machine[key] = int(number) if key in ("threads", "l3_bytes", "l2_bytes") else number
        break
    return machine


def split_name(name):
    """(id, description, implementation) of a benchmark name.

    "S7 matmul 128x4096x4096/openblas/real_time" -> ("S7", "matmul 128x4096x4096", "openblas")
    """
    parts = name.split("/")
    threads = None
    while len(parts) > 1 and (GBENCH_SUFFIX.match(parts[-1]) or THREADS_SUFFIX.match(parts[-1])):
        m = THREADS_SUFFIX.match(parts.pop())
        if m:
            threads = m.group(1)
    if len(parts) > 1:
        impl = parts[-1]
        head = "/".join(parts[:-1])
    else:
        impl, head = "", parts[0]
    if threads is not None:
        impl = f"{impl} (threads:{threads})"  # keep ->Threads(N) variants apart
    words = head.strip().split(None, 1)
    shape_id = words[0] if words else head
    description = words[1] if len(words) > 1 else ""
    return shape_id, description, impl


def entry_seconds(entry, where):
    real_time = entry.get("real_time")
    if not is_number(real_time):
        raise ReportError(f"{where}: \"{entry['name']}\" has no numeric real_time")
    unit = entry.get("time_unit", "ns")  # Google Benchmark's default unit
    if unit not in TIME_UNITS:
        raise ReportError(f"{where}: \"{entry['name']}\" has unknown time_unit {unit!r}")
    return real_time * TIME_UNITS[unit]


def collect_runs(doc, where="input"):
    """One run per benchmark: [(name, {"seconds", counters...} or {"error": message})], in order.

    With repetitions the median aggregate stands for the benchmark; without, the median of its
    iteration entries. A benchmark whose every run failed keeps its error message.
    """
    check_doc(doc, where)
    order, medians, iterations, errors = [], {}, {}, {}
    for entry in doc["benchmarks"]:
        name = entry["name"]
        aggregate = entry.get("aggregate_name")
        if aggregate is not None or entry.get("run_type") == "aggregate":
            if aggregate != "median":
                continue
            base = entry.get("run_name") or (name[:-len("_median")]
                                             if name.endswith("_median") else name)
            medians[base] = entry
        else:
            base = entry.get("run_name") or name
            if entry.get("error_occurred") or entry.get("skipped"):
                errors[base] = str(entry.get("error_message") or entry.get("skip_message")
                                   or "skipped")
            else:
                iterations.setdefault(base, []).append(entry)
        if base not in order:
            order.append(base)

    runs = []
    for base in order:
        if base in medians:
            entry = medians[base]
            run = {"seconds": entry_seconds(entry, where)}
            run.update({k: entry[k] for k in COUNTERS if is_number(entry.get(k))})
        elif base in iterations:
            entries = iterations[base]
            run = {"seconds": statistics.median(entry_seconds(e, where) for e in entries)}
            for key in COUNTERS:
                values = [e[key] for e in entries if is_number(e.get(key))]
                if values:
                    run[key] = statistics.median(values)
        else:
            run = {"error": errors[base]}
        if "seconds" in run and run["seconds"] <= 0:
            raise ReportError(f"{where}: \"{base}\" has a non-positive real_time")
        runs.append((base, run))
    return runs


# ---------------------------------------------------------------------------------------------
# Aggregation


def warm_gbps(nbytes, machine):
    """The bandwidth of the cache warm bytes live in: the L2s when they fit the threads' L2s
    together (as frank-shapes' Machine::fitsL2), else L3."""
    l2, l2_bytes, threads = (machine.get(k) for k in ("l2_gbps", "l2_bytes", "threads"))
    if l2 and l2_bytes and threads and nbytes is not None and nbytes <= l2_bytes * threads:
        return l2
    return machine.get("l3_gbps")


def roofline_bound(flops, nbytes, cold, machine, dram_gbps=None):
    """Seconds the roofline allows: compute or, from DRAM (cold) or the L2s or L3 (warm),
    memory. A shape's own DRAM bandwidth, when given, stands for the machine's."""
    peak = machine.get("peak_gflops")
    bw = (dram_gbps or machine.get("dram_gbps")) if cold else warm_gbps(nbytes, machine)
    if flops is None or nbytes is None or not peak or not bw:
        return None
    return max(flops / (peak * 1e9), nbytes / (bw * 1e9))


def _counter(runs, impls, key):
    """A shape-level counter: frank-specialized's, else the first implementation that has it."""
    for impl in sorted(impls, key=lambda i: (i != SPECIALIZED, i != GENERIC)):
        value = runs[impl].get(key)
        if value is not None:
            return value
    return None


def build_report(docs, names=None):
    """The report from loaded documents: machine, shapes with per-implementation results,
    the specialized/generic geomean, and the compile section."""
    names = names or [f"input {i + 1}" for i in range(len(docs))]
    machine = machine_from_contexts(docs)
    shapes = {}  # id -> {"id", "description", "runs": {impl: run}}; dicts keep first-seen order
    compile_runs = []
    impl_order = []

    for doc, where in zip(docs, names):
        for name, run in collect_runs(doc, where):
            shape_id, description, impl = split_name(name)
            # Rates alone still give the per-call amounts (e.g. a script that only sets FLOP/s).
            if "seconds" in run:
                if "flops" not in run and "FLOP/s" in run:
                    run["flops"] = run["FLOP/s"] * run["seconds"]
                if "bytes" not in run and "bytes_per_second" in run:
                    run["bytes"] = run["bytes_per_second"] * run["seconds"]
            if is_compile(impl):
                compile_runs.append((shape_id, description, impl, run))
                continue
            shape = shapes.setdefault(shape_id, {"id": shape_id, "description": description,
                                                 "runs": {}})
            previous = shape["runs"].get(impl)
            if previous is not None:
                # A measurement beats a skip; otherwise the first file wins.
                if "error" in previous and "error" not in run:
                    shape["runs"][impl] = run
                else:
                    print(f"{PROG}: warning: {name} appears twice; keeping the first",
                          file=sys.stderr)
                continue
            shape["runs"][impl] = run
            if impl not in impl_order:
                impl_order.append(impl)

    impls = [i for i in KNOWN_IMPLS if i in impl_order] + \
            [i for i in impl_order if i not in KNOWN_IMPLS]

    compile_section = []
    compile_by_shape = {}
    for shape_id, description, impl, run in compile_runs:
        item = {"id": shape_id, "description": description, "kind": impl}
        if "error" in run:
            item["skipped"] = run["error"]
        else:
            # A compile_ms counter, when set, is the compile alone; real_time otherwise.
            item["ms"] = run.get("compile_ms", run["seconds"] * 1e3)
            # compile-cold is the number a shape carries; other compilers only if it is absent.
            if impl == "compile-cold" or (impl != RELOAD and shape_id not in compile_by_shape):
                compile_by_shape[shape_id] = item["ms"]
        compile_section.append(item)
    # Shape by shape, each shape's kinds in input order (the sort is stable).
    compile_section.sort(key=lambda item: shape_order(item["id"]))

    out_shapes = []
    ratios = []
    for shape in sorted(shapes.values(), key=lambda shape: shape_order(shape["id"])):
        runs = shape["runs"]
        measured = [i for i in runs if "error" not in runs[i]]
        flops = _counter(runs, measured, "flops")
        nbytes = _counter(runs, measured, "bytes")
        cold = _counter(runs, measured, "cold")
        cold = None if cold is None else int(round(cold))
        generic = runs.get(GENERIC, {}).get("seconds")
        read = runs.get(DRAM_READ, {})
        own_dram = (read["bytes"] / read["seconds"] / 1e9
                    if cold and "error" not in read and read.get("bytes") and read.get("seconds")
                    else None)
        results = {}
        for impl in impls:
            if impl not in runs:
                continue
            run = runs[impl]
            if "error" in run:
                results[impl] = {"skipped": run["error"]}
                continue
            seconds = run["seconds"]
            # A peer may move other bytes than the shape's (its own layout): use its counters.
            r_flops = run.get("flops", flops)
            r_bytes = run.get("bytes", nbytes)
            r_cold = run.get("cold", cold)
            roofline = None if impl in PLAIN_LOOPS else run.get("roofline")
            if roofline is None and impl not in PLAIN_LOOPS:
                bound = roofline_bound(r_flops, r_bytes, bool(r_cold), machine, own_dram)
                roofline = None if bound is None else bound / seconds
            results[impl] = {
                "seconds": seconds,
                "gflops": (r_flops / seconds / 1e9 if r_flops is not None
                           else None),
                "gbps": r_bytes / seconds / 1e9 if r_bytes is not None else None,
                "roofline": roofline,
                "speedup_vs_generic": (generic / seconds
                                       if generic and impl not in PLAIN_LOOPS else None),
                "flops": r_flops,
                "bytes": r_bytes,
            }
        spec = results.get(SPECIALIZED, {}).get("seconds")
        if spec and generic:
            ratios.append(generic / spec)
        out_shapes.append({
            "id": shape["id"],
            "description": shape["description"],
            "flops": flops,
            "bytes": nbytes,
            "intensity": flops / nbytes if flops is not None and nbytes else None,
            "cold": cold,
            "results": results,
            "dram_gbps": own_dram,
            "compile_ms": compile_by_shape.get(shape["id"]),
        })

    geomean = (math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None)
    return {
        "machine": machine,
        "implementations": impls,
        "shapes": out_shapes,
        "geomean_specialized_over_generic": geomean,
        "geomean_shapes": len(ratios),
        "compile": compile_section,
    }


# ---------------------------------------------------------------------------------------------
# Markdown


def round_sig(x, digits=3):
    if x == 0:
        return 0.0
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def fmt_sig(x, digits=3):
    """3 significant digits without exponent notation: 0.512, 12.3, 812, 1230."""
    x = round_sig(x, digits)
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    return f"{x:.{decimals}f}"


def fmt_time(seconds):
    us = round_sig(seconds * 1e6)
    if us < 1000:  # decided after rounding, so 999.7 µs reads "1.00 ms", not "1000 µs"
        return f"{fmt_sig(us)} µs"
    return f"{fmt_sig(seconds * 1e3)} ms"


def md_escape(text):
    return str(text).replace("|", "\\|")


def cell(result):
    if result is None:
        return "—"
    if "skipped" in result:
        return "skipped"
    text = fmt_time(result["seconds"])
    if result.get("roofline") is not None:
        text += f" ({result['roofline'] * 100:.0f}%)"
    return text


def markdown(report):
    impls = report["implementations"]
    lines = []
    head = ["Shape", "Description", "cold/warm"] + impls + \
           ["Speedup (generic ÷ specialized time)"]
    lines.append("| " + " | ".join(md_escape(h) for h in head) + " |")
    lines.append("|" + "|".join(["---"] * 3 + ["---:"] * (len(impls) + 1)) + "|")
    for shape in report["shapes"]:
        results = shape["results"]
        cold = {1: "cold", 0: "warm"}.get(shape["cold"], "?")
        spec = results.get(SPECIALIZED, {})
        speedup = spec.get("speedup_vs_generic")
        row = [shape["id"], shape["description"], cold] + \
              [cell(results.get(impl)) for impl in impls] + \
              [f"{fmt_sig(speedup)}×" if speedup else "—"]
        lines.append("| " + " | ".join(md_escape(c) for c in row) + " |")
    lines.append("")
    lines.append("Times are medians per call; (n%) is the fraction of the roofline bound: for "
                 "warm shapes the L2 bandwidth where their bytes fit the cores' L2s, else L3; "
                 "for cold ones DRAM, at the rate a plain read of "
                 "their weights reached right after each repetition (frank-shapes), or the "
                 f"median of {DRAM_READ}'s, which times that read. {CACHE_COPY} times a plain "
                 "read of a warm shape's inputs and write of its outputs, with every thread.")
    lines.append("")
    # Why each skipped cell is skipped, once per implementation and reason.
    skipped = {}
    for shape in report["shapes"]:
        for impl in impls:
            reason = shape["results"].get(impl, {}).get("skipped")
            if reason is not None:
                skipped.setdefault((impl, reason), []).append(shape["id"])
    for (impl, reason), ids in skipped.items():
        lines.append(f"- {md_escape(impl)} skipped on {', '.join(ids)}: {md_escape(reason)}")
    if skipped:
        lines.append("")
    geomean = report["geomean_specialized_over_generic"]
    if geomean is None:
        lines.append(f"Geomean speedup of {SPECIALIZED} over {GENERIC}: n/a "
                     "(no shape has both)")
    else:
        lines.append(f"Geomean speedup of {SPECIALIZED} over {GENERIC}: **{fmt_sig(geomean)}×** "
                     f"over {report['geomean_shapes']} shapes")
    if report["compile"]:
        lines.append("")
        lines.append("| Shape | Description | Kind | Compile or reload time |")
        lines.append("|---|---|---|---:|")
        for item in report["compile"]:
            value = "skipped" if "skipped" in item else f"{fmt_sig(item['ms'])} ms"
            lines.append("| " + " | ".join(md_escape(c) for c in
                                           (item["id"], item["description"], item["kind"],
                                            value)) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Plot

STYLES = {
    SPECIALIZED: ("o", "#d62728"),
    PARTIAL: ("o", "#f4a6a6"),
    GENERIC: ("s", "#ff7f0e"),
    "openblas": ("^", "#1f77b4"),
    "onednn": ("D", "#2ca02c"),
    "libxsmm": ("d", "#bcbd22"),
    "torch": ("v", "#9467bd"),
    "iree": ("p", "#00a087"),
}
EXTRA_STYLES = [("P", "#8c564b"), ("X", "#e377c2"), ("*", "#7f7f7f"), ("h", "#8c8c00"),
                ("<", "#17becf"), (">", "#000000")]


def style_for(impl, impls):
    if impl in STYLES:
        return STYLES[impl]
    extras = [i for i in impls if i not in STYLES]
    return EXTRA_STYLES[extras.index(impl) % len(EXTRA_STYLES)]


def plot_points(report):
    """[(shape, impl, intensity, gflops, cold)] a FLOP roofline can show; shapes it cannot."""
    points, off_plot = [], []
    for shape in report["shapes"]:
        placed = False
        for impl, r in shape["results"].items():
            if "skipped" in r or not r.get("flops") or not r.get("bytes") or not r.get("gflops"):
                continue
            if impl in PLAIN_LOOPS:
                continue
            points.append((shape, impl, r["flops"] / r["bytes"], r["gflops"],
                           bool(shape["cold"])))
            placed = True
        if not placed and any("skipped" not in r for r in shape["results"].values()):
            off_plot.append(shape)
    return points, off_plot


def write_plot(report, path):
    """Draws the roofline PNG; False (with a message) when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display on a benchmark machine
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError as e:
        print(f"{PROG}: matplotlib is not available ({e}); skipping the plot {path}. "
              "Install it (Debian: apt-get install python3-matplotlib) to get it.",
              file=sys.stderr)
        return False

    machine = report["machine"]
    impls = report["implementations"]
    peak, dram, l3 = machine["peak_gflops"], machine["dram_gbps"], machine["l3_gbps"]
    l2 = machine.get("l2_gbps")
    points, off_plot = plot_points(report)

    plt.rcParams.update({"font.size": 13})
    fig, ax = plt.subplots(figsize=(16, 10), dpi=100)
    ax.set_xscale("log")
    ax.set_yscale("log")

    xs = [p[2] for p in points] or [1.0]
    ys = [p[3] for p in points] or [1.0]
    ridges = [peak / bw for bw in (dram, l3, l2) if peak and bw]
    x_lo = min(xs + ridges) / 4
    x_hi = max(xs + ridges) * 4
    y_tops = ys + ([peak] if peak else [])
    y_lows = ys + [bw * x_lo for bw in (dram, l3, l2) if bw]
    y_lo = min(y_lows) / 3
    y_hi = max(y_tops) * 2.5
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)

    n = 256
    grid = [x_lo * (x_hi / x_lo) ** (i / (n - 1)) for i in range(n)]
    roof_handles = []
    slope_labels = []
    if peak:
        h, = ax.plot([x_lo, x_hi], [peak, peak], color="black", lw=2.2,
                     label=f"FP32 FMA peak {peak:.0f} GFLOP/s")
        roof_handles.append(h)
        ax.annotate(f"compute roof: {peak:.0f} GFLOP/s", (x_hi, peak), xytext=(-8, 6),
                    textcoords="offset points", ha="right", va="bottom", fontsize=13,
                    fontweight="bold")
    for bw, name, ls in ((dram, "DRAM", "--"), (l3, "L3", ":"), (l2, "L2", "-.")):
        if not bw:
            continue
        roof = [min(bw * x, peak) if peak else bw * x for x in grid]
        h, = ax.plot(grid, roof, color="dimgray", lw=2.2, ls=ls,
                     label=f"{name} roof {bw:.1f} GB/s")
        roof_handles.append(h)
        slope_labels.append((bw, f"{name} roof {bw:.1f} GB/s"))

    for impl in impls:
        marker, color = style_for(impl, impls)
        for cold in (True, False):
            sel = [p for p in points if p[1] == impl and p[4] == cold]
            if not sel:
                continue
            ax.scatter([p[2] for p in sel], [p[3] for p in sel], marker=marker, s=110,
                       linewidths=2, edgecolors=color,
                       facecolors=color if cold else "none", zorder=3)

    # Shape ids beside frank-specialized points (or the first point of a shape it lacks).
    labelled = set()
    for shape, impl, x, y, _ in sorted(points, key=lambda p: p[1] != SPECIALIZED):
        if shape["id"] in labelled:
            continue
        labelled.add(shape["id"])
        ax.annotate(shape["id"], (x, y), xytext=(8, 5), textcoords="offset points",
                    fontsize=13, fontweight="bold", zorder=4)

    impl_handles = []
    for impl in impls:
        if not any(p[1] == impl for p in points):
            continue
        marker, color = style_for(impl, impls)
        impl_handles.append(Line2D([], [], ls="", marker=marker, markersize=11, color=color,
                                   markerfacecolor=color, markeredgewidth=2, label=impl))
    fill_handles = [
        Line2D([], [], ls="", marker="o", markersize=11, color="gray", markeredgewidth=2,
               label="filled: cold (weights from DRAM)"),
        Line2D([], [], ls="", marker="o", markersize=11, color="gray", markeredgewidth=2,
               markerfacecolor="none", label="hollow: warm (L3-resident)"),
    ]
    ax.legend(handles=impl_handles + fill_handles + roof_handles, loc="upper left",
              fontsize=12, framealpha=0.92)

    if off_plot:
        note = "Not on the plot (no FLOPs, see the table): " + ", ".join(
            f"{s['id']} ({s['description']})" for s in off_plot)
        ax.text(0.99, 0.02, note, transform=ax.transAxes, ha="right", va="bottom",
                fontsize=12, bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9})

    threads = machine.get("threads")
    title = "frank-jit roofline"
    title += f", {threads} threads" if threads else ""
    details = [f"peak {peak:.0f} GFLOP/s" if peak else None,
               f"DRAM {dram:.1f} GB/s" if dram else None,
               f"L3 {l3:.1f} GB/s" if l3 else None,
               f"L2 {l2:.1f} GB/s" if l2 else None]
    details = [d for d in details if d]
    if details:
        title += " (" + ", ".join(details) + ")"
    ax.set_title(title, fontsize=16)
    ax.set_xlabel("Arithmetic intensity (FLOP/byte)", fontsize=14)
    ax.set_ylabel("Performance (GFLOP/s)", fontsize=14)
    ax.grid(True, which="major", alpha=0.45)
    ax.grid(True, which="minor", alpha=0.15)
    fig.tight_layout()
    # Along each bandwidth roof near its left end; the angle comes from the final layout.
    x_text = x_lo * 1.5
    for bw, label in slope_labels:
        if peak and bw * x_text * 3 >= peak:
            continue  # the sloped part is too short to hold a label
        (x0, y0), (x1, y1) = ax.transData.transform([(x_text, bw * x_text),
                                                     (x_text * 10, bw * x_text * 10)])
        ax.annotate(label, (x_text, bw * x_text), xytext=(0, 6), textcoords="offset points",
                    rotation=math.degrees(math.atan2(y1 - y0, x1 - x0)),
                    rotation_mode="anchor", ha="left", va="bottom", fontsize=13,
                    color="dimgray", fontweight="bold")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------
# Output


def write_json(report, path):
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)  # no half-written report if something fails
    except OSError as e:
        raise ReportError(f"cannot write {path}: {e.strerror or e}")


def run(inputs, json_path=None, png_path=None, out=None):
    out = out or sys.stdout
    docs = [load_json(p) for p in inputs]
    report = build_report(docs, inputs)
    if not report["shapes"] and not report["compile"]:
        raise ReportError("no benchmarks found in " + ", ".join(inputs))
    if json_path:
        write_json(report, json_path)
    if png_path:
        write_plot(report, png_path)
    out.write(markdown(report))
    return report


# ---------------------------------------------------------------------------------------------
# Self-test


def _iteration(base, real_time, **counters):
    """One iteration entry, as a run without repetitions writes it."""
    row = {"name": base, "run_name": base, "run_type": "iteration", "repetitions": 1,
           "repetition_index": 0, "threads": 1, "iterations": 100,
           "real_time": real_time, "cpu_time": real_time, "time_unit": "us"}
    row.update(counters)
    return row


def _sample_docs():
    """A repetitions run of frank-shapes and a PyTorch run without repetitions."""
    def agg(base, real_time, unit="us", **counters):
        # What --benchmark_report_aggregates_only writes: mean, median, stddev, cv.
        rows = []
        for kind, scale in (("mean", 1.1), ("median", 1.0), ("stddev", 0.05), ("cv", 0.02)):
            row = {"name": f"{base}_{kind}", "run_name": base, "run_type": "aggregate",
                   "repetitions": 3, "threads": 1, "aggregate_name": kind,
                   "aggregate_unit": "percentage" if kind == "cv" else "time",
                   "iterations": 3, "real_time": real_time * scale,
                   "cpu_time": real_time * scale, "time_unit": unit}
            row.update({k: v * (scale if kind != "cv" else 1) for k, v in counters.items()})
            rows.append(row)
        return rows

    def err(base, message):
        return [{"name": base, "run_name": base, "run_type": "iteration", "repetitions": 3,
                 "repetition_index": i, "threads": 1, "iterations": 0, "real_time": 0,
                 "cpu_time": 0, "time_unit": "us", "error_occurred": True,
                 "error_message": message} for i in range(3)]

    it = _iteration
    s7, s7b = 2.0 * 128 * 256 * 256, 4.0 * (128 * 256 + 256 * 256 + 128 * 256)
    s8, s8b = 2.0 * 256 * 256, 4.0 * (256 + 256 * 256 + 256)
    s3b = 2.0 * 4 * 128 * 2048
    S7 = "S7 matmul 128x256x256"
    S8 = "S8 matmul 1x256x256"
    S3 = "S3 embedding_lookup 32000x2048 ids 1x128"
    benchmarks = []
    # Warm, with a roofline counter (which wins over the computed one).
    benchmarks += agg(f"{S7}/frank-specialized/real_time", 400, flops=s7, bytes=s7b, cold=0,
                      roofline=0.42)
    benchmarks += agg(f"{S7}/frank-generic/real_time", 1.2, unit="ms", flops=s7, bytes=s7b,
                      cold=0)
    benchmarks += agg(f"{S7}/frank-partial/real_time", 500, flops=s7, bytes=s7b, cold=0)
    benchmarks += err(f"{S7}/onednn/real_time", "oneDNN is not installed")
    benchmarks += agg(f"{S7}/compile-cold/iterations:3/real_time", 85.0, unit="ms")
    benchmarks += agg(f"{S7}/disk-reload/iterations:3/real_time", 1.5, unit="ms")
    # A reload is no compile time: S8, which has only one, carries none.
    benchmarks += agg(f"{S8}/disk-reload/iterations:3/real_time", 2.5, unit="ms")
    # Cold, roofline computed from DRAM bandwidth; the peer has its own bytes.
    benchmarks += agg(f"{S8}/frank-specialized/real_time", 30, flops=s8, bytes=s8b, cold=1)
    benchmarks += agg(f"{S8}/frank-generic/real_time", 45, flops=s8, bytes=s8b, cold=1)
    benchmarks += agg(f"{S8}/openblas/real_time", 60, flops=s8, bytes=s8b / 2, cold=1)
    # A copy: no FLOPs.
    benchmarks += agg(f"{S3}/frank-specialized/real_time", 5, flops=0, bytes=s3b, cold=0)
    benchmarks += agg(f"{S3}/frank-generic/real_time", 10, flops=0, bytes=s3b, cold=0)
    shapes_doc = {
        "context": {"date": "2024-01-01T00:00:00", "num_cpus": 2, "library_build_type": "release",
                    "threads": "2", "peak_gflops": "100.00", "dram_gbps": "10.00",
                    "l3_gbps": "50.00", "l3_bytes": "33554432", "l2_gbps": "80.00",
                    "l2_bytes": "262144"},
        "benchmarks": benchmarks,
    }
    # No repetitions, no machine context, no roofline or cold counters: median of iterations.
    torch_doc = {
        "context": {"date": "2024-01-01T00:00:00", "num_cpus": 2},
        "benchmarks": [it(f"{S7}/torch", t, flops=s7, bytes=s7b, **{"FLOP/s": s7 / t * 1e6})
                       for t in (500, 700, 600)],
    }
    return shapes_doc, torch_doc


def _iree_doc():
    """What peers_iree.py writes: S8 skipped (compile and run), then medians for S7 and its
    compile (after S8, so that the compile section has to regroup them by shape)."""
    S7, S8 = "S7 matmul 128x256x256", "S8 matmul 1x256x256"
    s7, s7b = 2.0 * 128 * 256 * 256, 4.0 * (128 * 256 + 256 * 256 + 128 * 256)

    def median(name, real_time, unit, **counters):
        return {"name": f"{name}_median", "run_name": name, "run_type": "aggregate",
                "aggregate_name": "median", "repetitions": 3, "iterations": 10,
                "real_time": real_time, "time_unit": unit, **counters}

    def skip(name, message):
        return {"name": name, "run_name": name, "run_type": "iteration", "iterations": 0,
                "real_time": 0, "time_unit": "us", "error_occurred": True,
                "error_message": message}
    return {"context": {"iree": "3.0.0", "threads": "2"}, "benchmarks": [
        skip(f"{S8}/iree-compile", "matmul.mlir:1:1: error: no"),
        skip(f"{S8}/iree", "matmul.mlir:1:1: error: no"),
        median(f"{S7}/iree-compile", 1030, "ms"),
        median(f"{S7}/iree", 800, "us", flops=s7, bytes=s7b, cold=0),
    ]}


def self_test():
    failures = []

    def close(name, got, want, rel=1e-9):
        if got is None or want is None:
            if got is not want:
                failures.append(f"{name}: got {got!r}, want {want!r}")
        elif not math.isclose(got, want, rel_tol=rel, abs_tol=1e-15):
            failures.append(f"{name}: got {got!r}, want {want!r}")

    def check(name, cond):
        if not cond:
            failures.append(name)

    check("split_name", split_name("S7 matmul 128x4096x4096/compile-cold/iterations:3/real_time")
          == ("S7", "matmul 128x4096x4096", "compile-cold"))
    check("split_name slash", split_name("S9t32 a/b c/torch") == ("S9t32", "a/b c", "torch"))
    check("fmt_time µs", fmt_time(812.34e-6) == "812 µs")
    check("fmt_time small", fmt_time(0.51234e-6) == "0.512 µs")
    check("fmt_time ms", fmt_time(1.2e-3) == "1.20 ms")
    check("fmt_time round up", fmt_time(999.7e-6) == "1.00 ms")
    check("fmt_time long", fmt_time(1.234) == "1230 ms")

    shapes_doc, torch_doc = _sample_docs()
    report = build_report([shapes_doc, torch_doc])
    m = report["machine"]
    check("machine", m == {"peak_gflops": 100.0, "dram_gbps": 10.0, "l3_gbps": 50.0,
                           "l3_bytes": 33554432, "l2_gbps": 80.0, "l2_bytes": 262144,
                           "threads": 2})
    # Warm bytes that fit the two threads' L2s (512 KiB) are bound by L2, the rest by L3.
    close("warm in L2", roofline_bound(0, 524288, False, m), 524288 / 80e9)
    close("warm past L2", roofline_bound(0, 524289, False, m), 524289 / 50e9)
    close("cold", roofline_bound(0, 1000, True, m), 1000 / 10e9)
    check("implementations", report["implementations"] ==
          [SPECIALIZED, PARTIAL, GENERIC, "openblas", "onednn", "torch"])
    ids = [s["id"] for s in report["shapes"]]
    check(f"shape order {ids}", ids == ["S3", "S7", "S8"])
    check("natural order", sorted(["S10t1", "S9t32", "S1d", "S2", "S1", "S9t1"], key=shape_order)
          == ["S1", "S1d", "S2", "S9t1", "S9t32", "S10t1"])
    s3, s7, s8 = report["shapes"]

    s7f, s7b = 2.0 * 128 * 256 * 256, 4.0 * (128 * 256 + 256 * 256 + 128 * 256)
    close("S7 flops", s7["flops"], s7f)
    close("S7 intensity", s7["intensity"], s7f / s7b)
    check("S7 warm", s7["cold"] == 0)
    r = s7["results"]
    close("S7 spec seconds (median, not mean)", r[SPECIALIZED]["seconds"], 400e-6)
    close("S7 spec gflops", r[SPECIALIZED]["gflops"], s7f / 400e-6 / 1e9)
    close("S7 spec gbps", r[SPECIALIZED]["gbps"], s7b / 400e-6 / 1e9)
    close("S7 spec roofline from counter", r[SPECIALIZED]["roofline"], 0.42)
    close("S7 spec speedup", r[SPECIALIZED]["speedup_vs_generic"], 3.0)
    close("S7 generic seconds (ms unit)", r[GENERIC]["seconds"], 1.2e-3)
    close("S7 generic speedup", r[GENERIC]["speedup_vs_generic"], 1.0)
    check("S7 onednn skipped", r.get("onednn") == {"skipped": "oneDNN is not installed"})
    # torch: median of 500/700/600 us, roofline computed against L3 (warm).
    close("S7 torch seconds", r["torch"]["seconds"], 600e-6)
    warm_bound = max(s7f / 100e9, s7b / 50e9)
    close("S7 torch roofline", r["torch"]["roofline"], warm_bound / 600e-6)
    close("S7 torch speedup", r["torch"]["speedup_vs_generic"], 2.0)
    close("S7 partial speedup", r[PARTIAL]["speedup_vs_generic"], 2.4)
    close("S7 compile", s7["compile_ms"], 85.0)

    s8f, s8b = 2.0 * 256 * 256, 4.0 * (256 + 256 * 256 + 256)
    check("S8 cold", s8["cold"] == 1)
    r = s8["results"]
    cold_bound = max(s8f / 100e9, s8b / 10e9)
    close("S8 spec roofline (DRAM)", r[SPECIALIZED]["roofline"], cold_bound / 30e-6)
    close("S8 spec speedup", r[SPECIALIZED]["speedup_vs_generic"], 1.5)
    close("S8 openblas own bytes", r["openblas"]["gbps"], s8b / 2 / 60e-6 / 1e9)
    close("S8 openblas roofline", r["openblas"]["roofline"],
          max(s8f / 100e9, s8b / 2 / 10e9) / 60e-6)
    check("S8 no compile", s8["compile_ms"] is None)

    close("S3 flops", s3["flops"], 0.0)
    close("S3 gflops", s3["results"][SPECIALIZED]["gflops"], 0.0)
    close("geomean", report["geomean_specialized_over_generic"], (3.0 * 1.5 * 2.0) ** (1 / 3))
    kinds = [(c["id"], c["kind"]) for c in report["compile"]]
    check(f"compile section {kinds}", kinds ==
          [("S7", "compile-cold"), ("S7", RELOAD), ("S8", RELOAD)])
    points, off_plot = plot_points(report)
    check("S3 off the plot", [s["id"] for s in off_plot] == ["S3"])
    check("plot points", len(points) == 7)

    table = markdown(report)
    s7_row = next(line for line in table.splitlines() if line.startswith("| S7 "))
    for want in ("400 µs (42%)", "500 µs", "1.20 ms", "skipped", "3.00×", "warm"):
        check(f"table S7 row has {want!r}: {s7_row}", want in s7_row)
    check("table skip reason", "- onednn skipped on S7: oneDNN is not installed" in table)
    check("table geomean", "2.08×" in table)
    check("table compile", "| S7 | matmul 128x256x256 | compile-cold | 85.0 ms |" in table)
    check("table reload", "| S8 | matmul 1x256x256 | disk-reload | 2.50 ms |" in table)

    # An IREE file: its runs are a column, its compile times join the compile section beside
    # frank-shapes' of the same shape, and compile-cold stays the number a shape carries.
    iree = build_report([shapes_doc, torch_doc, _iree_doc()])
    check("iree implementations", iree["implementations"] ==
          [SPECIALIZED, PARTIAL, GENERIC, "openblas", "onednn", "torch", "iree"])
    s7, s8 = iree["shapes"][1], iree["shapes"][2]
    close("S7 iree seconds", s7["results"].get("iree", {}).get("seconds"), 800e-6)
    close("S7 iree speedup", s7["results"].get("iree", {}).get("speedup_vs_generic"), 1.5)
    check("S8 iree skipped", s8["results"].get("iree") ==
          {"skipped": "matmul.mlir:1:1: error: no"})
    close("S7 compile stays compile-cold", s7["compile_ms"], 85.0)
    kinds = [(c["id"], c["kind"]) for c in iree["compile"]]
    check(f"iree compile section {kinds}", kinds ==
          [("S7", "compile-cold"), ("S7", RELOAD), ("S7", "iree-compile"), ("S8", RELOAD),
           ("S8", "iree-compile")])
    compiles = {(c["id"], c["kind"]): c for c in iree["compile"]}
    close("S7 iree-compile ms", compiles.get(("S7", "iree-compile"), {}).get("ms"), 1030.0)
    check("S8 iree-compile skipped", compiles.get(("S8", "iree-compile"), {}).get("skipped") ==
          "matmul.mlir:1:1: error: no")
    table = markdown(iree)
    check("iree table compile", "| S7 | matmul 128x256x256 | iree-compile | 1030 ms |" in table)
    s7_row = next(line for line in table.splitlines() if line.startswith("| S7 "))
    check(f"table S7 row has the iree time: {s7_row}", "| 800 µs (" in s7_row)

    # A cold shape's dram-read sets its own DRAM roof over the machine's 10 GB/s, for results
    # without a roofline counter: its 1 MB of weights in 50 us is 20 GB/s. The reference is a
    # column, but no implementation: no speedup, no plot point.
    S9 = "S9t1 mul_mat_id T=1"
    s9f, s9b = 2.0 * 256 * 512, 1.1e6
    own_doc = {"benchmarks": [
        _iteration(f"{S9}/frank-specialized/real_time", 80, flops=s9f, bytes=s9b, cold=1,
                   roofline=0.3),
        _iteration(f"{S9}/frank-generic/real_time", 400, flops=s9f, bytes=s9b, cold=1),
        _iteration(f"{S9}/dram-read/real_time", 50, bytes=1e6, cold=1)]}
    own = build_report([shapes_doc, torch_doc, own_doc])
    s9 = next(shape for shape in own["shapes"] if shape["id"] == "S9t1")
    close("S9 own DRAM", s9["dram_gbps"], 20.0)
    r = s9["results"]
    close("S9 spec roofline (counter)", r[SPECIALIZED]["roofline"], 0.3)
    close("S9 generic roofline (own DRAM)", r[GENERIC]["roofline"], s9b / 20e9 / 400e-6)
    close("S9 read gbps", r[DRAM_READ]["gbps"], 20.0)
    check("S9 read has no roofline or speedup",
          r[DRAM_READ]["roofline"] is None and r[DRAM_READ]["speedup_vs_generic"] is None)
    check("dram-read is the last column", own["implementations"][-1] == DRAM_READ)
    close("S8 keeps the machine's DRAM", next(
        shape for shape in own["shapes"] if shape["id"] == "S8")["results"][SPECIALIZED][
        "roofline"], cold_bound / 30e-6)
    points, _ = plot_points(own)
    check("no dram-read point", all(impl != DRAM_READ for _, impl, *_ in points))

    # A warm shape's cache-copy is a column as well: no roofline, no speedup, no plot point.
    copy_doc = {"benchmarks": [_iteration(f"{S9}/frank-specialized/real_time", 80, flops=s9f,
                                          bytes=s9b, cold=0),
                               _iteration(f"{S9}/frank-generic/real_time", 400, flops=s9f,
                                          bytes=s9b, cold=0),
                               _iteration(f"{S9}/cache-copy/real_time", 60, bytes=s9b, cold=0)]}
    copied = build_report([shapes_doc, copy_doc])
    r = next(shape for shape in copied["shapes"] if shape["id"] == "S9t1")["results"]
    close("S9 copy gbps", r[CACHE_COPY]["gbps"], s9b / 60e-6 / 1e9)
    check("S9 copy has no roofline or speedup",
          r[CACHE_COPY]["roofline"] is None and r[CACHE_COPY]["speedup_vs_generic"] is None)
    check("cache-copy is the last column", copied["implementations"][-1] == CACHE_COPY)
    check("no cache-copy point", all(impl != CACHE_COPY for _, impl, *_ in plot_points(copied)[0]))
    s9_row = next(line for line in markdown(own).splitlines() if line.startswith("| S9t1 "))
    check(f"table S9 row: {s9_row}", "| 80.0 µs (" in s9_row and "| 50.0 µs |" in s9_row)

    # Same numbers when the median comes from iteration entries instead of an aggregate.
    plain = {"benchmarks": [dict(e, run_type="iteration") for e in shapes_doc["benchmarks"]
                            if e.get("aggregate_name") in (None, "median")]}
    for e in plain["benchmarks"]:
        e.pop("aggregate_name", None)
    runs = dict(collect_runs(plain))
    close("iteration path", runs["S7 matmul 128x256x256/frank-specialized/real_time"]["seconds"],
          400e-6)

    # End to end through files, including the plot when matplotlib is there.
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, doc in enumerate((shapes_doc, torch_doc, _iree_doc())):
            paths.append(os.path.join(tmp, f"in{i}.json"))
            with open(paths[-1], "w", encoding="utf-8") as f:
                json.dump(doc, f)
        out_json, out_png = os.path.join(tmp, "r.json"), os.path.join(tmp, "r.png")

        class Sink:
            def write(self, _):
                pass

        run(paths, out_json, out_png, out=Sink())
        with open(out_json, encoding="utf-8") as f:
            written = json.load(f)
        close("written geomean", written["geomean_specialized_over_generic"],
              report["geomean_specialized_over_generic"])
        try:
            import matplotlib  # noqa: F401
            with open(out_png, "rb") as f:
                check("png written", f.read(8) == b"\x89PNG\r\n\x1a\n")
        except ImportError:
            print(f"{PROG}: self-test: matplotlib missing, plot not tested", file=sys.stderr)
        for bad, text in (("missing.json", None), ("bad.json", "{not json"),
                          ("wrong.json", '{"foo": 1}')):
            path = os.path.join(tmp, bad)
            if text is not None:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            try:
                run([path], out=Sink())
                failures.append(f"{bad}: no error")
            except ReportError:
                pass

    if failures:
        for f in failures:
            print(f"{PROG}: self-test FAILED: {f}", file=sys.stderr)
        return 1
    print(f"{PROG}: self-test passed")
    return 0


# ---------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Report (JSON, roofline PNG, Markdown table) from frank-shapes' "
                    "--benchmark_format=json output.")
    parser.add_argument("inputs", nargs="*", metavar="INPUT.json",
                        help="frank-shapes JSON first; more files (e.g. PyTorch) add peers")
    parser.add_argument("--json", metavar="OUT.json", help="write the JSON report here")
    parser.add_argument("--png", metavar="OUT.png", help="write the roofline plot here")
    parser.add_argument("--self-test", action="store_true",
                        help="check the pipeline on an embedded sample and exit")
    args = parser.parse_args(argv)

    # µ and × must not crash a run whose stdout is ASCII (LANG=C, a pipe).
    try:
        "µ×—".encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        if hasattr(sys.stdout, "reconfigure"):
            sys.stdout.reconfigure(encoding="utf-8")

    if args.self_test:
        return self_test()
    if not args.inputs:
        parser.error("no input file (or --self-test)")
    try:
        run(args.inputs, args.json, args.png)
    except ReportError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # the PNG (matplotlib raises the OSError of its file)
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
