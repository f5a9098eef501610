//! A launch: its shape ([`LaunchShape`], plain data every crate uses, the device's test
//! descriptors included) and, host-side with the `alloc` feature, how it ended ([`LaunchEnd`]):
//! the one type a backend reports, the worker sends to its parent as is, and the harness reads.

/// Threads per block and blocks per grid, in three dimensions (CUDA's names), and the block-shared
/// memory each block gets at launch. Built with `LaunchShape::blocks(4).threads(256)` (x only)
/// or [`LaunchShape::grid`], then `.shared_bytes(4096)` where the kernel uses shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchShape {
    /// Threads per block (x, y, z).
    pub threads: [u32; 3],
    /// Blocks per grid (x, y, z).
    pub blocks: [u32; 3],
    /// Bytes of dynamic shared memory each block gets (`gpurun::shared`): CUDA's
    /// `sharedMemBytes`, added to the kernel's static group segment in an AMD dispatch packet,
    /// one zeroed region per block on the host emulation. 0: none.
    pub shared_bytes: u32,
}

impl LaunchShape {
    /// One block of one thread: what `_begin` and `_end` use.
    pub const SINGLE: LaunchShape = LaunchShape {
        threads: [1, 1, 1],
        blocks: [1, 1, 1],
        shared_bytes: 0,
    };

    /// `count` blocks (x) of one thread each; set the threads with [`LaunchShape::threads`].
    pub const fn blocks(count: u32) -> LaunchShape {
        LaunchShape {
            threads: [1, 1, 1],
            blocks: [count, 1, 1],
            shared_bytes: 0,
        }
    }

    /// This shape with `count` threads per block (x).
    pub const fn threads(self, count: u32) -> LaunchShape {
        LaunchShape {
            threads: [count, 1, 1],
            ..self
        }
    }

    /// This shape with `bytes` of dynamic shared memory per block.
    pub const fn shared_bytes(self, bytes: u32) -> LaunchShape {
        LaunchShape {
            shared_bytes: bytes,
            ..self
        }
    }

    /// Blocks and threads in three dimensions, no shared memory.
    pub const fn grid(blocks: [u32; 3], threads: [u32; 3]) -> LaunchShape {
        LaunchShape {
            threads,
            blocks,
            shared_bytes: 0,
        }
    }

    /// Threads in one block (saturating: shapes come from images and users).
    pub fn threads_per_block(&self) -> u64 {
        product(self.threads)
    }

    /// Blocks in the grid (saturating).
    pub fn block_count(&self) -> u64 {
        product(self.blocks)
    }

    /// Threads in the whole launch (saturating).
    pub fn total_threads(&self) -> u64 {
        self.threads_per_block().saturating_mul(self.block_count())
    }

    /// Number of grid dimensions in use, as LLVM's loader counts them.
    pub fn dimensions(&self) -> u32 {
        if self.blocks[2] > 1 || self.threads[2] > 1 {
            3
        } else if self.blocks[1] > 1 || self.threads[1] > 1 {
            2
        } else {
            1
        }
    }
}

fn product(dims: [u32; 3]) -> u64 {
    dims.iter()
        .fold(1u64, |acc, &n| acc.saturating_mul(u64::from(n)))
}

impl Default for LaunchShape {
    fn default() -> Self {
        LaunchShape::SINGLE
    }
}

impl core::fmt::Display for LaunchShape {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let [tx, ty, tz] = self.threads;
        let [bx, by, bz] = self.blocks;
        write!(f, "{bx}x{by}x{bz} blocks of {tx}x{ty}x{tz} threads")?;
        if self.shared_bytes > 0 {
            write!(f, " with {} bytes of shared memory", self.shared_bytes)?;
        }
        Ok(())
    }
}

/// How a launch ended, as far as the backend (or, for a timeout, the process that waited for
/// it) can tell. Panics are not ends: a panicking thread reports over RPC and ends itself, and
/// the launch completes.
#[cfg(feature = "alloc")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchEnd {
    /// Every thread returned (some may have reported panics).
    Completed,
    /// The program ended with this status: the device called `exit()` over RPC, or (loader
    /// mode) `main` returned it.
    Exited(i32),
    /// The device called `abort()`.
    Aborted,
    /// The device faulted (illegal address, trap, a crash of host-emulated code); the text
    /// comes from the driver. Nothing more can run where it ran.
    Faulted(alloc::string::String),
    /// The launch ran past this time limit and was stopped.
    TimedOut(core::time::Duration),
}

#[cfg(feature = "alloc")]
impl LaunchEnd {
    /// Whether the module (or, across processes, the worker) it ran in can run another launch:
    /// only a completed launch leaves it usable.
    pub fn leaves_module_usable(&self) -> bool {
        matches!(self, LaunchEnd::Completed)
    }

    /// Whether this end belongs to the launch that had it, when it takes down what other
    /// launches share with it: an exit, an abort or a timeout does; a fault does not (every
    /// stream of a poisoned CUDA context reports it, so it names no culprit).
    pub fn names_its_launch(&self) -> bool {
        !matches!(self, LaunchEnd::Faulted(_))
    }
}

#[cfg(test)]
mod tests {
    use super::LaunchShape;

    #[test]
    fn builders_and_counts() {
        let shape = LaunchShape::blocks(4).threads(256);
        assert_eq!(shape.threads, [256, 1, 1]);
        assert_eq!(shape.blocks, [4, 1, 1]);
        assert_eq!(shape.total_threads(), 1024);
        assert_eq!(shape.dimensions(), 1);
        let grid = LaunchShape::grid([2, 3, 1], [8, 1, 2]);
        assert_eq!((grid.block_count(), grid.threads_per_block()), (6, 16));
        assert_eq!(grid.dimensions(), 3);
        let huge = LaunchShape::grid([u32::MAX; 3], [u32::MAX; 3]);
        assert_eq!(huge.total_threads(), u64::MAX);
    }

    #[test]
    fn shared_bytes_are_kept_by_the_builders_and_shown() {
        let shape = LaunchShape::blocks(4).shared_bytes(4096).threads(256);
        assert_eq!(shape.shared_bytes, 4096);
        assert_eq!((shape.blocks, shape.threads), ([4, 1, 1], [256, 1, 1]));
        assert_eq!(LaunchShape::blocks(4).threads(256).shared_bytes, 0);
        extern crate std;
        use std::string::ToString;
        assert_eq!(
            shape.to_string(),
            "4x1x1 blocks of 256x1x1 threads with 4096 bytes of shared memory"
        );
        assert_eq!(
            LaunchShape::blocks(2).to_string(),
            "2x1x1 blocks of 1x1x1 threads"
        );
    }
}
