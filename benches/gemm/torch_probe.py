"""How long cuBLAS (through PyTorch) takes for the Go trainer's two products at
batch 256, on the device, against the replayed step's own kernels (issue 14).

Each product runs 200 times back to back inside one captured CUDA graph, each
reading the output of the one before (a chain, as the step's kernels are), and the
graph's replay is timed with CUDA events: the device time per product, launch
gaps included as a graph has them. A graph of 200 one-element adds gives the
floor of a dependent graph node. Prints a markdown table.

  python3 benches/gemm/torch_probe.py
"""
import torch

B, IN, H = 256, 784, 512
REPS, ROUNDS = 200, 7


def per_node_us(body):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            body()  # warm-up: cuBLAS picks its kernel and workspace
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(REPS):
            body()
    times = []
    for _ in range(ROUNDS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000 / REPS)
    times.sort()
    return times[len(times) // 2]


def main():
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(1)
    rows = []
    bf16 = None  # the bf16 operands, for the profiler below
    for dt, name in ((torch.bfloat16, "bf16"), (torch.float32, "tf32"), (torch.float32, "fp32")):
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        x = torch.randn(B, IN, device=dev, dtype=dt, generator=g)
        w1 = torch.randn(IN, H, device=dev, dtype=dt, generator=g) * 0.03
        da1 = torch.randn(B, H, device=dev, dtype=dt, generator=g)
        out = torch.empty(B, H, device=dev, dtype=dt)
        gw = torch.empty(IN, H, device=dev, dtype=dt)

        def fwd_chain():  # consecutive nodes of one stream: each after the last
            torch.mm(x, w1, out=out)

        def tn_chain():
            torch.mm(x.t(), da1, out=gw)

        rows.append((name, "x W1 (256x784 · 784x512)", per_node_us(fwd_chain)))
        rows.append((name, "xᵀ da1 (784x256 · 256x512)", per_node_us(tn_chain)))
        if dt == torch.bfloat16:
            bf16 = (x, w1, da1)
            relu = torch.empty(B, H, device=dev, dtype=dt)

            def fwd_relu():
                torch.mm(x, w1, out=out)
                torch.clamp(out, min=0, out=relu)

            rows.append((name, "x W1 then relu (two nodes)", per_node_us(fwd_relu)))
    one = torch.zeros(1, device=dev)
    rows.append(("—", "one-element add (a node's floor)", per_node_us(lambda: one.add_(1))))
    print(f"# cuBLAS through PyTorch {torch.__version__} on {torch.cuda.get_device_name()}: "
          f"µs per graph node, median of {ROUNDS} replays of {REPS} back to back\n")
    print("| precision | product | µs per node |")
    print("|---|---|---:|")
    for p, what, us in rows:
        print(f"| {p} | {what} | {us:.2f} |")
    # cuBLAS's kernels for the bf16 products, from the profiler (20 eager calls each).
    try:
        from torch.profiler import profile, ProfilerActivity
        x, w1, da1 = bf16
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                torch.mm(x, w1)
                torch.mm(x.t(), da1)
            torch.cuda.synchronize()
        print("\nbf16 kernels (20 calls each, eager, device time):\n")
        print("| kernel | calls | µs each |")
        print("|---|---:|---:|")
        for e in prof.key_averages():
            t = getattr(e, "self_device_time_total", 0)
            if e.count and t:
                print(f"| {e.key[:90]} | {e.count} | {t / e.count:.2f} |")
    except Exception as err:  # the table above stands without it
        print(f"\n(profiler: {err})")


if __name__ == "__main__":
    main()
