//! Images for the scripted backend: PTX text with test descriptors, kernels and globals, made
//! on the fly, so tests of the loop, the worker and the runner need no toolchain. The scripted
//! device never runs the PTX; the image parser reads it like any other (tests, kernels,
//! globals).

use gpurun_abi::symbols;
use gpurun_image::{encode_descriptor, EncodeError, TestDesc};
use std::fmt::Write;

/// What the image holds besides its tests.
#[derive(Clone, Debug, Default)]
pub struct ImageSpec {
    pub tests: Vec<TestDesc>,
    /// Plain kernels (no test descriptor), e.g. `_start`.
    pub kernels: Vec<String>,
    /// Whether the image has the RPC client global (every image of the gpurun crate does).
    pub rpc_client: bool,
    /// Kernels that declare a block-size bound (PTX `.maxntid N, 1, 1`).
    pub max_threads: Vec<(String, u32)>,
}

impl ImageSpec {
    /// An image with these tests and an RPC client, as a device crate's would be.
    pub fn with_tests(tests: Vec<TestDesc>) -> ImageSpec {
        ImageSpec {
            tests,
            rpc_client: true,
            ..ImageSpec::default()
        }
    }

    /// The PTX text.
    pub fn ptx(&self) -> Result<String, EncodeError> {
        let mut text = String::from(".version 7.0\n.target sm_70\n.address_size 64\n\n");
        let mut kernels = self.kernels.clone();
        if !self.tests.is_empty() {
            let _ = writeln!(
                text,
                ".visible .global .align 4 .b8 {}[4] = {{1}};",
                symbols::TEST_ABI_VERSION
            );
        }
        for test in &self.tests {
            let id = test
                .kernel
                .strip_prefix(symbols::TEST_KERNEL_PREFIX)
                .unwrap_or(&test.kernel);
            let bytes = encode_descriptor(test)?;
            let list: Vec<String> = bytes.iter().map(u8::to_string).collect();
            let _ = writeln!(
                text,
                ".visible .global .align 1 .b8 {}{id}[{}] = {{{}}};",
                symbols::DESC_PREFIX,
                bytes.len(),
                list.join(", ")
            );
            kernels.push(format!("{}{id}", symbols::TEST_KERNEL_PREFIX));
        }
        if self.rpc_client {
            let _ = writeln!(
                text,
                ".visible .global .align 8 .b8 {}[{}];",
                symbols::RPC_CLIENT,
                gpurun_rpc::CLIENT_SIZE
            );
        }
        for kernel in kernels {
            let bound = self
                .max_threads
                .iter()
                .find(|(name, _)| *name == kernel)
                .map_or_else(String::new, |(_, n)| format!(".maxntid {n}, 1, 1\n"));
            let _ = writeln!(text, "\n.visible .entry {kernel}()\n{bound}{{\n\tret;\n}}");
        }
        Ok(text)
    }
}

/// A test named `name` (module path `scripted::NAME`) whose kernel is `__gpurun_test_NAME`.
pub fn test(name: &str) -> TestDesc {
    TestDesc {
        full_path: format!("scripted::{name}"),
        ..TestDesc::new(name)
    }
}
