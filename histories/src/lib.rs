//! Operation histories of lock services: the data model and the CSV format (schema v1).
//!
//! - [`op`]: one row of a history, [`Op`].
//! - [`csv`]: read ([`csv::read_path`], [`csv::read_str`], [`csv::Reader`]) and write
//!   ([`csv::Writer`]) CSV schema v1, documented in `histories/README.md`.
//! - [`mod@pair`]: invokes paired with completions, [`pair::Operation`], for the checkers.
//! - [`hash`]: [`hash::FastHasher`], for tables keyed by cells and ids.
//! - [`text`]: [`Text`], the shared, interned cells of a paired history.
//! - [`vocab`]: the vocabulary, defined once: op names, error words, fault verbs and their
//!   pairs, fault spans, check names.
//! - [`convert`]: Jepsen and Porcupine histories into [`Op`]s.
//! - [`error`]: [`ParseError`] (`line:column: reason`), [`PairError`], [`Violation`].
//!
//! ```
//! let text = "index,time_ns,process,type,f,key,value,token,node,error\n\
//!             0,1000,0,invoke,acquire,a,5000,,,\n\
//!             1,2000,0,ok,acquire,a,,7,n1,\n";
//! let ops = history::csv::read_str(text).unwrap();
//! let operations = history::pair::pair(&ops).unwrap();
//! assert_eq!(operations[0].completion.as_ref().unwrap().token, Some(7));
//! assert_eq!(operations[0].return_ns(), Some(2000));
//!
//! let bad = "index,time_ns,process,type,f,key,value,token,node,error\n\
//!            0,1000,0,ok,acquire,a,,7,n1,\n";
//! let error = history::csv::read_str(bad).unwrap_err();
//! assert_eq!(error.to_string(), "2:10: `ok` by process 0 with no open invoke");
//! ```
//!
//! Recording: the harness writes each op as it happens, flushed per row so that a run that
//! crashes keeps its history.
//!
//! ```
//! use history::csv::{Writer, WriterOptions};
//! use history::{Op, OpType, Process};
//!
//! let mut writer = Writer::with_options(Vec::new(), WriterOptions::flush_each_row()).unwrap();
//! let fault = Op {
//!     index: 0, // write_op numbers the rows itself
//!     time_ns: 1_500_000,
//!     process: Process::Nemesis,
//!     op_type: OpType::Info,
//!     f: "partition".into(),
//!     key: String::new(),
//!     value: "n1 n2 | n3 n4 n5".into(),
//!     token: None,
//!     node: String::new(),
//!     error: String::new(),
//! };
//! assert_eq!(writer.write_op(fault).unwrap(), 0);
//! let text = String::from_utf8(writer.into_inner().unwrap()).unwrap();
//! assert_eq!(text.lines().nth(1), Some("0,1500000,nemesis,info,partition,,n1 n2 | n3 n4 n5,,,"));
//! ```
#![deny(missing_docs)]

pub mod convert;
pub mod csv;
pub mod error;
pub mod hash;
pub mod op;
pub mod pair;
pub mod text;
pub mod vocab;

pub use error::{PairError, ParseError, ParseErrorKind, Violation};
pub use op::{Op, OpType, Process};
pub use pair::{Operation, pair};
pub use text::{Interner, Text};
pub use vocab::{AcquireValue, CheckName, ErrorWord, FaultSpan, FaultVerb, OpName, fault_spans};
