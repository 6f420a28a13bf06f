#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/ (checked in; run again after adding a component).

fuzz_parse:      every .mlir file of components/ and tests/data.
fuzz_specialize: for every function fuzz_specialize knows (the same sorted order), arguments of
                 a shape that the function accepts, under several configurations and stages.
fuzz_npy:        small valid files of every dtype and format version, and broken ones.
Crashing inputs that the fuzzers found are kept beside these, named crash-*; this script leaves
them alone.
"""
import pathlib
import shutil
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def clear(directory, prefix):
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob(prefix + "*"):
        old.unlink()


def parse_corpus():
    out = CORPUS / "fuzz_parse"
    clear(out, "seed-")
    for base in (ROOT / "components", ROOT / "tests" / "data"):
        for path in sorted(base.rglob("*.mlir")):
            shutil.copy(path, out / ("seed-" + path.name))


# Argument bytes per function, in fuzz_specialize's order (sorted file paths, then the order of
# the functions in each file). See fuzz_specialize.cpp for the encoding: 0..64 is a dim,
# 0xC0 + i reuses the i-th dim chosen so far, 0x40 + v + 8 is the index value v, and an index
# byte below 0x40 reuses a dim.
C = 0xC0


def idx(value):
    return 0x40 + value + 8


SPECIALIZE_SEEDS = [
    ("swiglu", [[2, 3, 8, C, C + 1, C + 2]]),
    # input [1,4,16], positions [1,4], wq, wk [16,8], wv, wo, bq, bk, bv, bo, use_bias,
    # n_head 4, n_head_kv 2, n_embd (dim #2 = 16)
    ("attention_block", [[1, 4, 16, C, C + 1, C + 2, C + 2, C + 2, 8, C + 2, C + 8, C + 2, C + 2,
                          C + 2, C + 8, C + 8, C + 2, 1, idx(4), idx(2), 2],
                         [1, 4, 16, C, C + 1, C + 2, C + 2, C + 2, 8, C + 2, C + 8, C + 2, C + 2,
                          C + 2, C + 8, C + 8, C + 2, 0, idx(4), idx(2), 2]]),
    ("attention_gqa", [[1, 4, 4, 8, C, 6, 2, C + 3, C, C + 5, C + 6, C + 3]]),
    ("attention_gqa_causal", [[1, 4, 4, 8, C, 6, 2, C + 3, C, C + 5, C + 6, C + 3],
                              [2, 5, 2, 4, C, 3, 1, C + 3, C, C + 5, C + 6, C + 3]]),
    ("attention_gqa_decode", [[1, 1, 4, 8, C, 6, 2, C + 3, C, C + 5, C + 6, C + 3]]),
    ("embedding_lookup", [[10, 8, 2, 3]]),
    ("embedding_lookup_1d", [[10, 8, 5]]),
    ("matmul", [[5, 7, C + 1, 9], [16, 64, C + 1, 32]]),
    ("matmul_transpose_b", [[5, 7, 9, C + 1], [16, 64, 32, C + 1]]),
    # input [3,8], router [4,8], up/gate [16,8,4], down [8,16,4], n_expert 4, n_expert_used 2,
    # n_embd 8, n_ff 16, normalize
    ("moe_ffn_block", [[3, 8, 4, C + 1, 16, C + 1, C + 2, C + 4, C + 1, C + 2, C + 1, C + 4,
                        C + 2, 2, idx(2), 1, 4, 1]]),
    ("mul_mat_id", [[6, 8, 4, C + 1, 2, 3, C + 4, C + 5]]),
    ("rms_norm_linalg", [[3, 16, C + 1], [1, 64, C + 1]]),
    ("rms_norm_fused", [[3, 16, C + 1]]),
    ("rope", [[1, 4, 2, 8, C, C + 1]]),
    # tests/data/all_ops.mlir @f(x, i, w, b, q, n)
    ("all_ops.f", [[4, 6, 3, C + 1, C, 1, 2, 3, 3, idx(2)], [4, 6, 3, C + 1, C, 0, 2, 3, 3, idx(2)]]),
    # tests/data/scf_for.mlir @f(x ?x4, steps)
    ("scf_for.f", [[5, 0, idx(3)]]),
]

# Configuration and stage bytes: default loops, default LLVM IR, generic, and three lowering
# overrides (see kOptions in fuzz_specialize.cpp).
FLAGS = [0x00, 0x10, 0x08, 0x12, 0x13, 0x16]

# Partial specialization (flags bit 6) and which fresh dynamic dims stay runtime values: the
# first, the second (a sequence length after a batch of 1), or all; loops and LLVM IR.
RUNTIME = [(0x40, 0x01), (0x40, 0x02), (0x50, 0x02), (0x40, 0xFF), (0x55, 0x03)]


def specialize_corpus():
    out = CORPUS / "fuzz_specialize"
    clear(out, "seed-")
    for function, (name, variants) in enumerate(SPECIALIZE_SEEDS):
        for v, args in enumerate(variants):
            for flags in FLAGS:
                data = bytes([function, flags] + args)
                (out / f"seed-{name}-{v}-{flags:02x}").write_bytes(data)
            for flags, mask in RUNTIME:
                data = bytes([function, flags, mask] + args)
                (out / f"seed-{name}-{v}-{flags:02x}-r{mask:02x}").write_bytes(data)


def npy(descr, shape, data, major=1, fortran=False, pad=True):
    shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", shape_text)
    width = 2 if major == 1 else 4
    if pad:
        unpadded = 6 + 2 + width + len(header) + 1
        header += " " * (64 - unpadded % 64)
    header += "\n"
    length = struct.pack("<H" if width == 2 else "<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + length + header.encode() + data


def npy_corpus():
    out = CORPUS / "fuzz_npy"
    clear(out, "seed-")
    files = {
        "f32_2x3": npy("<f4", [2, 3], struct.pack("<6f", 1, 2, 3, 4, 5, 6)),
        "f16_4": npy("<f2", [4], bytes(8)),
        "f64_scalar": npy("<f8", [], struct.pack("<d", 2.5)),
        "bool_3": npy("|b1", [3], b"\x01\x00\x01"),
        "i8_2x2": npy("|i1", [2, 2], b"\x01\xff\x02\xfe"),
        "i16_2": npy("<i2", [2], struct.pack("<2h", -1, 7)),
        "i32_1x1x2": npy("<i4", [1, 1, 2], struct.pack("<2i", 3, -3)),
        "i64_0x5": npy("<i8", [0, 5], b""),
        "v2_f32_2": npy("<f4", [2], struct.pack("<2f", 1, 2), major=2),
        "v3_i64_1": npy("<i8", [1], struct.pack("<q", 42), major=3),
        "unpadded_i8_3": npy("|i1", [3], b"abc", pad=False),
        "big_endian": npy(">f4", [1], b"\x3f\x80\x00\x00"),
        "fortran": npy("<f4", [2, 2], bytes(16), fortran=True),
        "truncated_data": npy("<f4", [4], bytes(8)),
        "trailing_data": npy("<i8", [1], bytes(16)),
        "huge_shape": npy("<f4", [1 << 40, 1 << 40], b""),
        "bad_magic": b"\x93NUMPX\x01\x00" + bytes(8),
        "bad_version": b"\x93NUMPY\x04\x00\x10\x00" + b"{}".ljust(16),
        "short": b"\x93NUM",
    }
    for name, data in files.items():
        (out / f"seed-{name}.npy").write_bytes(data)


if __name__ == "__main__":
    parse_corpus()
    specialize_corpus()
    npy_corpus()
