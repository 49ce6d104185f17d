//! Operation histories of lock services: the data model and the CSV format (schema v1).
//!
//! - [`op`]: one row of a history, [`Op`].
//! - [`csv`]: read ([`csv::read_path`], [`csv::read_str`], [`csv::Reader`]) and write
//!   ([`csv::Writer`]) CSV schema v1, documented in `histories/README.md`.
//! - [`pair`]: invokes paired with completions, [`pair::Operation`], for the checkers.
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
#![deny(missing_docs)]

pub mod convert;
pub mod csv;
pub mod error;
pub mod op;
pub mod pair;

pub use error::{PairError, ParseError, ParseErrorKind, Violation};
pub use op::{Op, OpType, Process};
pub use pair::{Operation, pair};
