//! [`FastHasher`]: the hasher of the reader's tables and the checker's memo.

/// A fast, non-cryptographic hasher (the FxHash mixing step of rustc).
///
/// The checker's memo keys on its own bitsets and model states, and the reader's tables on
/// process ids and a history's cells: SipHash's protection against chosen keys costs more
/// than it is worth there (research/linearizability.md §2.2: constant factors matter
/// 10-50x; SipHash was 10 % of reading a 1M-op history). A history crafted to collide can
/// only slow the reading down, not change what is read.
#[derive(Clone, Copy, Debug, Default)]
pub struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 56));
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Builds [`FastHasher`]s.
pub type FastBuildHasher = std::hash::BuildHasherDefault<FastHasher>;
