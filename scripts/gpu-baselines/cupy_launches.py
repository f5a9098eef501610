"""CuPy launching N empty kernels, each followed by a synchronize: the baseline of the GPU
check's per-test overhead row (scripts/gpu-check.sh). Prints `ms_per_launch X` (the wall time
of the N launches and synchronizes, after one warm-up launch that also compiles the kernel).

    python3 cupy_launches.py N
"""

import sys
import time


def main() -> int:
    if len(sys.argv) != 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) == 0:
        print("usage: cupy_launches.py N (N > 0)", file=sys.stderr)
        return 2
    count = int(sys.argv[1])
    import cupy

    kernel = cupy.RawKernel(r'extern "C" __global__ void empty() {}', "empty")
    kernel((1,), (1,), ())
    cupy.cuda.runtime.deviceSynchronize()
    start = time.perf_counter()
    for _ in range(count):
        kernel((1,), (1,), ())
        cupy.cuda.runtime.deviceSynchronize()
    elapsed = time.perf_counter() - start
    print(f"ms_per_launch {elapsed * 1000 / count:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
