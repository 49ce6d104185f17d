//! Majorities and the commit index a set of match indexes supports (Raft paper §5.3, §5.4.2).

use super::message::Index;

/// The number of votes that make a majority of `members` voters.
pub fn majority(members: usize) -> usize {
    members / 2 + 1
}

/// The highest index that a majority of `match_indexes` (one per member, the leader's own
/// durable index included) have reached.
///
/// The caller still checks that the entry at that index is of the current term before it
/// commits (Raft paper §5.4.2, Figure 8).
pub(crate) fn committed_index(match_indexes: &[Index]) -> Index {
    if match_indexes.is_empty() {
        return 0;
    }
    let need = majority(match_indexes.len());
    // The largest index i with at least `need` members at or above it: count down the
    // distinct values, bounded by the number of members.
    let mut candidates: Vec<Index> = match_indexes.to_vec();
    candidates.sort_unstable_by(|a, b| b.cmp(a));
    candidates.dedup();
    candidates
        .into_iter()
        .find(|c| match_indexes.iter().filter(|m| *m >= c).count() >= need)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dumb oracle: sort ascending and pick the element a majority is at or above.
    fn median_oracle(match_indexes: &[Index]) -> Index {
        let mut sorted = match_indexes.to_vec();
        sorted.sort_unstable();
        sorted[sorted.len() - majority(sorted.len())]
    }

    use crate::rng::splitmix64;

    #[test]
    fn committed_index_agrees_with_sort_and_pick_the_median() {
        // STYLE practice 9 (etcd quorum/quick_test.go): the fast path agrees with an oracle.
        let seed = 0x5eed_u64;
        let mut rng = seed;
        for case in 0..2000 {
            let members = 1 + (splitmix64(&mut rng) % 7) as usize;
            let matches: Vec<Index> = (0..members).map(|_| splitmix64(&mut rng) % 10).collect();
            assert_eq!(
                committed_index(&matches),
                median_oracle(&matches),
                "seed {seed} case {case}: matches {matches:?}"
            );
        }
    }

    #[test]
    fn a_minority_cannot_commit() {
        // Raft paper §5.3: an entry is committed once stored on a majority.
        assert_eq!(committed_index(&[5, 0, 0]), 0);
        assert_eq!(committed_index(&[5, 5, 0]), 5);
        assert_eq!(committed_index(&[7, 3, 5, 0, 0]), 3);
        assert_eq!(majority(4), 3);
    }
}
