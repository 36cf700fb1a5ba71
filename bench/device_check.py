"""Every map but flow on the CPU and on a GPU, same model, same text: the largest difference per map.

    python bench/device_check.py [--model pkg:smollm2] [--tokens 64 512] [--device cuda]

Loads the model twice (CPU, then --device, where the self-check runs again), analyses the same prose
cut to each length with attnviz.analyze on both, and prints for every map (layer maps, per-head maps
where the method has them, and the mixing ratios) the largest
absolute difference and the largest value, so that a float32 tolerance can be read off. Also prints
the wall time of each analyze on each device (the first GPU call includes CUDA's warm-up).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from scale import PROSE  # bench/ is the working folder's sibling; run from the repository root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="pkg:smollm2")
    ap.add_argument("--tokens", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import attnviz
    from attnviz.methods import METHODS
    no_flow = [m for m in METHODS if m != "flow"]
    cpu = attnviz.load_model(args.model)
    dev = attnviz.load_model(args.model, device=args.device)
    print(f"{args.model}: CPU self-check ok={cpu.check.ok}; {dev.device} self-check ok={dev.check.ok} "
          f"(relative error CPU {cpu.check.max_rel_err:.1e}, {dev.device} {dev.check.max_rel_err:.1e})")
    worst_all = 0.0
    for n in args.tokens:
        ids = cpu.tokenizer(PROSE * (1 + n // 60), add_special_tokens=False)["input_ids"]
        text = cpu.tokenizer.decode(ids[: n - (2 if cpu.task != "causal_lm" else 0)])
        t = time.perf_counter()
        a = attnviz.analyze(cpu, text, methods=no_flow, max_tokens=100000)
        t_cpu = time.perf_counter() - t
        times = []
        for _ in range(2):  # the first includes CUDA's warm-up
            t = time.perf_counter()
            b = attnviz.analyze(dev, text, methods=no_flow, max_tokens=100000)
            if dev.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        print(f"\n{len(a.tokens)} tokens: analyze (every map but flow) CPU {t_cpu:.2f} s ({args.threads} threads), "
              f"{dev.device} {times[0]:.2f} s first call, {times[1]:.2f} s second")
        print(f"{'map':<16} {'max |cpu - gpu|':>16} {'max |cpu|':>10}")
        rows = []
        for k in no_flow:
            rows.append((k, a.maps[k].layer, b.maps[k].layer))
            if a.maps[k].heads is not None:
                rows.append((k + " (heads)", a.maps[k].heads, b.maps[k].heads))
        for k in a.mixing:
            rows.append(("mixing " + k, a.mixing[k], b.mixing[k]))
        for label, x, y in rows:
            x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
            assert x.shape == y.shape, (label, x.shape, y.shape)
            d = float(np.nanmax(np.abs(x - y))) if x.size else 0.0
            worst_all = max(worst_all, d / max(float(np.nanmax(np.abs(x))), 1e-12))
            print(f"{label:<16} {d:>16.2e} {float(np.nanmax(np.abs(x))):>10.3g}")
    print(f"\nlargest difference relative to the map's largest value, over all maps and lengths: {worst_all:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
