//! The sequential specification of a lock table with fencing tokens and leases, per key.
//!
//! # The spec (DESIGN "Semantics of the lock ops")
//!
//! Each key is free or held. The state also keeps the last token granted on the key,
//! because tokens strictly increase: an `acquire` that returns `ok token t` is legal only on
//! a free key and only when `t` is greater than every token granted before it on that key.
//!
//! | operation (history) | legal when | then |
//! |---|---|---|
//! | `acquire` ok token t | free, t > last token | held under t |
//! | `acquire` fail `busy` | held (by anyone) | unchanged (an observation) |
//! | `acquire` info / never completed | free | held by a *hidden* grant (optional) |
//! | `release t` ok | held under t | free |
//! | `release t` fail `not-holder` | not held under t | unchanged (an observation) |
//! | `release t` info | held under t | free (optional) |
//! | expiry of t (internal) | held under t, and not before `invoke + lease_ms·(1−drift)` | free (optional) |
//! | end of a hidden grant (internal) | held by that hidden grant | free (optional) |
//!
//! Any other `fail` (`timeout`, `unavailable`, ...) certainly did not take effect and
//! constrains nothing, so it is left out. `write` and `read` belong to the fenced resource
//! ([`crate::fencing`]) and are left out too.
//!
//! # Time-bounded internal events
//!
//! A step function sees no clock, so a lease expiry cannot be a rule inside `step`
//! (research/linearizability.md §2.3 shows what goes wrong when it is). Instead each `ok`
//! grant of token t with a lease brings an optional internal operation "expiry of t" whose
//! interval starts at the earliest instant the expiry may happen, `invoke + lease_ms·(1 −
//! drift)`, and never ends: the search may place it at any instant after that, or never.
//!
//! # Hidden grants
//!
//! An `info` acquire may have been granted with a token nobody saw. Such a hidden grant
//! ends, like any grant, by its lease: an optional internal event "end of the hidden grant"
//! whose interval starts at `invoke + lease_ms·(1 − drift)` (never, without a lease). This
//! is the spec's reading of DESIGN ("a held key may expire on its own, but not before
//! lease_ms less the drift"), and it catches a grant made inside an unseen grant's lease.
//!
//! lockd also ends a grant whose client is gone by a *phantom-lock release* that the
//! history does not record. [`LockOptions::phantom_release`] allows for it: the end of a
//! hidden grant may then happen any time after the acquire's invoke. That is the permissive
//! choice of research/linearizability.md §4.2: it never raises a false alarm on a service
//! that releases phantom locks, but cannot catch "a grant to a gone client blocked others
//! too long" or "a regrant inside an unseen grant's lease".

use std::collections::HashMap;

use super::bitset::FastBuildHasher;

use history::{ErrorWord, OpName, Text};

use super::{Model, Operation, Rows};
use crate::error::CheckError;
use crate::view::OpView;

/// The lock spec, per key. Partition is by key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockModel;

/// A lock operation, or an internal event the spec allows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LockInput {
    /// `acquire`. `row` is the invoke row's index: it names a hidden grant.
    Acquire {
        /// The lease asked for, `None` when the invoke has no lease.
        lease_ms: Option<u64>,
        /// The invoke row's index.
        row: u64,
    },
    /// `release` of a token.
    Release {
        /// The token released.
        token: u64,
    },
    /// Internal: the lease of `token` ran out.
    Expire {
        /// The grant's token.
        token: u64,
    },
    /// Internal: the hidden grant of the `info` acquire invoked at `row` ended.
    EndHidden {
        /// The acquire's invoke row.
        row: u64,
    },
}

/// What a lock operation answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LockOutput {
    /// `acquire` ok with this token.
    Granted {
        /// The fencing token.
        token: u64,
    },
    /// `acquire` fail busy.
    Busy,
    /// `release` ok.
    Released,
    /// `release` fail not-holder.
    NotHolder,
    /// `info` or never completed: the outcome is unknown.
    Unknown,
    /// An internal event happened.
    Happened,
}

/// Who holds a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Holder {
    /// Nobody.
    Free,
    /// The grant of this token.
    Token(u64),
    /// The hidden grant of the `info` acquire invoked at this row.
    Hidden(u64),
}

