//! The three-valued verdict of a check (STYLE practice 7).
//!
//! A check says `Valid` only when it finished and found nothing. When it found an anomaly it
//! says `Invalid`. When it could not decide (its budget ran out, it panicked, the history
//! lacks what it needs) it says `Unknown` together with the reason, and never `Valid`.
//! Verdicts merge by priority, `Invalid` > `Unknown` > `Valid` (Jepsen's
//! `valid-priorities`), and map to DESIGN's exit codes 0 / 1 / 2.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use serde::{Deserialize, Serialize};

/// The outcome of one check, or of several merged.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// The check finished and found no anomaly.
    Valid,
    /// The check found an anomaly.
    Invalid,
    /// The check could not decide.
    Unknown {
        /// Why: the bound that was reached, the panic message, what was missing.
        reason: String,
    },
}

impl Verdict {
    /// An `Unknown` verdict with this reason.
    pub fn unknown(reason: impl Into<String>) -> Verdict {
        Verdict::Unknown {
            reason: reason.into(),
        }
    }

    /// The merge priority: higher wins.
    fn priority(&self) -> u8 {
        match self {
            Verdict::Valid => 0,
            Verdict::Unknown { .. } => 1,
            Verdict::Invalid => 2,
        }
    }

    /// Merges two verdicts: `Invalid` beats `Unknown`, which beats `Valid`. Two `Unknown`s
    /// keep both reasons, joined by `; `.
    pub fn merge(self, other: Verdict) -> Verdict {
        match (self, other) {
            (Verdict::Unknown { reason: a }, Verdict::Unknown { reason: b }) => {
                if a == b {
                    Verdict::Unknown { reason: a }
                } else {
                    Verdict::Unknown {
                        reason: format!("{a}; {b}"),
                    }
                }
            }
            (a, b) => {
                if b.priority() > a.priority() {
                    b
                } else {
                    a
                }
            }
        }
    }

    /// Merges any number of verdicts; no verdicts at all merge to `Valid`.
    pub fn merge_all(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        verdicts.into_iter().fold(Verdict::Valid, Verdict::merge)
    }

    /// DESIGN's exit code: 0 valid, 1 invalid, 2 unknown.
    pub fn exit_code(&self) -> i32 {
        match self {
            Verdict::Valid => 0,
            Verdict::Invalid => 1,
            Verdict::Unknown { .. } => 2,
        }
    }

    /// `valid`, `invalid` or `unknown`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Invalid => "invalid",
            Verdict::Unknown { .. } => "unknown",
        }
    }

    /// True for `Valid` only.
    pub fn is_valid(&self) -> bool {
        matches!(self, Verdict::Valid)
    }

    /// True for `Invalid` only.
    pub fn is_invalid(&self) -> bool {
        matches!(self, Verdict::Invalid)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Unknown { reason } => write!(f, "unknown ({reason})"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// Runs `check`, turning a panic into `Err(Verdict::Unknown)` whose reason names `what` and
/// the panic message. A checker that panics never yields `Valid`.
pub fn guard<T>(what: &str, check: impl FnOnce() -> T) -> Result<T, Verdict> {
    catch_unwind(AssertUnwindSafe(check)).map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with a non-text payload".to_string());
        Verdict::unknown(format!("{what} panicked: {message}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_beats_unknown_beats_valid() {
        // STYLE practice 7: merge by priority Invalid > Unknown > Valid.
        let unknown = Verdict::unknown("budget");
        assert_eq!(Verdict::Valid.merge(unknown.clone()), unknown);
        assert_eq!(unknown.clone().merge(Verdict::Valid), unknown);
        assert_eq!(unknown.clone().merge(Verdict::Invalid), Verdict::Invalid);
        assert_eq!(Verdict::Invalid.merge(unknown), Verdict::Invalid);
        assert_eq!(Verdict::merge_all([]), Verdict::Valid);
    }

    #[test]
    fn two_unknowns_keep_both_reasons() {
        // STYLE practice 7: Unknown carries the reason.
        let merged = Verdict::unknown("a").merge(Verdict::unknown("b"));
        assert_eq!(merged, Verdict::unknown("a; b"));
    }

    #[test]
    fn exit_codes_are_design_0_1_2() {
        // DESIGN "The command line": 0 valid, 1 invalid, 2 unknown.
        assert_eq!(Verdict::Valid.exit_code(), 0);
        assert_eq!(Verdict::Invalid.exit_code(), 1);
        assert_eq!(Verdict::unknown("x").exit_code(), 2);
    }

    #[test]
    fn a_panicking_check_is_unknown_not_valid() {
        // STYLE practice 7: a checker that panics yields Unknown with the reason.
        let result: Result<Verdict, Verdict> = guard("test check", || panic!("boom"));
        let verdict = result.unwrap_err();
        assert_eq!(verdict, Verdict::unknown("test check panicked: boom"));
    }
}
