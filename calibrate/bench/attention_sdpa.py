#!/usr/bin/env python3
"""Fused attention on one GPU as the training stacks run it, by sequence length.

Times PyTorch's scaled_dot_product_attention through its cuDNN backend (the fused SDPA that
Transformer Engine's DotProductAttention runs by default on Hopper) and its flash backend
(FlashAttention-2), forward and backward, causal and not, bf16, for multi-head and
grouped-query heads at the FlashAttention benchmark setting (16k tokens per batch: batch =
16384 / seqlen; hidden 2048 for MHA). Writes a CSV in the form of tests/data/measured/'s
attention tables, with its provenance in '#' lines, for the profile tests to compare with.

FLOPs follow the FlashAttention papers' convention: forward 4 * batch * heads * seqlen^2 *
head_dim, halved when causal; backward 2.5 times the forward.
Timing: CUDA events around each call, 3 untimed calls first, median of --repeats. Backward
is timed alone (one forward with the graph kept, then backward with retain_graph).

With --json it also writes the points as a stepcast.measurements/1 file (an "attention"
array) for `stepcast fit`, which fits the profile's compute.attention curve to them;
--from-csv converts a CSV this script wrote earlier (no GPU needed).

Optional: run by calibrate/verify_on_gpu.sh when python3 imports torch with CUDA; it is not
part of the C++ build and nothing in the build depends on it.
Usage: attention_sdpa.py OUT.csv [--json OUT.json] [--repeats N] [--quick]
       attention_sdpa.py --from-csv IN.csv --json OUT.json
"""
import argparse
import datetime
import json
import platform
import re
import sys

from torch_timing import cuda_torch, timed as torch_timing

COLUMNS = "backend,causal,head_dim,heads,kv_heads,seqlen,batch,direction,ms,tflops"


def fa_flops(batch, heads, seq, head_dim, causal, backward):
    """FlashAttention convention (model/workload.cc uses the same)."""
    return 4.0 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0) * (
        2.5 if backward else 1.0)