/// The state of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockState {
    /// Who holds it.
    pub holder: Holder,
    /// The last token granted on it (tokens strictly increase).
    pub last_token: Option<u64>,
}

impl Model for LockModel {
    type State = LockState;
    type Input = LockInput;
    type Output = LockOutput;

    fn init(&self) -> LockState {
        LockState {
            holder: Holder::Free,
            last_token: None,
        }
    }

    fn step(&self, state: &LockState, input: &LockInput, output: &LockOutput) -> Option<LockState> {
        let held_under = |t: u64| state.holder == Holder::Token(t);
        let freed = LockState {
            holder: Holder::Free,
            ..*state
        };
        match (input, output) {
            (LockInput::Acquire { .. }, LockOutput::Granted { token }) => {
                let newer = state.last_token.is_none_or(|last| *token > last);
                (state.holder == Holder::Free && newer).then_some(LockState {
                    holder: Holder::Token(*token),
                    last_token: Some(*token),
                })
            }
            (LockInput::Acquire { .. }, LockOutput::Busy) => {
                (state.holder != Holder::Free).then_some(*state)
            }
            (LockInput::Acquire { row, .. }, LockOutput::Unknown) => (state.holder == Holder::Free)
                .then_some(LockState {
                    holder: Holder::Hidden(*row),
                    ..*state
                }),
            (LockInput::Release { token }, LockOutput::Released | LockOutput::Unknown) => {
                held_under(*token).then_some(freed)
            }
            (LockInput::Release { token }, LockOutput::NotHolder) => {
                (!held_under(*token)).then_some(*state)
            }
            (LockInput::Expire { token }, _) => held_under(*token).then_some(freed),
            (LockInput::EndHidden { row }, _) => {
                (state.holder == Holder::Hidden(*row)).then_some(freed)
            }
            _ => None,
        }
    }

    fn partition(&self, history: &[Operation<Self>]) -> Vec<Vec<usize>> {
        partition_by_key(history)
    }

    fn describe_operation(&self, input: &LockInput, output: &LockOutput) -> String {
        match (input, output) {
            (LockInput::Acquire { .. }, LockOutput::Granted { token }) => {
                format!("acquire -> ok token {token}")
            }
            (LockInput::Acquire { .. }, LockOutput::Busy) => "acquire -> fail busy".into(),
            (LockInput::Acquire { .. }, _) => "acquire -> unknown (info)".into(),
            (LockInput::Release { token }, LockOutput::Released) => {
                format!("release token {token} -> ok")
            }
            (LockInput::Release { token }, LockOutput::NotHolder) => {
                format!("release token {token} -> fail not-holder")
            }
            (LockInput::Release { token }, _) => format!("release token {token} -> unknown (info)"),
            (LockInput::Expire { token }, _) => format!("expiry of token {token}"),
            (LockInput::EndHidden { row }, _) => {
                format!("end of the unseen grant of the acquire at row {row}")
            }
        }
    }

    fn describe_state(&self, state: &LockState) -> String {
        let last = match state.last_token {
            Some(t) => format!("last token {t}"),
            None => "no token granted yet".to_string(),
        };
        match state.holder {
            Holder::Free => format!("free ({last})"),
            Holder::Token(t) => format!("held under token {t}"),
            Holder::Hidden(row) => {
                format!("held by the unseen grant of the info acquire at row {row} ({last})")
            }
        }
    }
}

/// Groups operations by key, keeping their order (P-compositionality per key).
pub fn partition_by_key<M: Model>(history: &[Operation<M>]) -> Vec<Vec<usize>> {
    let mut index: HashMap<&str, usize, FastBuildHasher> = HashMap::default();
    let mut parts: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, op) in history.iter().enumerate() {
        let part = *index.entry(op.key.as_str()).or_insert_with(|| {
            parts.push((op.key.as_str(), Vec::new()));
            parts.len() - 1
        });
        parts[part].1.push(i);
    }
    // Keys in order, so that the first failing part does not depend on hashing.
    parts.sort_unstable_by_key(|(key, _)| *key);
    parts.into_iter().map(|(_, part)| part).collect()
}

