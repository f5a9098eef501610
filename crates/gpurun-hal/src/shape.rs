//! Grid shapes.

/// Threads per block and blocks per grid, in three dimensions (CUDA's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchShape {
    pub threads: [u32; 3],
    pub blocks: [u32; 3],
}

impl LaunchShape {
    /// One block of one thread: what `_begin` and `_end` use.
    pub const SINGLE: LaunchShape = LaunchShape {
        threads: [1, 1, 1],
        blocks: [1, 1, 1],
    };

    pub fn threads_per_block(&self) -> u64 {
        self.threads.iter().map(|&n| u64::from(n)).product()
    }

    pub fn block_count(&self) -> u64 {
        self.blocks.iter().map(|&n| u64::from(n)).product()
    }

    pub fn total_threads(&self) -> u64 {
        self.threads_per_block() * self.block_count()
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

impl Default for LaunchShape {
    fn default() -> Self {
        LaunchShape::SINGLE
    }
}

impl std::fmt::Display for LaunchShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [tx, ty, tz] = self.threads;
        let [bx, by, bz] = self.blocks;
        write!(f, "{bx}x{by}x{bz} blocks of {tx}x{ty}x{tz} threads")
    }
}
