//! Counterexamples in words: the smallest slice of history that shows a failure.
//!
//! Fencing and lease violations are described where they are found ([`crate::fencing`],
//! [`crate::lease`]): both name the two operations involved. This module describes
//! linearizability failures: the operation that could not take effect, the state the key
//! could only be in, and, for locks, who held it (process, token, lease, rows) and which
//! releases of that token exist.

use crate::linear::lock_model::{LockInput, LockModel, LockOutput};
use crate::linear::{Counterexample, Model, Operation};
use crate::report::fmt_ns;

/// How many operations of the legal prefix a generic explanation lists.
const PREFIX_SHOWN_MAX: usize = 6;

fn rows<M: Model>(op: &Operation<M>) -> Vec<u64> {
    op.rows
        .invoke
        .into_iter()
        .chain(op.rows.completion)
        .collect()
}

fn who<M: Model>(model: &M, op: &Operation<M>) -> String {
    let what = model.describe_operation(&op.input, &op.output);
    match op.process {
        Some(p) => format!("process {p}'s {what} ({})", op.rows),
        None => format!("the internal event {what}"),
    }
}

fn interval<M: Model>(op: &Operation<M>) -> String {
    match op.return_ns {
        Some(r) => format!("between {} and {}", fmt_ns(op.call_ns), fmt_ns(r)),
        None => format!("after {}", fmt_ns(op.call_ns)),
    }
}

/// Explains a linearizability failure of a lock history; returns the text and the rows it
/// names.
pub fn lock_linear(ops: &[Operation<LockModel>], cx: &Counterexample) -> (String, Vec<u64>) {
    let Some(stuck) = cx.stuck.map(|i| &ops[i]) else {
        return (
            format!("no legal order exists; the key could be {}", cx.state),
            Vec::new(),
        );
    };
    let mut marked = rows(stuck);
    let mut text = format!(
        "key {key}: {who} cannot take effect at any instant {interval}: just before it returned, the key could only be {state}.",
        key = stuck.key,
        who = who(&LockModel, stuck),
        interval = interval(stuck),
        state = cx.state,
    );
    for token in tokens_in(&cx.state) {
        let (line, more) = holder(ops, &stuck.key, token);
        text.push('\n');
        text.push_str(&line);
        marked.extend(more);
    }
    (text, marked)
}

/// Who was granted `token` on `key`, with what lease, and the releases of it.
fn holder(ops: &[Operation<LockModel>], key: &str, token: u64) -> (String, Vec<u64>) {
    let grant = ops.iter().find(|op| {
        op.key == key && matches!(op.output, LockOutput::Granted { token: t } if t == token)
    });
    let Some(grant) = grant else {
        return (
            format!("token {token} was granted by no acquire of {key}"),
            Vec::new(),
        );
    };
    let mut marked = rows(grant);
    let lease = match grant.input {
        LockInput::Acquire {
            lease_ms: Some(ms), ..
        } => {
            let expiry = ops.iter().find(|op| {
                op.key == key && matches!(op.input, LockInput::Expire { token: t } if t == token)
            });
            let earliest = expiry.map_or(u64::MAX, |e| e.call_ns);
            format!(
                "lease {ms} ms from its invoke at {}, so it cannot expire before {}",
                fmt_ns(grant.call_ns),
                fmt_ns(earliest)
            )
        }
        _ => "no lease, so it never expires".to_string(),
    };
    let releases: Vec<&Operation<LockModel>> = ops
        .iter()
        .filter(|op| op.key == key && op.input == LockInput::Release { token })
        .collect();
    let release_text = if releases.is_empty() {
        format!("no release of token {token} exists")
    } else {
        releases
            .iter()
            .map(|r| {
                marked.extend(rows(r));
                format!("{} invoked at {}", who(&LockModel, r), fmt_ns(r.call_ns))
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let process = grant
        .process
        .map_or("nobody".to_string(), |p| format!("process {p}"));
    let text = format!(
        "token {token} was granted to {process} ({rows}) with {lease}; {release_text}.",
        rows = grant.rows,
    );
    (text, marked)
}

/// The tokens a lock state description names (`held under token 5`).
fn tokens_in(state: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut words = state.split_whitespace().peekable();
    while let Some(word) = words.next() {
        if word == "token" {
            let number: String = words
                .peek()
                .map(|w| w.chars().take_while(char::is_ascii_digit).collect())
                .unwrap_or_default();
            if let Ok(t) = number.parse() {
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
    }
    out
}

/// Explains a linearizability failure for any model: the stuck operation, the state after
/// the longest legal order found, and the last operations of that order.
pub fn generic_linear<M: Model>(
    model: &M,
    ops: &[Operation<M>],
    cx: &Counterexample,
) -> (String, Vec<u64>) {
    let mut marked = Vec::new();
    let key = cx.part.first().map_or("", |&i| ops[i].key.as_str());
    let mut text = format!(
        "key {key:?}: the longest legal order found places {} of its {} operations, after which the object {}.",
        cx.linearized.len(),
        cx.part.len(),
        cx.state
    );
    if let Some(stuck) = cx.stuck.map(|i| &ops[i]) {
        marked.extend(rows(stuck));
        text.push_str(&format!(
            "\nThen {} must take effect {}, and cannot.",
            who(model, stuck),
            interval(stuck)
        ));
        // The ops that force it: those that finished before it began must come first.
        let mut before: Vec<&Operation<M>> = cx
            .part
            .iter()
            .map(|&i| &ops[i])
            .filter(|op| op.precedes(stuck))
            .collect();
        before.sort_by_key(|op| std::cmp::Reverse(op.return_ns));
        if let Some(last) = before.first() {
            marked.extend(rows(*last));
            text.push_str(&format!(
                "\nIt began at {}, after {} had finished at {}, so it must come after that op{}.",
                fmt_ns(stuck.call_ns),
                who(model, last),
                fmt_ns(last.return_ns.unwrap_or(0)),
                if before.len() > 1 {
                    format!(
                        " and the {} others that finished before it began",
                        before.len() - 1
                    )
                } else {
                    String::new()
                }
            ));
        }
        let concurrent = cx
            .part
            .iter()
            .map(|&i| &ops[i])
            .filter(|op| !op.precedes(stuck) && !stuck.precedes(op) && !std::ptr::eq(*op, stuck))
            .count();
        text.push_str(&match concurrent {
            0 => "\nNo other operation overlaps it in time, so nothing else can come between."
                .to_string(),
            n => format!(
                "\n{n} other operations overlap it in time, and no order of them makes it legal."
            ),
        });
    }
    let shown = cx.linearized.len().min(PREFIX_SHOWN_MAX);
    if shown > 0 {
        text.push_str(&format!("\nThe last {shown} operations of that order:"));
        for &i in &cx.linearized[cx.linearized.len() - shown..] {
            marked.extend(rows(&ops[i]));
            text.push_str(&format!("\n  {}", who(model, &ops[i])));
        }
    }
    (text, marked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_read_from_state_descriptions() {
        // The lock explanation names every holder the state mentions.
        assert_eq!(
            tokens_in("held under token 5 or held under token 12"),
            vec![5, 12]
        );
        assert_eq!(tokens_in("free (last token 3)"), vec![3]);
        assert!(tokens_in("free").is_empty());
    }
}
