"""Shared by the PyTorch probes (attention_sdpa.py, membound_torch.py): import PyTorch and
find a CUDA device, and time a callable with CUDA events (3 untimed calls, then the median
of `repeats`)."""
import statistics
import sys


def cuda_torch(name):
    """(torch, device), or None after saying why on stderr."""
    try:
        import torch
    except ImportError as e:
        print(f"{name}: PyTorch not available ({e})", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print(f"{name}: no CUDA device", file=sys.stderr)
        return None
    return torch, torch.device("cuda")


def timed(torch, fn, repeats):
    """Median seconds of fn() over `repeats` calls after 3 warm-ups, by CUDA events."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return statistics.median(times)
