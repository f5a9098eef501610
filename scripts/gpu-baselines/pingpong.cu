// A bare round trip between one device thread and one host thread through host-pinned mapped
// memory: the baseline of the GPU check's RPC latency row (scripts/gpu-check.sh builds it with
// nvcc on the GPU machine).
//
//   pingpong N
//
// The device writes i to one word and spins until the host has written i to another, for i =
// 1..N; the host answers each as soon as it sees it. Prints `ns_per_round_trip X` (the host's
// wall time from the first answer to the last, over N). Exit status 0, 1 on a CUDA error or when
// the device stops answering, 2 on bad usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void pingpong(volatile unsigned *to_host, volatile unsigned *to_device, unsigned n) {
    for (unsigned i = 1; i <= n; i++) {
        *to_host = i;
        __threadfence_system();
        while (*to_device != i) {
        }
    }
}

static int check(cudaError_t status, const char *what) {
    if (status != cudaSuccess) {
        fprintf(stderr, "pingpong: %s: %s\n", what, cudaGetErrorString(status));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2 || atol(argv[1]) <= 0) {
        fprintf(stderr, "usage: pingpong N (N > 0)\n");
        return 2;
    }
    unsigned n = (unsigned)atol(argv[1]);
    unsigned *words = nullptr;
    if (check(cudaSetDeviceFlags(cudaDeviceMapHost), "cudaSetDeviceFlags") ||
        check(cudaHostAlloc((void **)&words, 256, cudaHostAllocMapped), "cudaHostAlloc")) {
        return 1;
    }
    // The two words on separate 128-byte lines.
    unsigned *to_host = words, *to_device = words + 32;
    *to_host = 0;
    *to_device = 0;
    unsigned *device_words = nullptr;
    if (check(cudaHostGetDevicePointer((void **)&device_words, words, 0), "device pointer")) {
        return 1;
    }
    pingpong<<<1, 1>>>(device_words, device_words + 32, n);
    if (check(cudaGetLastError(), "launch")) return 1;
    auto start = std::chrono::steady_clock::now();
    for (unsigned i = 1; i <= n; i++) {
        auto waiting = std::chrono::steady_clock::now();
        while (__atomic_load_n(to_host, __ATOMIC_ACQUIRE) != i) {
            if (std::chrono::steady_clock::now() - waiting > std::chrono::seconds(10)) {
                fprintf(stderr, "pingpong: no answer for round trip %u\n", i);
                return 1;
            }
        }
        __atomic_store_n(to_device, i, __ATOMIC_RELEASE);
    }
    auto elapsed = std::chrono::steady_clock::now() - start;
    if (check(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return 1;
    double ns = std::chrono::duration<double, std::nano>(elapsed).count() / n;
    printf("ns_per_round_trip %.1f\n", ns);
    return 0;
}