def write_json(path, rows, gpu_name, date_utc, software, repeats):
    """rows: CSV-shaped tuples. Times in us; flop_per_s recomputed from the time."""
    points = []
    for backend, causal, hd, heads, kv, s, b, direction, ms, _ in rows:
        t_us = ms * 1e3
        fl = fa_flops(b, heads, s, hd, causal, direction == "bwd")
        points.append({"backend": backend, "causal": causal, "direction": direction,
                       "batch": b, "heads": heads, "kv_heads": kv, "seq_q": s, "seq_kv": s,
                       "head_dim": hd, "dtype": "bf16", "time_us": t_us,
                       "flop_per_s": fl / (t_us * 1e-6), "repeats": repeats})
    doc = {"schema": "stepcast.measurements/1",
           "source": "calibrate/bench/attention_sdpa.py (" + software + ")",
           "subcommands": ["attention"],
           "provenance": {"gpu_name": gpu_name, "gpu_count": 1, "nodes": 1,
                          "date_utc": date_utc},
           "attention": points}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def from_csv(csv_path, json_path):
    """The CSV's '#' lines give the GPU, date, software and repeats; its rows the points."""
    gpu, date, software, repeats, rows = "unknown GPU", "", "", 1, []
    with open(csv_path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("#"):
                m = re.search(r" on (.+?) \(\d+ SMs.*\), (\d{4}-\d\d-\d\d)", line)
                if m:
                    gpu, date = m.group(1), m.group(2)
                m = re.search(r"# (torch [^;]*);.*median of (\d+)", line)
                if m:
                    software, repeats = m.group(1), int(m.group(2))
                continue
            if not line or line == COLUMNS:
                continue
            c = line.split(",")
            rows.append((c[0], c[1] == "True", int(c[2]), int(c[3]), int(c[4]), int(c[5]),
                         int(c[6]), c[7], float(c[8]), float(c[9])))
    write_json(json_path, rows, gpu, date, software, repeats)
    print(f"attention_sdpa: {len(rows)} rows of {csv_path} -> {json_path}")
    return 0 if rows else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", help="CSV to write")
    ap.add_argument("--json", help="also write a stepcast.measurements/1 file")
    ap.add_argument("--from-csv", help="convert this CSV to --json instead of measuring")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="seqlen 1k, 4k, 16k only")
    args = ap.parse_args()
    if args.from_csv:
        if not args.json:
            ap.error("--from-csv needs --json")
        return from_csv(args.from_csv, args.json)
    if not args.out:
        ap.error("the CSV to write is required")
    found = cuda_torch("attention_sdpa")
    if not found:
        return 3
    torch, dev = found
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    props = torch.cuda.get_device_properties(dev)

    def timed(fn):
        return torch_timing(torch, fn, args.repeats)

    seqs = [1024, 4096, 16384] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    # (heads, kv_heads, head_dim): FA benchmark MHA at hidden 2048, and Llama-style GQA.
    shapes = [(32, 32, 64), (16, 16, 128), (32, 8, 128)]
    backends = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]
    cudnn = torch.backends.cudnn.version()
    f = open(args.out, "w")
    f.write(f"# Fused attention measured by calibrate/bench/attention_sdpa.py on "
            f"{props.name} ({props.multi_processor_count} SMs, "
            f"{props.total_memory / 2**30:.0f} GiB), {datetime.date.today()}\n")
    f.write(f"# torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}, "
            f"host {platform.node()}; bf16; batch = 16384 / seqlen; median of "
            f"{args.repeats} after 3 warm-ups (CUDA events)\n")
    f.write("# backend cudnn = PyTorch SDPA's cuDNN fused attention (what TE runs on "
            "Hopper); flash = its FlashAttention-2\n")
    f.write("# tflops: FA convention, fwd 4*b*h*s^2*d (x0.5 causal), bwd 2.5x fwd\n")
    f.write(COLUMNS + "\n")
    rows = []
    for name, backend in backends:
        for heads, kv_heads, hd in shapes:
            for causal in (True, False):
                for s in seqs:
                    b = 16384 // s
                    g = torch.Generator(device=dev).manual_seed(s * 131 + hd)
                    q = torch.randn(b, heads, s, hd, device=dev, dtype=torch.bfloat16,
                                    generator=g, requires_grad=True)
                    k = torch.randn(b, kv_heads, s, hd, device=dev, dtype=torch.bfloat16,
                                    generator=g, requires_grad=True)
                    v = torch.randn(b, kv_heads, s, hd, device=dev, dtype=torch.bfloat16,
                                    generator=g, requires_grad=True)
                    gqa = kv_heads != heads
                    fwd_flops = fa_flops(b, heads, s, hd, causal, False)
                    try:
                        with sdpa_kernel(backend):
                            def fwd():
                                return F.scaled_dot_product_attention(
                                    q, k, v, is_causal=causal, enable_gqa=gqa)
                            t_fwd = timed(fwd)
                            out = fwd()
                            dout = torch.randn_like(out)

                            def bwd():
                                torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
                            t_bwd = timed(bwd)
                    except RuntimeError as e:  # backend cannot run this shape
                        msg = str(e).splitlines()[0][:80].replace(",", ";")
                        print(f"skip {name} h{heads}/{kv_heads} d{hd} s{s} causal={causal}: {msg}")
                        continue
                    for direction, t, fl in (("fwd", t_fwd, fwd_flops),
                                             ("bwd", t_bwd, 2.5 * fwd_flops)):
                        rows.append((name, causal, hd, heads, kv_heads, s, b, direction,
                                     t * 1e3, fl / t / 1e12))
                        f.write("%s,%s,%d,%d,%d,%d,%d,%s,%.4f,%.1f\n" % rows[-1])
                    f.flush()
                    print(f"{name:5s} h{heads:2d}/{kv_heads:2d} d{hd:3d} s{s:5d} "
                          f"causal={causal!s:5s} fwd {fwd_flops / t_fwd / 1e12:6.1f} "
                          f"bwd {2.5 * fwd_flops / t_bwd / 1e12:6.1f} TFLOP/s", flush=True)
                    del q, k, v, out, dout
    f.close()
    print(f"attention_sdpa: {len(rows)} rows -> {args.out}")
    if args.json:
        software = f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}"
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        write_json(args.json, rows, props.name, date, software, args.repeats)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
