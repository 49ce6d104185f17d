//! The errors of this crate.
//!
//! Three error records, one per kind of position they point at: [`ParseError`] (a CSV
//! `line:column`), [`PairError`] (the index of an op in memory) and
//! [`crate::convert::ConvertError`] (a line of a foreign file). They share their reasons:
//! [`Violation`] is a broken history rule (index gap, completion without an invoke, ...),
//! found the same way by the CSV reader and by [`crate::pair::pair`].

use thiserror::Error;

use crate::op::{OpType, Process};

/// A history rule of schema v1 that an op breaks, whatever the op was read from.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Violation {
    /// The index is not the previous index plus one (the first op has index 0).
    #[error("index {found} where {expected} was expected (indices are 0, 1, 2, ... with no gaps)")]
    IndexGap {
        /// The index the op should have had.
        expected: u64,
        /// The index it has.
        found: u64,
    },
    /// `time_ns` is smaller than the previous op's.
    #[error("time_ns {time_ns} is before the previous op's {previous_ns} (time never decreases)")]
    TimeBackwards {
        /// The previous op's time.
        previous_ns: u64,
        /// This op's time.
        time_ns: u64,
    },
    /// A nemesis row whose type is not `info`.
    #[error("nemesis op has type `{op_type}`; nemesis ops have type `info`")]
    NemesisNotInfo {
        /// The type found.
        op_type: OpType,
    },
    /// An invoke or nemesis op with an empty `f`.
    #[error("f is empty")]
    EmptyFunction,
    /// An `ok`/`fail`/`info` row of a client process that has no open invoke.
    #[error("`{op_type}` by process {process} with no open invoke")]
    CompletionWithoutInvoke {
        /// The client process.
        process: Process,
        /// The completion's type.
        op_type: OpType,
    },
    /// A completion whose `f` differs from its invoke's.
    #[error("f `{f}` differs from its invoke's `{invoke_f}` (index {invoke_index})")]
    FunctionMismatch {
        /// The invoke's index.
        invoke_index: u64,
        /// The invoke's f.
        invoke_f: String,
        /// The completion's f.
        f: String,
    },
    /// A completion whose `key` differs from its invoke's.
    #[error("key `{key}` differs from its invoke's `{invoke_key}` (index {invoke_index})")]
    KeyMismatch {
        /// The invoke's index.
        invoke_index: u64,
        /// The invoke's key.
        invoke_key: String,
        /// The completion's key.
        key: String,
    },
    /// An invoke by a process whose previous invoke is still open.
    #[error("process {process} invokes while its invoke at index {invoke_index} is open")]
    InvokeWhileOpen {
        /// The client process.
        process: Process,
        /// The open invoke's index.
        invoke_index: u64,
    },
    /// An invoke by a process whose earlier op ended `info`.
    #[error(
        "process {process} invokes after its op ended `info` at index {info_index} (a process that saw `info` never invokes again)"
    )]
    InvokeAfterInfo {
        /// The client process.
        process: Process,
        /// The index of the `info` completion.
        info_index: u64,
    },
}

/// Why a CSV history was rejected (see [`ParseError`] for where).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ParseErrorKind {
    /// The underlying reader failed.
    #[error("cannot read input: {0}")]
    Io(String),
    /// The input has no header row at all.
    #[error("empty input: expected the header `{header}`", header = crate::csv::HEADER)]
    EmptyInput,
    /// A header cell is not the column expected at that position.
    #[error("unknown column `{found}`, expected `{expected}`")]
    WrongColumn {
        /// The column schema v1 has at this position.
        expected: &'static str,
        /// The cell found.
        found: String,
    },
    /// The header ends before all columns are named.
    #[error("missing column `{expected}`")]
    MissingColumn {
        /// The first column that is missing.
        expected: &'static str,
    },
    /// The header has a cell after `error`.
    #[error("extra column `{found}` after `error`")]
    ExtraColumn {
        /// The extra cell.
        found: String,
    },
    /// A row with another number of fields than the header's 10.
    #[error("expected 10 fields, found {found}")]
    FieldCount {
        /// The number of fields in the row.
        found: usize,
    },
    /// A record with more fields than the reader buffers.
    #[error("more than {max} fields in one record")]
    TooManyFields {
        /// The bound ([`crate::csv::FIELDS_MAX`]).
        max: usize,
    },
    /// A field longer than the reader buffers.
    #[error("field longer than {max} bytes")]
    FieldTooLong {
        /// The bound ([`crate::csv::FIELD_BYTES_MAX`]).
        max: usize,
    },
    /// A field that is not valid UTF-8.
    #[error("{column} is not valid UTF-8")]
    InvalidUtf8 {
        /// The column's name.
        column: &'static str,
    },
    /// A quoted field that is still open at the end of the input.
    #[error("quoted field is not closed before the end of the input")]
    UnterminatedQuote,
    /// A `"` inside a field that did not start with one.
    #[error("quote inside an unquoted field (quote the whole field and double the quote)")]
    QuoteInUnquotedField,
    /// Something other than `,` or a line end right after a closing quote.
    #[error("`{found}` after a closing quote, expected `,` or the end of the line")]
    AfterClosingQuote {
        /// The character found (U+FFFD when it is not valid UTF-8).
        found: char,
    },
    /// A numeric column that does not hold a non-negative 64-bit integer.
    #[error("{column} `{found}` is not a non-negative integer")]
    NotANumber {
        /// The column's name.
        column: &'static str,
        /// The cell.
        found: String,
    },
    /// A process cell that is neither a number nor `nemesis`.
    #[error("process `{found}` is neither a non-negative integer nor `nemesis`")]
    BadProcess {
        /// The cell.
        found: String,
    },
    /// A type cell other than `invoke`, `ok`, `fail`, `info`.
    #[error("unknown type `{found}`, expected invoke, ok, fail or info")]
    UnknownType {
        /// The cell.
        found: String,
    },
    /// A well-formed row that breaks a history rule.
    #[error(transparent)]
    Violation(#[from] Violation),
}

/// A CSV history rejected at `line:column` (both 1-based).
///
/// Line 1 is the header. The column is the character column (counting Unicode scalar
/// values, not bytes) where the offending field starts; for a row with too few fields it
/// is the column just past the row's last character, and for a quoting error the column of
/// the offending character. Displayed as
/// `line:column: reason`, the form `locksmith check` prints.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{line}:{column}: {kind}")]
pub struct ParseError {
    /// 1-based line; line 1 is the header.
    pub line: u64,
    /// 1-based character column where the offending field starts.
    pub column: u64,
    /// Why.
    pub kind: ParseErrorKind,
}

/// An in-memory history that breaks a rule, found by [`crate::pair::pair`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("op at position {position} (index {index}): {violation}")]
pub struct PairError {
    /// The 0-based position of the offending op in the slice.
    pub position: usize,
    /// The op's own `index` field.
    pub index: u64,
    /// Which rule.
    pub violation: Violation,
}
