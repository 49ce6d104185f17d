//! Converters from other tools' history files into [`Op`]s of schema v1.
//!
//! - [`jepsen_edn`]: Jepsen's `history.edn` (one op map per line, or one vector of maps).
//! - [`porcupine_etcd`]: the Jepsen etcd logs of Porcupine's test data
//!   (`INFO  jepsen.util - 0\t:invoke\t:read\tnil`).
//! - [`porcupine_kv`]: Porcupine's key-value logs
//!   (`{:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}`).
//!
//! Every converter renumbers the ops 0, 1, 2, ... in file order and checks the result
//! against the rules of schema v1 (with the same validator the CSV reader uses, and the
//! reader's bound on a field's length), so its output always reads back. Errors name the
//! source line.

pub mod edn;
pub mod jepsen_edn;
pub mod porcupine_etcd;
pub mod porcupine_kv;

use thiserror::Error;

use crate::csv::FIELD_BYTES_MAX;
use crate::error::Violation;
use crate::op::Op;
use crate::pair::{Row, Validator};

/// Why a foreign history could not be converted.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConvertErrorKind {
    /// The text is not in the expected syntax.
    #[error("{0}")]
    Syntax(String),
    /// A required field is absent.
    #[error("missing {field}")]
    MissingField {
        /// The field's name (`:type`, `:process`, ...).
        field: &'static str,
    },
    /// A field has a value of the wrong kind.
    #[error("{field} is `{found}`, expected {expected}")]
    BadField {
        /// The field's name.
        field: &'static str,
        /// What it holds, as text.
        found: String,
        /// What it should hold.
        expected: &'static str,
    },
    /// The converted op breaks a rule of schema v1.
    #[error(transparent)]
    Violation(#[from] Violation),
}

/// A foreign history rejected at a 1-based line of its file.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("line {line}: {kind}")]
pub struct ConvertError {
    /// The 1-based line of the source file.
    pub line: u64,
    /// Why.
    pub kind: ConvertErrorKind,
}

/// Numbers `rows` (source line, op) 0, 1, 2, ... and checks them against schema v1.
fn finish(rows: Vec<(u64, Op)>) -> Result<Vec<Op>, ConvertError> {
    let mut validator = Validator::default();
    let mut ops = Vec::with_capacity(rows.len());
    for (index, (line, mut op)) in (0u64..).zip(rows) {
        op.index = index;
        // What the CSV reader refuses must not be written: name the source line now.
        let cells = [
            ("f", &op.f),
            ("key", &op.key),
            ("value", &op.value),
            ("node", &op.node),
            ("error", &op.error),
        ];
        if let Some((name, _)) = cells.iter().find(|(_, cell)| cell.len() > FIELD_BYTES_MAX) {
            let reason = format!(
                "{name} longer than {FIELD_BYTES_MAX} bytes (the CSV reader's bound for a field)"
            );
            return Err(ConvertError {
                line,
                kind: ConvertErrorKind::Syntax(reason),
            });
        }
        validator
            .check(&Row::of(&op))
            .map_err(|(violation, _)| ConvertError {
                line,
                kind: ConvertErrorKind::Violation(violation),
            })?;
        ops.push(op);
    }
    Ok(ops)
}