/// Nanoseconds from a lease start to the earliest instant it may run out: `lease_ms·(1 −
/// drift)`, rounded down (earlier is the cautious side: it allows more).
pub fn lease_floor_ns(lease_ms: u64, drift: f64) -> u64 {
    let ns = lease_ms as f64 * 1e6 * (1.0 - drift);
    if ns <= 0.0 { 0 } else { ns.floor() as u64 }
}

/// How the lock spec reads time.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct LockOptions {
    /// The declared clock-drift bound, a fraction in `[0, 1)`.
    pub drift: f64,
    /// Whether a hidden grant (of an `info` acquire) may end at any time, by a phantom-lock
    /// release the history does not record, instead of only by its lease.
    pub phantom_release: bool,
}

impl LockOptions {
    /// Drift `drift`, hidden grants end only by their lease.
    pub fn new(drift: f64) -> LockOptions {
        LockOptions {
            drift,
            phantom_release: false,
        }
    }

    /// These options with phantom releases allowed (or not).
    pub fn with_phantom_release(self, phantom_release: bool) -> LockOptions {
        LockOptions {
            phantom_release,
            ..self
        }
    }
}

/// Builds the lock model's operations from paired history operations: the lock ops the
/// spec constrains, then the internal events (expiries, ends of hidden grants).
pub fn lock_operations<'a>(
    ops: impl IntoIterator<Item = &'a history::pair::Operation>,
    options: LockOptions,
) -> Result<Vec<Operation<LockModel>>, CheckError> {
    lock_operations_of(ops, options, |op| op.key.clone())
}

/// [`lock_operations`] on any [`OpView`]; `key` gives each operation's key.
pub fn lock_operations_of<'a, O: OpView + 'a>(
    ops: impl IntoIterator<Item = &'a O>,
    options: LockOptions,
    key: impl Fn(&O) -> Text,
) -> Result<Vec<Operation<LockModel>>, CheckError> {
    let drift = options.drift;
    let ops = ops.into_iter();
    // At most one operation per op, and one internal event per acquire: room for both
    // up front, so that neither list is copied as it grows.
    let mut out = Vec::with_capacity(ops.size_hint().0);
    let mut internal = Vec::new();
    for op in ops {
        let rows = Rows {
            invoke: Some(op.invoke_index()),
            completion: op.completion_index(),
        };
        let base = |input: LockInput, output: LockOutput, return_ns: Option<u64>| Operation {
            call_ns: op.call_ns(),
            return_ns,
            input,
            output,
            key: key(op),
            process: Some(op.process()),
            rows,
        };
        let internal_event = |input: LockInput, call_ns: u64| Operation {
            call_ns,
            return_ns: None,
            input,
            output: LockOutput::Happened,
            key: key(op),
            process: None,
            rows: Rows::default(),
        };
        match op.op_name() {
            Some(OpName::Acquire) => {
                let lease_ms = op
                    .lease_ms()
                    .map_err(|reason| CheckError::bad(op.invoke_index(), reason))?;
                let row = op.invoke_index();
                let input = LockInput::Acquire { lease_ms, row };
                // A determinate op has its completion's time.
                let Some(completion_ns) = op.completion_ns().filter(|_| !op.is_indeterminate())
                else {
                    out.push(base(input, LockOutput::Unknown, None));
                    let earliest_end = if options.phantom_release {
                        Some(op.call_ns())
                    } else {
                        lease_ms.map(|ms| op.call_ns().saturating_add(lease_floor_ns(ms, drift)))
                    };
                    if let Some(at) = earliest_end {
                        internal.push(internal_event(LockInput::EndHidden { row }, at));
                    }
                    continue;
                };
                if op.is_ok() {
                    let token = op.completion_token().ok_or_else(|| {
                        CheckError::bad(
                            op.completion_index().unwrap_or_default(),
                            "acquire ok has no token",
                        )
                    })?;
                    out.push(base(
                        input,
                        LockOutput::Granted { token },
                        Some(completion_ns),
                    ));
                    if let Some(lease_ms) = lease_ms {
                        let earliest = op.call_ns().saturating_add(lease_floor_ns(lease_ms, drift));
                        internal.push(internal_event(LockInput::Expire { token }, earliest));
                    }
                } else if op.error_is(ErrorWord::Busy) {
                    out.push(base(input, LockOutput::Busy, Some(completion_ns)));
                }
            }
            Some(OpName::Release) => {
                let token = op
                    .invoke_token()
                    .ok_or_else(|| CheckError::bad(op.invoke_index(), "release has no token"))?;
                let input = LockInput::Release { token };
                match op.completion_ns() {
                    _ if op.is_indeterminate() => out.push(base(input, LockOutput::Unknown, None)),
                    Some(at) if op.is_ok() => out.push(base(input, LockOutput::Released, Some(at))),
                    Some(at) if op.error_is(ErrorWord::NotHolder) => {
                        out.push(base(input, LockOutput::NotHolder, Some(at)))
                    }
                    _ => {}
                }
            }
            // The fenced resource's ops: fencing checks them.
            Some(OpName::Write | OpName::Read) => {}
            _ => {
                return Err(CheckError::bad(
                    op.invoke_index(),
                    format!(
                        "op `{}` is not a lock op (acquire, release, read, write)",
                        op.f()
                    ),
                ));
            }
        }
    }
    out.extend(internal);
    Ok(out)
}

