//! Jepsen's mutex (knossos `model/mutex`), and an owner-aware variant.
//!
//! | operation (history) | legal when | then |
//! |---|---|---|
//! | `acquire` ok, or info | the mutex is free | held (by the acquiring process) |
//! | `release` ok, or info | the mutex is held (owner-aware: by the releasing process) | free |
//! | any `fail` | never happened (Jepsen: a failed op did not take effect) | left out |
//!
//! No tokens, no leases, no owners: this is knossos's `Mutex` record, whose `step` answers
//! "already held" to a second acquire and "not held" to a release of a free mutex. The
//! owner-aware variant (`--model owner-mutex`) also requires that a release come from the
//! process that holds the mutex, which is what a lock service promises and what knossos's
//! plain mutex does not check. `info` ops may take effect at any time after their invoke,
//! or never. The partition is by key: each key is its own mutex (knossos histories have no
//! key, which is one mutex).

use history::OpName;

use super::lock_model::partition_by_key;
use super::{Model, Operation, Rows};
use crate::error::CheckError;

/// The mutex spec; `owner_aware` makes a release legal only from the holder's process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MutexModel {
    /// Whether a release must come from the process holding the mutex.
    pub owner_aware: bool,
}

/// A mutex operation and the process that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MutexInput {
    /// `acquire` by this process.
    Acquire(u64),
    /// `release` by this process.
    Release(u64),
}

/// What it answered: ok, or unknown (`info`, never completed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MutexOutput {
    /// It took effect.
    Ok,
    /// `info` or never completed.
    Unknown,
}

/// The mutex's state: free, or held (by a process in the owner-aware model).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MutexState {
    /// Nobody holds it.
    Free,
    /// Held; the holder's process in the owner-aware model, `None` in the plain one.
    Held(Option<u64>),
}

impl Model for MutexModel {
    type State = MutexState;
    type Input = MutexInput;
    type Output = MutexOutput;

    fn init(&self) -> MutexState {
        MutexState::Free
    }

    fn step(&self, state: &MutexState, input: &MutexInput, _: &MutexOutput) -> Option<MutexState> {
        match (*state, *input) {
            (MutexState::Free, MutexInput::Acquire(p)) => {
                Some(MutexState::Held(self.owner_aware.then_some(p)))
            }
            (MutexState::Held(holder), MutexInput::Release(p)) => {
                (!self.owner_aware || holder == Some(p)).then_some(MutexState::Free)
            }
            _ => None,
        }
    }

    fn partition(&self, history: &[Operation<Self>]) -> Vec<Vec<usize>> {
        partition_by_key(history)
    }

    fn describe_operation(&self, input: &MutexInput, output: &MutexOutput) -> String {
        let tail = match output {
            MutexOutput::Ok => "ok",
            MutexOutput::Unknown => "unknown",
        };
        match input {
            MutexInput::Acquire(_) => format!("acquire() -> {tail}"),
            MutexInput::Release(_) => format!("release() -> {tail}"),
        }
    }

    fn describe_state(&self, state: &MutexState) -> String {
        match state {
            MutexState::Free => "is free".to_string(),
            MutexState::Held(None) => "is held".to_string(),
            MutexState::Held(Some(p)) => format!("is held by process {p}"),
        }
    }
}

/// Builds mutex operations from paired history operations: failed ops are left out; an op
/// other than `acquire` or `release` is an error naming its row.
pub fn mutex_operations(
    ops: &[history::pair::Operation],
) -> Result<Vec<Operation<MutexModel>>, CheckError> {
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        let input = match OpName::parse(op.f.as_str()) {
            Some(OpName::Acquire) => MutexInput::Acquire(op.process),
            Some(OpName::Release) => MutexInput::Release(op.process),
            _ => {
                return Err(CheckError::bad(
                    op.invoke.index,
                    format!("op `{}` is not a mutex op (acquire, release)", op.f),
                ));
            }
        };
        if op.is_fail() {
            continue;
        }
        let output = if op.is_indeterminate() {
            MutexOutput::Unknown
        } else {
            MutexOutput::Ok
        };
        out.push(Operation {
            call_ns: op.call_ns(),
            return_ns: op.return_ns(),
            input,
            output,
            key: op.key.clone(),
            process: Some(op.process),
            rows: Rows {
                invoke: Some(op.invoke.index),
                completion: op.completion.as_ref().map(|c| c.index),
            },
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_and_free_release_are_illegal() {
        // knossos model.clj `Mutex`: "already held" and "not held".
        let plain = MutexModel::default();
        let held = plain.step(&MutexState::Free, &MutexInput::Acquire(1), &MutexOutput::Ok);
        assert_eq!(held, Some(MutexState::Held(None)));
        let held = held.unwrap();
        assert_eq!(
            plain.step(&held, &MutexInput::Acquire(2), &MutexOutput::Ok),
            None
        );
        assert_eq!(
            plain.step(&MutexState::Free, &MutexInput::Release(1), &MutexOutput::Ok),
            None
        );
        // Plain: anyone may release.
        assert_eq!(
            plain.step(&held, &MutexInput::Release(2), &MutexOutput::Ok),
            Some(MutexState::Free)
        );
    }

    #[test]
    fn owner_aware_release_must_come_from_the_holder() {
        // Issue 12 "owner-aware variant": a release must come from the holder's process.
        let owner = MutexModel { owner_aware: true };
        let held = owner
            .step(&MutexState::Free, &MutexInput::Acquire(1), &MutexOutput::Ok)
            .unwrap();
        assert_eq!(held, MutexState::Held(Some(1)));
        assert_eq!(
            owner.step(&held, &MutexInput::Release(2), &MutexOutput::Ok),
            None
        );
        assert_eq!(
            owner.step(&held, &MutexInput::Release(1), &MutexOutput::Ok),
            Some(MutexState::Free)
        );
    }
}
