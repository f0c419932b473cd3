#!/usr/bin/env python3
"""Memory-bound kernels as a PyTorch training stack runs them, against a plain copy.

stepcast charges every memory-bound task its bytes at compute.memory_bound_efficiency of
the HBM datasheet bandwidth, fitted to a device-to-device copy (stepcast-bench memory). This
measures what the framework's own kernels reach at the shapes of a training step, each
timed with CUDA events (median of --repeats after 3 warm-ups) and charged the fewest bytes
it must move (each input read once, each output written once):
  copy            x -> y, bf16                                   2 * N * 2 bytes
  layer_norm fwd  x (bf16) -> y, weight and bias                 2 * N * 2 (+ params)
  layer_norm bwd  dy, x -> dx (dw, db reduced)                   3 * N * 2
  rms_norm fwd/bwd  as layer_norm, no bias
  gelu fwd / bwd  x -> y; dy, x -> dx                            2 / 3 * N * 2
  cross_entropy   logits (bf16, rows x vocab) -> loss, fwd; bwd: logits -> dlogits
                  (fwd reads N * 2, bwd reads and writes N * 2 each)
  adamw (fused)   p, g, m, v fp32 -> p, m, v                     (4 reads + 3 writes) * 4 * P
Shapes: tokens 4096 (one 4096-token microbatch), hidden 2048 and 8192, ffn 4 x hidden,
vocab 131072, AdamW over 256 M parameters.
Usage: membound_torch.py OUT.csv [--repeats N]   (optional, like attention_sdpa.py)
"""
import argparse
import datetime
import sys

from torch_timing import cuda_torch, timed as torch_timing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    found = cuda_torch("membound_torch")
    if not found:
        return 3
    torch, dev = found
    import torch.nn.functional as F
    bf = torch.bfloat16

    def timed(fn):
        return torch_timing(torch, fn, args.repeats)

    rows = []

    def add(kernel, shape, nbytes, t):
        rows.append((kernel, shape, nbytes, t * 1e6, nbytes / t / 1e9))
        print(f"{kernel:16s} {shape:18s} {nbytes / 2**20:9.1f} MiB {t * 1e6:9.1f} us "
              f"{nbytes / t / 1e9:7.0f} GB/s", flush=True)

    tokens = 4096
    for hidden in (2048, 8192):
        shape = f"{tokens}x{hidden}"
        n = tokens * hidden
        x = torch.randn(tokens, hidden, device=dev, dtype=bf, requires_grad=True)
        y = torch.empty_like(x)
        add("copy", shape, 4 * n, timed(lambda: y.copy_(x)))
        w = torch.ones(hidden, device=dev, dtype=bf, requires_grad=True)
        bias = torch.zeros(hidden, device=dev, dtype=bf, requires_grad=True)
        dy = torch.randn_like(x)
        for name, fn in (("layer_norm", lambda: F.layer_norm(x, (hidden,), w, bias)),
                         ("rms_norm", lambda: F.rms_norm(x, (hidden,), w))):
            add(name + " fwd", shape, 4 * n, timed(fn))
            out = fn()
            add(name + " bwd", shape, 6 * n, timed(
                lambda: torch.autograd.grad(out, (x, w), dy, retain_graph=True)))
        h = torch.randn(tokens, 4 * hidden, device=dev, dtype=bf, requires_grad=True)
        dh = torch.randn_like(h)
        add("gelu fwd", f"{tokens}x{4 * hidden}", 4 * 4 * n, timed(lambda: F.gelu(h)))
        g = F.gelu(h)
        add("gelu bwd", f"{tokens}x{4 * hidden}", 6 * 4 * n,
            timed(lambda: torch.autograd.grad(g, h, dh, retain_graph=True)))
        del x, y, w, bias, dy, h, dh, g, out
    vocab = 131072
    logits = torch.randn(tokens, vocab, device=dev, dtype=bf, requires_grad=True)
    target = torch.randint(0, vocab, (tokens,), device=dev)
    n = tokens * vocab
    add("cross_entropy fwd", f"{tokens}x{vocab}", 2 * n, timed(lambda: F.cross_entropy(logits, target)))
    loss = F.cross_entropy(logits, target)
    add("cross_entropy bwd", f"{tokens}x{vocab}", 4 * n,
        timed(lambda: torch.autograd.grad(loss, logits, retain_graph=True)))
    del logits, loss
    params = 256 * 2**20
    p = torch.zeros(params, device=dev, dtype=torch.float32, requires_grad=True)
    p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    opt.step()  # creates m and v
    add("adamw fused", f"{params}", 7 * 4 * params, timed(opt.step))

    props = torch.cuda.get_device_properties(dev)
    with open(args.out, "w") as f:
        f.write(f"# Memory-bound kernels of PyTorch {torch.__version__} on {props.name}, "
                f"{datetime.date.today()}: calibrate/bench/membound_torch.py (median of "
                f"{args.repeats} after 3 warm-ups, CUDA events)\n")
        f.write("# bytes: the fewest each kernel must move (script docstring); GBps = bytes / time\n")
        f.write("kernel,shape,bytes,time_us,GBps\n")
        for r in rows:
            f.write("%s,%s,%d,%.2f,%.0f\n" % r)
    print(f"membound_torch: {len(rows)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
