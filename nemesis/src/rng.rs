//! A small seeded random number generator (SplitMix64), so that every random choice of a run
//! comes from its seed and nothing reads a hidden RNG (STYLE practice 11).
//!
//! SplitMix64 is not cryptographic; it is fast, has a full 2^64 period, and its streams can be
//! derived from (seed, purpose, step) by hashing, which is what [`Rng::derive`] does so that a
//! schedule can be a pure function of the seed and a logical step.

/// A seeded SplitMix64 generator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

use lockd::rng::mix;

impl Rng {
    /// A generator whose whole output is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Rng {
            state: mix(seed ^ 0x5851_f42d_4c95_7f2d),
        }
    }

    /// An independent stream for `(seed, stream, step)`: the same triple always gives the same
    /// stream, so a choice at logical step `step` does not depend on earlier choices.
    pub fn derive(seed: u64, stream: u64, step: u64) -> Self {
        Rng::new(mix(mix(seed).wrapping_add(stream)).wrapping_add(mix(step ^ 0x9e37)))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        lockd::rng::splitmix64(&mut self.state)
    }

    /// A number in `0..bound`.
    ///
    /// # Panics
    ///
    /// If `bound` is 0 (a programmer error: there is nothing to choose from).
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "Rng::below(0): empty range");
        // Multiply-shift keeps the bias below 2^-64 * bound, which is negligible here.
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// A number in `low..=high`.
    ///
    /// # Panics
    ///
    /// If `low > high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        assert!(low <= high, "Rng::range({low}, {high}): empty range");
        low + self.below(high - low + 1)
    }

    /// True with probability `numerator / denominator`.
    pub fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        self.below(denominator) < numerator
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    /// One element of `items`, or `None` when it is empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            return None;
        }
        items.get(self.below(items.len() as u64) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_gives_same_stream() {
        // STYLE practice 11: every random choice comes from the seed.
        let a: Vec<u64> = (0..8)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..8)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let c: Vec<u64> = (0..8)
            .map({
                let mut r = Rng::new(8);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        // STYLE practice 11: choices are uniform enough to reach every value.
        let mut r = Rng::new(1);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let x = r.below(5);
            assert!(x < 5, "below(5) gave {x}");
            seen[x as usize] = true;
        }
        assert!(
            seen.iter().all(|s| *s),
            "not every value in 0..5 was drawn: {seen:?}"
        );
    }

    #[test]
    fn derived_streams_differ_by_step() {
        // STYLE practice 11: a step's choices depend on (seed, stream, step) only.
        assert_eq!(Rng::derive(3, 1, 9), Rng::derive(3, 1, 9));
        assert_ne!(
            Rng::derive(3, 1, 9).next_u64(),
            Rng::derive(3, 1, 10).next_u64()
        );
        assert_ne!(
            Rng::derive(3, 1, 9).next_u64(),
            Rng::derive(3, 2, 9).next_u64()
        );
    }
}
