//! A fixed-size set of small integers: the linearized operations of one search.

/// A set of integers in `0..len`, one bit each, with an incrementally maintained hash.
///
/// The hash is Zobrist-style: every member contributes a fixed pseudo-random word, XORed
/// in on insert and out on remove, so updating it is O(1) and equal sets hash equally no
/// matter the order of inserts (research/linearizability.md §4.3).
#[derive(Clone, Debug, Default)]
pub struct Bitset {
    words: Words,
    hash: u64,
}

/// Sets of up to this many words (128 operations) keep them inline: the search's memo
/// holds one set per configuration, and inline words spare each an allocation and each
/// lookup a pointer to chase (the memo lookup was 60 % of checking Porcupine's etcd_002).
/// Two words, not more: a memo entry is then 40 bytes instead of 64, and the lookups, a
/// cache miss each in a memo of hundreds of thousands of entries, touch fewer lines.
const INLINE_WORDS: usize = 2;

/// The words of a [`Bitset`]: inline when few (unused words stay zero), else on the heap.
#[derive(Clone, Debug)]
enum Words {
    Inline([u64; INLINE_WORDS]),
    Heap(Box<[u64]>),
}

impl Default for Words {
    fn default() -> Words {
        Words::Inline([0; INLINE_WORDS])
    }
}

impl Words {
    fn zeroed(count: usize) -> Words {
        if count <= INLINE_WORDS {
            Words::Inline([0; INLINE_WORDS])
        } else {
            Words::Heap(vec![0; count].into_boxed_slice())
        }
    }

    fn as_slice(&self) -> &[u64] {
        match self {
            Words::Inline(words) => words,
            Words::Heap(words) => words,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u64] {
        match self {
            Words::Inline(words) => words,
            Words::Heap(words) => words,
        }
    }
}

impl PartialEq for Bitset {
    fn eq(&self, other: &Self) -> bool {
        // The hash first: unequal sets almost always differ there. Then the words, in a
        // plain loop (the sets are a few words; a `memcmp` call costs more than that).
        self.hash == other.hash
            && self.words.as_slice().len() == other.words.as_slice().len()
            && self
                .words
                .as_slice()
                .iter()
                .zip(other.words.as_slice())
                .all(|(a, b)| a == b)
    }
}

impl Eq for Bitset {}

impl std::hash::Hash for Bitset {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // Equal sets have equal words and therefore equal Zobrist hashes.
        state.write_u64(self.hash);
    }
}

/// The Zobrist word of member `i`: splitmix64 of `i`, fixed for the life of the program.
fn zobrist(i: usize) -> u64 {
    let mut state = i as u64;
    lockd::rng::splitmix64(&mut state)
}

impl Bitset {
    /// The empty set over `0..len`.
    pub fn new(len: usize) -> Bitset {
        Bitset {
            words: Words::zeroed(len.div_ceil(64)),
            hash: 0,
        }
    }

    /// Whether `i` is a member.
    ///
    /// # Panics
    ///
    /// If `i` is outside `0..len` (rounded up to a multiple of 64, or to 128).
    pub fn contains(&self, i: usize) -> bool {
        self.words.as_slice()[i / 64] & (1 << (i % 64)) != 0
    }

    /// Adds `i`; returns whether it was absent.
    ///
    /// # Panics
    ///
    /// If `i` is outside `0..len` (rounded up to a multiple of 64, or to 128).
    pub fn insert(&mut self, i: usize) -> bool {
        let absent = !self.contains(i);
        if absent {
            self.words.as_mut_slice()[i / 64] |= 1 << (i % 64);
            self.hash ^= zobrist(i);
        }
        absent
    }

    /// Removes `i`; returns whether it was present.
    ///
    /// # Panics
    ///
    /// If `i` is outside `0..len` (rounded up to a multiple of 64, or to 128).
    pub fn remove(&mut self, i: usize) -> bool {
        let present = self.contains(i);
        if present {
            self.words.as_mut_slice()[i / 64] &= !(1 << (i % 64));
            self.hash ^= zobrist(i);
        }
        present
    }

    /// The number of members.
    pub fn count(&self) -> usize {
        self.words
            .as_slice()
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum()
    }
}

/// The fast hasher of the memo and of the per-key tables (defined in `history`, which
/// hashes a history's cells with it).
pub use history::hash::{FastBuildHasher, FastHasher};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_sets_are_equal_whatever_the_insert_order() {
        // research/linearizability.md §4.3: the memo keys on the set, not on the order.
        let mut a = Bitset::new(130);
        let mut b = Bitset::new(130);
        for i in [3, 64, 129] {
            assert!(a.insert(i));
        }
        for i in [129, 3, 64] {
            assert!(b.insert(i));
        }
        assert_eq!(a, b);
        assert_eq!(a.hash, b.hash);
        assert!(!a.insert(3));
        assert!(a.remove(64));
        assert!(!a.contains(64));
        assert_eq!(a.count(), 2);
        assert_ne!(a, b);
    }

    #[test]
    fn a_memo_entry_of_a_small_set_is_40_bytes() {
        // INLINE_WORDS's doc: a register search's memo entry, (set, Option<u32> state).
        assert_eq!(std::mem::size_of::<(Bitset, Option<u32>)>(), 40);
        let mut small = Bitset::new(128);
        assert!(small.insert(127));
        assert!(matches!(small.words, Words::Inline(_)));
        assert!(matches!(Bitset::new(129).words, Words::Heap(_)));
    }
}
