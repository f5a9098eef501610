//! AMD launch shape: six little-endian `u32` words in the global
//! [`crate::symbols::LAUNCH_SHAPE`], written by the loader before each launch because the
//! device runtime cannot read the dispatch packet on this toolchain (docs/abi.md).

/// The largest block every target accepts (CUDA's and HSA's limit), in threads.
pub const MAX_BLOCK_THREADS: u64 = 1024;

/// Number of words: threads per block x, y, z, then blocks per grid x, y, z.
pub const WORDS: usize = 6;
/// Size of the global in bytes.
pub const BYTES: usize = WORDS * 4;

/// The words for a launch of `blocks` blocks of `threads` threads.
pub const fn words(threads: [u32; 3], blocks: [u32; 3]) -> [u32; WORDS] {
    [
        threads[0], threads[1], threads[2], blocks[0], blocks[1], blocks[2],
    ]
}

/// The bytes the loader writes into the global.
pub fn to_bytes(threads: [u32; 3], blocks: [u32; 3]) -> [u8; BYTES] {
    let mut bytes = [0u8; BYTES];
    for (chunk, word) in bytes.chunks_exact_mut(4).zip(words(threads, blocks)) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    bytes
}

#[cfg(test)]
mod tests {
    #[test]
    fn threads_come_first() {
        let bytes = super::to_bytes([64, 2, 1], [3, 1, 1]);
        assert_eq!(&bytes[..4], &64u32.to_le_bytes());
        assert_eq!(&bytes[4..8], &2u32.to_le_bytes());
        assert_eq!(&bytes[12..16], &3u32.to_le_bytes());
    }
}