/// The lease of an acquire invoke's value, `LEASE_MS` or `LEASE_MS WAIT_MS` (the harness
/// records how long the acquire may wait for the key after the lease); `None` when empty.
pub fn acquire_lease_ms(value: &str) -> Result<Option<u64>, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    history::AcquireValue::parse(value)
        .map(|v| Some(v.lease_ms))
        .ok_or_else(|| {
            format!(
                "acquire value `{value}` is not `LEASE_MS` or `LEASE_MS WAIT_MS` in milliseconds"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(t: u64) -> LockState {
        LockState {
            holder: Holder::Token(t),
            last_token: Some(t),
        }
    }

    #[test]
    fn a_grant_needs_a_free_key_and_a_newer_token() {
        // DESIGN "Semantics of the lock ops": acquire ok means the key was free; tokens
        // strictly increase.
        let m = LockModel;
        let acquire = LockInput::Acquire {
            lease_ms: None,
            row: 0,
        };
        let grant = |t| LockOutput::Granted { token: t };
        assert_eq!(m.step(&m.init(), &acquire, &grant(3)), Some(held(3)));
        assert_eq!(m.step(&held(3), &acquire, &grant(4)), None);
        let freed = LockState {
            holder: Holder::Free,
            last_token: Some(3),
        };
        assert_eq!(m.step(&freed, &acquire, &grant(3)), None);
        assert_eq!(m.step(&freed, &acquire, &grant(5)), Some(held(5)));
    }

    #[test]
    fn release_matches_the_token_only() {
        // DESIGN "The lock service": a release that does not match the holder is refused.
        let m = LockModel;
        let release = |t| LockInput::Release { token: t };
        assert!(
            m.step(&held(3), &release(3), &LockOutput::Released)
                .is_some()
        );
        assert!(
            m.step(&held(3), &release(2), &LockOutput::Released)
                .is_none()
        );
        assert!(
            m.step(&held(3), &release(2), &LockOutput::NotHolder)
                .is_some()
        );
        assert!(
            m.step(&held(3), &release(3), &LockOutput::NotHolder)
                .is_none()
        );
    }

    #[test]
    fn lease_floor_subtracts_the_drift() {
        // DESIGN: no expiry before lease_ms less the drift bound.
        assert_eq!(lease_floor_ns(1000, 0.01), 990_000_000);
        assert_eq!(lease_floor_ns(1000, 0.0), 1_000_000_000);
    }
}

#[cfg(test)]
mod lease_value_tests {
    use super::acquire_lease_ms;

    #[test]
    fn acquire_values_are_lease_or_lease_and_wait() {
        // The harness records `LEASE_MS` or `LEASE_MS WAIT_MS` on the acquire invoke.
        assert_eq!(acquire_lease_ms(""), Ok(None));
        assert_eq!(acquire_lease_ms("5000"), Ok(Some(5000)));
        assert_eq!(acquire_lease_ms("5000 250"), Ok(Some(5000)));
        assert!(acquire_lease_ms("5000 x").is_err());
        assert!(acquire_lease_ms("-5").is_err());
        assert!(acquire_lease_ms("1 2 3").is_err());
    }
}
