#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target (tests/fuzz/corpus/<target>/): a few small, valid
inputs of each format, from which libFuzzer mutates. Run it again after a format changes; the files
are committed. Usage: tests/fuzz/make_corpus.py [OUT]   (default: tests/fuzz/corpus beside it)"""
import gzip
import json
import os
import struct
import sys
import zlib

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
repo = os.path.dirname(os.path.dirname(here))


def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# IDX: images (magic 0x803, count, rows, cols, pixels) and labels (0x801, count, labels).
def idx_images(n, r, c):
    return struct.pack(">IIII", 0x803, n, r, c) + bytes((i * 37) % 256 for i in range(n * r * c))


def idx_labels(n):
    return struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n))


put("idx", "images_2x3x3", idx_images(2, 3, 3))
put("idx", "images_2x3x3.gz", gzip.compress(idx_images(2, 3, 3), mtime=0))
put("idx", "labels_5", idx_labels(5))
put("idx", "labels_5.gz", gzip.compress(idx_labels(5), mtime=0))
put("idx", "empty_images", idx_images(0, 28, 28))

# CIFAR-10 binary: records of a label byte and 3072 pixel bytes.
record = lambda label: bytes([label]) + bytes((i * 13 + label) % 256 for i in range(3072))
put("cifar", "one_record", record(3))
put("cifar", "two_records", record(0) + record(9))


# Token files: "EDPTOK01", u32 bytes per token, u32 vocabulary, u64 count, the ids.
def tokens(width, vocab, ids):
    fmt = {1: "B", 2: "<H", 4: "<I"}[width]
    return b"EDPTOK01" + struct.pack("<IIQ", width, vocab, len(ids)) + b"".join(struct.pack(fmt, i) for i in ids)


put("tokens", "bytes", tokens(1, 256, list(b"the quick brown fox jumps over the lazy dog")))
put("tokens", "width2", tokens(2, 1000, [i * 37 % 1000 for i in range(40)]))
put("tokens", "width4", tokens(4, 70000, [i * 1237 % 70000 for i in range(20)]))


# Checkpoints (the body: the target appends the CRC-32 trailer when the first byte is odd).
def ckpt_body(meta, tensors):
    b = b"EDPCKPT1" + struct.pack("<II", 1, 0) + struct.pack("<I", len(meta))
    for k, v in meta:
        b += struct.pack("<I", len(k)) + k.encode() + struct.pack("<I", len(v)) + v.encode()
    b += struct.pack("<I", len(tensors))
    for name, dtype, dims, data in tensors:
        b += struct.pack("<I", len(name)) + name.encode()
        if dtype is None:
            b += b"\xff"
            continue
        b += struct.pack("<BB", dtype, len(dims)) + b"".join(struct.pack("<q", d) for d in dims)
        b += struct.pack("<Q", len(data)) + data
    return b


body = ckpt_body([("step", "8"), ("world_size", "2"), ("config.--lr", "0.1")],
                 [("model.fc.weight", 0, [2, 3], struct.pack("<6f", *range(6))),
                  ("optim.0", None, [], b""), ("buffer.bn.mean", 0, [3], struct.pack("<3f", 1, 2, 3))])
put("checkpoint", "fixed_trailer", b"\x01" + body)
put("checkpoint", "whole_file", b"\x00" + body + struct.pack("<I", zlib.crc32(body)) + b"EDPCKEND")
put("checkpoint", "empty", b"\x01" + ckpt_body([], []))


# The decoded-data cache: "EDPIDXC2", count, rows, cols, source hash and size, pixels' CRC-32, 0, pixels.
def cache(n, r, c):
    px = bytes((i * 7) % 256 for i in range(n * r * c))
    return b"EDPIDXC2" + struct.pack("<qqqQQII", n, r, c, 0x1234ABCD5678EF01, 4242, zlib.crc32(px), 0) + px


put("data_cache", "3x4x4", cache(3, 4, 4))
put("data_cache", "empty", cache(0, 28, 28))

# Plan requests: the documented example (v2), a v1 table request, a learned job.
with open(os.path.join(repo, "docs", "plan_example.json"), "rb") as f:
    put("plan", "example_v2.json", f.read())
put("plan", "v1.json", json.dumps({"gpus": 6, "rescale_penalty": 0.1, "jobs": [
    {"id": "a", "min_gpus": 0, "max_gpus": 4, "max_batch_per_gpu": 128, "ref": {"gpus": 1, "batch": 64},
     "throughput": [{"gpus": 1, "batch": 64, "samples_per_s": 100}, {"gpus": 2, "batch": 256, "samples_per_s": 280}],
     "current": {"gpus": 1, "batch": 64}},
    {"id": "b", "min_gpus": 1, "max_gpus": 2, "max_batch_per_gpu": 16, "weight": 2, "ref": {"gpus": 2, "batch": 16},
     "throughput": [{"gpus": 1, "batch": 16, "samples_per_s": 10}, {"gpus": 2, "batch": 16, "samples_per_s": 18}]}]}))
put("plan", "learned_nodes.json", json.dumps({"version": 2, "gpus": 8, "nodes": [4, 4], "policy": "remaining",
    "jobs": [{"id": "l", "remaining": 1e6, "current": {"gpus": 2, "batch": 64, "nodes": [0, 0]},
              "learn": {"init_batch": 64, "max_batch": 1024, "observed": [
                  {"nodes": 1, "gpus": 2, "local_batch": 32, "step_s": 0.05, "sync_s": 0.01}],
                  "grad": {"sqr": 1.0, "var": 4.0}}},
             {"id": "w", "remaining": 5e5, "options": [{"gpus": 1, "batch": 32, "samples_per_s": 500},
                                                        {"gpus": 4, "batch": 128, "samples_per_s": 1700}]}]}))

# Job specs: the repository's examples, and a job table with one job.
for name in ("cnn.json", "mlp_small.json"):
    with open(os.path.join(repo, "examples", "specs", name), "rb") as f:
        put("job_spec", name, f.read())
put("job_spec", "env_cwd.json", json.dumps({"name": "x", "command": ["/bin/prog", "--a", "{job_dir}"], "cwd": "/tmp",
                                            "env": {"EDP_LOG_LEVEL": "warn"}, "min_batch": 64, "max_batch": 256,
                                            "workers": 2, "max_workers": 4, "batch": 128, "preemptible": True}))

# Control files and EDP_ALLOWED_WORKERS lists.
put("control", "workers", '{"workers": 2}')
put("control", "workers_batch", '{"workers": 4, "global_batch": 256}')
put("control", "stop", '{"stop": true}')
put("control", "allowed", "1-4,6,8")

# Hostfiles and Slurm node lists.
put("hostfile", "hosts", "# the cluster\nnodeA slots=2\nnodeB slots=4 max_slots=8\nnodeA\n")
put("hostfile", "nodelist", "node[01-04,07],gpu7,rack[1-2]")

# owner.json of a job directory.
put("owner", "owner.json", json.dumps({"pid": 4242, "start_time": 123456, "host": "nodeA",
                                       "pid_ns": "pid:[4026531836]", "shm_dir": "/dev/shm/edprun.Ab3dEf"}))

# Events (JSON lines), a status file, a rescale record.
put("events", "events.jsonl", "\n".join(json.dumps(e) for e in [
    {"event": "start", "workers": 2, "global_batch": 128, "step": 0, "t": 1795460000.12, "threads": [1, 1]},
    {"event": "rescale", "mode": "in_place", "from_workers": 2, "workers": 4, "from_global_batch": 128,
     "global_batch": 256, "step": 37, "requested_t": 1795460010.0, "t": 1795460010.5, "pause_s": 0.41,
     "visible_s": 0.2, "phases": {"decide_s": 0.01, "spawn_s": 0.3}},
    {"event": "rate", "workers": 4, "global_batch": 256, "step": 58, "t": 1795460020.0, "steps": 20,
     "samples_per_s": 10450.2},
    {"event": "stop", "workers": 4, "global_batch": 256, "step": 80, "t": 1795460030.0}]) + "\n")
put("events", "status.json", json.dumps({"name": "mlp", "state": "running", "t": 1795460000.1, "workers": 2,
                                         "global_batch": 128, "epoch": 0, "epochs": 3, "step": 120,
                                         "samples_done": 15360, "samples_total": 180000, "configs": [
                                             {"workers": 2, "global_batch": 128, "steps": 100, "step_s": 0.0123,
                                              "comm_s": 0.0011}]}))
put("events", "rescale.json", json.dumps({"workers": 2, "global_batch": 64, "step": 5,
                                          "checkpoint": "ck/ckpt-000000000005.edp"}))
# Users' arrays (fuzz_arrays: the first byte picks .npy 0, .npz 1, CSV 2, CSV with a header 3).
def npy(descr, shape, body):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    pad = 64 - (10 + len(d) + 1) % 64
    h = (d + " " * pad + "\n").encode()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + body


def zip_entries(entries, deflate):
    out, cd = b"", b""
    for name, data in entries:
        body = data
        if deflate:
            c = zlib.compressobj(6, zlib.DEFLATED, -15)
            body = c.compress(data) + c.flush()
        crc = zlib.crc32(data) & 0xffffffff
        local = len(out)
        method = 8 if deflate else 0
        out += struct.pack("<IHHHHHIIIHH", 0x04034b50, 20, 0, method, 0, 0, crc, len(body), len(data),
                           len(name), 0) + name.encode() + body
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 20, 20, 0, method, 0, 0, crc, len(body), len(data),
                          len(name), 0, 0, 0, 0, 0, local) + name.encode()
    return out + cd + struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, len(entries), len(entries), len(cd), len(out), 0)


x8 = npy("<f8", "(3, 2)", struct.pack("<6d", 1, 2, 3, 4, 5, 6))
y8 = npy("<i8", "(3,)", struct.pack("<3q", 0, 2, 1))
put("arrays", "npy_f8", b"\x00" + x8)
put("arrays", "npy_big_endian_i2", b"\x00" + npy(">i2", "(2, 2)", struct.pack(">4h", -1, 2, 300, -400)))
put("arrays", "npy_bool", b"\x00" + npy("|b1", "(4,)", bytes([1, 0, 1, 1])))
put("arrays", "npz_stored", b"\x01" + zip_entries([("x.npy", x8), ("y.npy", y8)], False))
put("arrays", "npz_deflated", b"\x01" + zip_entries([("x.npy", x8), ("y.npy", y8)], True))
put("arrays", "csv_plain", b"\x02" + b"0,1.5,2\n1,-3,4e2\n0,5,6\n")
put("arrays", "csv_header", b"\x03" + b'a,"b, quoted",y\n1,2,cat\n3,4,dog\n5,"6",cat\n')

print("seed corpus written to", out)
