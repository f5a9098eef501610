// CUDA's own device printf printing exactly what fixtures/print-throughput prints: the baseline
// of the GPU check's print rows (scripts/gpu-check.sh builds it with nvcc on the GPU machine).
//
//   printf_lines BYTES THREADS BLOCKS
//
// prints BYTES bytes of 64-byte lines `t<thread, 6 digits> n<line, 10 digits> <dots>`, line n
// from global thread n % (THREADS * BLOCKS), from one launch of BLOCKS blocks of THREADS
// threads, then synchronizes (which is when the driver writes the printf FIFO to stdout). The
// FIFO is sized so that no line is dropped; the check script verifies every line arrived.
// Exit status 0, 1 on a CUDA error, 2 on bad usage.
//
// The launch goes through the runtime's `cudaLaunchKernel` template rather than `<<<>>>`, so that
// a plain C++ compiler builds this file against scripts/gpu-baselines/host-stand-in/ (the GPU
// check's self-test runs it on the CPU and checks its lines as it checks the GPU's).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

constexpr unsigned long long kLineBytes = 64;
// `t000000 n0000000000 ` plus the newline.
constexpr unsigned long long kFixedBytes = 21;

// The dots after the fixed part, up to the line's last byte (its newline), and a NUL.
constexpr unsigned long long kDots = kLineBytes - kFixedBytes;
__device__ char dots[kDots + 1];

__global__ void print_lines(unsigned long long lines) {
    unsigned long long threads = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long thread = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned long long line = thread; line < lines; line += threads) {
        printf("t%06llu n%010llu %s\n", thread, line, dots);
    }
}

static int check(cudaError_t status, const char *what) {
    if (status != cudaSuccess) {
        fprintf(stderr, "printf_lines: %s: %s\n", what, cudaGetErrorString(status));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: printf_lines BYTES THREADS BLOCKS\n");
        return 2;
    }
    unsigned long long bytes = strtoull(argv[1], nullptr, 10);
    unsigned threads = (unsigned)strtoul(argv[2], nullptr, 10);
    unsigned blocks = (unsigned)strtoul(argv[3], nullptr, 10);
    if (bytes % kLineBytes != 0 || threads == 0 || blocks == 0) {
        fprintf(stderr, "printf_lines: BYTES must be a multiple of 64, THREADS and BLOCKS > 0\n");
        return 2;
    }
    unsigned long long lines = bytes / kLineBytes;
    char host_dots[kDots + 1];
    for (unsigned long long i = 0; i < kDots; i++) host_dots[i] = '.';
    host_dots[kDots] = '\0';
    // A record holds the format pointer, three arguments and the copied string: 256 bytes a
    // line is ample.
    size_t fifo = (size_t)lines * 256 + (1 << 20);
    if (check(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, fifo), "cudaDeviceSetLimit") ||
        check(cudaMemcpyToSymbol(dots, host_dots, sizeof host_dots), "cudaMemcpyToSymbol")) {
        return 1;
    }
    void *args[] = {&lines};
    if (check(cudaLaunchKernel(print_lines, dim3(blocks), dim3(threads), args), "launch")) {
        return 1;
    }
    if (check(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) {
        return 1;
    }
    return 0;
}
