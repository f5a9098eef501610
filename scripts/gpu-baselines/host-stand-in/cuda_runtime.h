// A CPU stand-in for the parts of the CUDA runtime the baselines use, so that a plain C++
// compiler builds them and the GPU check's self-test can run them without a GPU: a launch runs
// every thread of every block, one after another, on the calling thread, and device printf is
// the C library's. It checks what a baseline prints (line sizes, line counts, which thread
// prints which line), not how CUDA schedules it.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

#define __global__
#define __device__

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x = 1, unsigned y = 1, unsigned z = 1) : x(x), y(y), z(z) {}
};

inline thread_local dim3 threadIdx(0, 0, 0), blockIdx(0, 0, 0), blockDim, gridDim;

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaLimit { cudaLimitPrintfFifoSize = 1 };
typedef void *cudaStream_t;

inline const char *cudaGetErrorString(cudaError_t error) {
    return error == cudaSuccess ? "no error" : "invalid argument";
}

// The FIFO is the GPU's; on the CPU every line is printed as it is made.
inline cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) { return cudaSuccess; }

template <class T>
cudaError_t cudaMemcpyToSymbol(T &symbol, const void *source, size_t count) {
    if (count > sizeof symbol) return cudaErrorInvalidValue;
    std::memcpy(&symbol, source, count);
    return cudaSuccess;
}

inline cudaError_t cudaGetLastError() { return cudaSuccess; }

inline cudaError_t cudaDeviceSynchronize() {
    std::fflush(stdout);
    return cudaSuccess;
}

template <class... Params, size_t... Index>
void call_kernel(void (*kernel)(Params...), void **args, std::index_sequence<Index...>) {
    kernel(*static_cast<std::remove_reference_t<Params> *>(args[Index])...);
}

// The runtime's typed `cudaLaunchKernel`: arguments as an array of pointers to each parameter.
template <class... Params>
cudaError_t cudaLaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, void **args,
                             size_t shared_bytes = 0, cudaStream_t stream = nullptr) {
    (void)shared_bytes;
    (void)stream;
    if (block.x * block.y * block.z == 0 || grid.x * grid.y * grid.z == 0) {
        return cudaErrorInvalidValue;
    }
    gridDim = grid;
    blockDim = block;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++)
                for (unsigned tz = 0; tz < block.z; tz++)
                    for (unsigned ty = 0; ty < block.y; ty++)
                        for (unsigned tx = 0; tx < block.x; tx++) {
                            blockIdx = dim3(bx, by, bz);
                            threadIdx = dim3(tx, ty, tz);
                            call_kernel(kernel, args, std::index_sequence_for<Params...>{});
                        }
    return cudaSuccess;
}
