//! What the nightly toolchain builds and runs, checked without the CLI: gpurun-build's nvptx
//! linker on hand-written LLVM IR (llvm-tools), the code gpurun-rpc's client compiles to for
//! nvptx and amdgcn (`-Zbuild-std`, ptxas), gpurun-test's argument checks on the host app's
//! kernels built for nvptx, and gpurun-harness's output against the real libtest's (its JSON
//! format against a nightly libtest). Each test says why it does not run when a tool is missing,
//! and fails instead under `CI=true`.

mod against_libtest;
mod gpu_codegen;
mod kernel_signatures;
mod nvptx_link;
