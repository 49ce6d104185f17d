//! The client protocol's lines (`nemesis/PROTOCOL.md`): the requests the harness writes to
//! an adapter's stdin, and the strict reading of the lines the adapter writes back.
//!
//! Reading never panics and never guesses: a line that is not one JSON object, an answer
//! whose `type` or `error` word is not the protocol's, a token where the init line said
//! there are none (or none where there must be one) is a [`LineError`] that quotes the line.
//! The harness then records nothing from it and makes the run `unknown`.

use history::ErrorWord;
use serde::Serialize;
use serde_json::Value;

use crate::systems::Outcome;

/// The longest line an adapter may write, bytes. A longer one is an error (and the
/// adapter is stopped), so a runaway adapter cannot fill the harness's memory.
pub const LINE_MAX_BYTES: usize = 64 * 1024;

/// How much of a bad line an error message quotes, characters.
const QUOTE_MAX_CHARS: usize = 200;

/// One request, as written to the adapter (one JSON object a line).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Request {
    /// The request's id, unique within one adapter process (1, 2, 3, ...).
    pub id: u64,
    /// What to do.
    #[serde(flatten)]
    pub op: RequestOp,
    /// How long the adapter has to answer, ms; the harness records `info` after that (and a
    /// short grace).
    pub timeout_ms: u64,
}

/// The operation of a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum RequestOp {
    /// Take `key` for `lease_ms`, waiting up to `wait_ms` when it is held (0: fail at once).
    Acquire {
        /// The lock key.
        key: String,
        /// The lease, ms.
        lease_ms: u64,
        /// How long to wait for a held key, ms.
        wait_ms: u64,
    },
    /// Give `key` back; `token` is the grant's (absent when the adapter issues none).
    Release {
        /// The lock key.
        key: String,
        /// The grant's token.
        #[serde(skip_serializing_if = "Option::is_none")]
        token: Option<u64>,
    },
    /// Write `value` to the service's own fenced resource `key` under `token` (sent only to
    /// adapters whose init line says `"resource":true`).
    Write {
        /// The resource key.
        key: String,
        /// The value.
        value: String,
        /// The token the writer holds.
        #[serde(skip_serializing_if = "Option::is_none")]
        token: Option<u64>,
    },
}

impl RequestOp {
    /// The op's name (`acquire`, `release`, `write`).
    pub fn name(&self) -> &'static str {
        match self {
            RequestOp::Acquire { .. } => "acquire",
            RequestOp::Release { .. } => "release",
            RequestOp::Write { .. } => "write",
        }
    }
}

impl Request {
    /// The request as one line, without its newline.
    pub fn line(&self) -> String {
        // A struct of strings and integers always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What an adapter says of itself in its first line, `{"type":"init",...}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Init {
    /// The adapter's grants carry fencing tokens (default true).
    pub fencing: bool,
    /// The service has a fenced resource of its own: writes go to the adapter (default
    /// false: the harness's resource takes them).
    pub resource: bool,
}

impl Default for Init {
    fn default() -> Self {
        Init {
            fencing: true,
            resource: false,
        }
    }
}

/// One line an adapter wrote, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// The init line.
    Init(Init),
    /// The answer to request `id`.
    Answer {
        /// The request's id.
        id: u64,
        /// What the answer says, before it is matched with its request.
        answer: Answer,
    },
}

/// An answer, read but not yet matched with its request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `{"type":"ok"}`, with the grant's token and the node that answered, when given.
    Ok {
        /// The token.
        token: Option<u64>,
        /// The node.
        node: Option<u64>,
    },
    /// `{"type":"fail","error":WORD}`: certainly did not take effect.
    Fail {
        /// The error word.
        error: ErrorWord,
        /// The node.
        node: Option<u64>,
    },
    /// `{"type":"info","error":WORD}`: the outcome is unknown.
    Info(ErrorWord),
}

/// A line the harness could not accept, and why; the message quotes the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError(pub String);

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The line, quoted and cut to [`QUOTE_MAX_CHARS`].
pub fn quote(line: &str) -> String {
    let cut: String = line.chars().take(QUOTE_MAX_CHARS).collect();
    if cut.len() < line.len() {
        format!("{cut:?}...")
    } else {
        format!("{cut:?}")
    }
}

fn bad(line: &str, why: impl std::fmt::Display) -> LineError {
    LineError(format!("{}: {why}", quote(line)))
}

/// The error words a `fail` may carry: each says the op certainly did not take effect.
pub const FAIL_WORDS: [ErrorWord; 6] = [
    ErrorWord::Busy,
    ErrorWord::NotHolder,
    ErrorWord::StaleToken,
    ErrorWord::Unavailable,
    ErrorWord::Invalid,
    ErrorWord::NoLeader,
];

/// The error words an `info` may carry.
pub const INFO_WORDS: [ErrorWord; 4] = [
    ErrorWord::Timeout,
    ErrorWord::Indeterminate,
    ErrorWord::Disconnected,
    ErrorWord::Unavailable,
];

fn words(list: &[ErrorWord]) -> String {
    list.iter()
        .map(|w| w.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads one line. `first` is true for the adapter's first line, the only place an init
/// line may stand.
pub fn read_line(line: &str, first: bool) -> Result<Line, LineError> {
    let value: Value =
        serde_json::from_str(line).map_err(|e| bad(line, format!("not a JSON object ({e})")))?;
    let Value::Object(object) = &value else {
        return Err(bad(line, "not a JSON object"));
    };
    let kind = object
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(line, "no \"type\" (ok, fail, info or init)"))?;
    if kind == "init" {
        if !first {
            return Err(bad(line, "an init line after the first line"));
        }
        return read_init(line, object).map(Line::Init);
    }
    let id = object
        .get("id")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad(line, "no \"id\" (the request's id, an integer)"))?;
    let node = match object.get("node") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| bad(line, "\"node\" is not a node id"))?,
        ),
    };
    // The `error` word, which must be one of `allowed` (`rule` says why, in the message).
    let error = |allowed: &[ErrorWord], rule: &str| -> Result<ErrorWord, LineError> {
        let word = object
            .get("error")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(line, format!("a {kind} without an \"error\" word")))?;
        let error = word
            .parse::<ErrorWord>()
            .map_err(|_| bad(line, format!("unknown error word {word:?}")))?;
        if !allowed.contains(&error) {
            return Err(bad(
                line,
                format!("{rule} one of {}, not {error}", words(allowed)),
            ));
        }
        Ok(error)
    };
    let answer = match kind {
        "ok" => Answer::Ok {
            token: match object.get("token") {
                None | Some(Value::Null) => None,
                Some(t) => Some(
                    t.as_u64()
                        .filter(|t| *t >= 1)
                        .ok_or_else(|| bad(line, "\"token\" is not a positive integer"))?,
                ),
            },
            node,
        },
        "fail" => Answer::Fail {
            error: error(
                &FAIL_WORDS,
                "fail means certainly not applied; its error is",
            )?,
            node,
        },
        "info" => Answer::Info(error(&INFO_WORDS, "an info's error is")?),
        other => {
            return Err(bad(
                line,
                format!("unknown type {other:?} (ok, fail, info or init)"),
            ));
        }
    };
    Ok(Line::Answer { id, answer })
}

fn read_init(line: &str, object: &serde_json::Map<String, Value>) -> Result<Init, LineError> {
    let flag = |name: &str, default: bool| match object.get(name) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(line, format!("\"{name}\" is not true or false"))),
    };
    Ok(Init {
        fencing: flag("fencing", true)?,
        resource: flag("resource", false)?,
    })
}

/// Matches an answer with the request it answers: the [`Outcome`] the history records, or
/// an error when the answer cannot be one of that request's (`busy` for a release, a token
/// where the init line said there are none, no token on a fenced grant).
pub fn outcome_of(
    op: &RequestOp,
    answer: &Answer,
    init: Init,
    line: &str,
) -> Result<Outcome, LineError> {
    let allowed: &[ErrorWord] = match op {
        RequestOp::Acquire { .. } => &[ErrorWord::Busy],
        RequestOp::Release { .. } => &[ErrorWord::NotHolder],
        RequestOp::Write { .. } => &[ErrorWord::StaleToken],
    };
    let op_name = op.name();
    Ok(match answer {
        Answer::Ok { token, node } => {
            match (op, token, init.fencing) {
                (RequestOp::Acquire { .. }, None, true) => {
                    return Err(bad(
                        line,
                        "an acquire ok without a \"token\" (an adapter whose grants carry none says {\"type\":\"init\",\"fencing\":false} first)",
                    ));
                }
                (RequestOp::Acquire { .. }, Some(_), false) => {
                    return Err(bad(
                        line,
                        "a \"token\" from an adapter whose init line said \"fencing\":false",
                    ));
                }
                (RequestOp::Acquire { .. }, _, _) | (_, None, _) => {}
                (_, Some(_), _) => {
                    return Err(bad(
                        line,
                        format!("a \"token\" on a {op_name} ok (only an acquire grants one)"),
                    ));
                }
            }
            Outcome::Ok {
                token: *token,
                node: *node,
            }
        }
        Answer::Fail { error, node } => {
            let general = matches!(
                error,
                ErrorWord::Unavailable | ErrorWord::Invalid | ErrorWord::NoLeader
            );
            if !general && !allowed.contains(error) {
                return Err(bad(line, format!("a {op_name} cannot fail {error}")));
            }
            Outcome::Fail {
                error: *error,
                node: *node,
            }
        }
        Answer::Info(error) => Outcome::Info(*error),
    })
}

/// The answer a native client's outcome becomes (`locksmith client ... lines`, the Rust
/// side of the protocol), as one line.
pub fn answer_line(id: u64, outcome: &Outcome) -> String {
    let mut object = serde_json::Map::new();
    object.insert("id".into(), id.into());
    match outcome {
        Outcome::Ok { token, node } => {
            object.insert("type".into(), "ok".into());
            if let Some(token) = token {
                object.insert("token".into(), (*token).into());
            }
            if let Some(node) = node {
                object.insert("node".into(), (*node).into());
            }
        }
        Outcome::Fail { error, node } => {
            object.insert("type".into(), "fail".into());
            object.insert("error".into(), error.as_str().into());
            if let Some(node) = node {
                object.insert("node".into(), (*node).into());
            }
        }
        Outcome::Info(error) => {
            object.insert("type".into(), "info".into());
            let word = if INFO_WORDS.contains(error) {
                *error
            } else {
                ErrorWord::Indeterminate
            };
            object.insert("error".into(), word.as_str().into());
        }
    }
    Value::Object(object).to_string()
}

/// A request as the adapter side reads it (`locksmith client ... lines`): the same fields
/// as [`Request`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct IncomingRequest {
    /// The id to answer under.
    pub id: u64,
    /// `acquire`, `release`, `write` or `read`.
    pub op: String,
    /// The key.
    pub key: String,
    /// Acquire: the lease, ms.
    #[serde(default)]
    pub lease_ms: u64,
    /// Acquire: the wait, ms.
    #[serde(default)]
    pub wait_ms: u64,
    /// Release and write: the token.
    #[serde(default)]
    pub token: Option<u64>,
    /// The answer's deadline, ms from now.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire() -> RequestOp {
        RequestOp::Acquire {
            key: "k1".into(),
            lease_ms: 5000,
            wait_ms: 0,
        }
    }

    #[test]
    fn requests_are_the_documented_lines() {
        // PROTOCOL.md, "Requests".
        let r = Request {
            id: 7,
            op: acquire(),
            timeout_ms: 2000,
        };
        assert_eq!(
            r.line(),
            r#"{"id":7,"op":"acquire","key":"k1","lease_ms":5000,"wait_ms":0,"timeout_ms":2000}"#
        );
        let r = Request {
            id: 8,
            op: RequestOp::Release {
                key: "k1".into(),
                token: None,
            },
            timeout_ms: 2000,
        };
        assert_eq!(
            r.line(),
            r#"{"id":8,"op":"release","key":"k1","timeout_ms":2000}"#
        );
    }

    #[test]
    fn answers_read_into_outcomes() {
        let init = Init::default();
        let line = r#"{"id":7,"type":"ok","token":42,"node":2}"#;
        let Ok(Line::Answer { id, answer }) = read_line(line, false) else {
            panic!("not read");
        };
        assert_eq!(id, 7);
        assert_eq!(
            outcome_of(&acquire(), &answer, init, line),
            Ok(Outcome::Ok {
                token: Some(42),
                node: Some(2)
            })
        );
        let line = r#"{"id":7,"type":"fail","error":"busy"}"#;
        let Ok(Line::Answer { answer, .. }) = read_line(line, false) else {
            panic!("not read");
        };
        assert_eq!(
            outcome_of(&acquire(), &answer, init, line),
            Ok(Outcome::Fail {
                error: ErrorWord::Busy,
                node: None
            })
        );
        let line = r#"{"id":7,"type":"info","error":"timeout"}"#;
        assert_eq!(
            read_line(line, false),
            Ok(Line::Answer {
                id: 7,
                answer: Answer::Info(ErrorWord::Timeout)
            })
        );
    }

    #[test]
    fn bad_lines_are_errors_that_quote_the_line() {
        for (line, why) in [
            ("hello", "not a JSON object"),
            ("[1,2]", "not a JSON object"),
            (r#"{"id":1}"#, "no \"type\""),
            (r#"{"type":"ok"}"#, "no \"id\""),
            (r#"{"id":1,"type":"yes"}"#, "unknown type"),
            (
                r#"{"id":1,"type":"fail","error":"nope"}"#,
                "unknown error word",
            ),
            (r#"{"id":1,"type":"fail","error":"timeout"}"#, "fail means"),
            (r#"{"id":1,"type":"ok","token":0}"#, "positive integer"),
            (r#"{"id":1,"type":"ok","token":-3}"#, "positive integer"),
            (r#"{"type":"init","fencing":false}"#, "after the first line"),
        ] {
            let error = read_line(line, false).expect_err(line);
            assert!(
                error.0.contains(&format!("{line:?}")) && error.0.contains(why),
                "{line}: {error}"
            );
        }
    }

    #[test]
    fn an_init_line_says_whether_grants_carry_tokens() {
        assert_eq!(
            read_line(r#"{"type":"init","fencing":false}"#, true),
            Ok(Line::Init(Init {
                fencing: false,
                resource: false
            }))
        );
        let tokenless = Init {
            fencing: false,
            resource: false,
        };
        let line = r#"{"id":1,"type":"ok"}"#;
        let ok = Answer::Ok {
            token: None,
            node: None,
        };
        assert!(outcome_of(&acquire(), &ok, tokenless, line).is_ok());
        let error = outcome_of(&acquire(), &ok, Init::default(), line).expect_err("no token");
        assert!(error.0.contains("without a \"token\""), "{error}");
        let with = Answer::Ok {
            token: Some(3),
            node: None,
        };
        assert!(outcome_of(&acquire(), &with, tokenless, line).is_err());
        let release = RequestOp::Release {
            key: "k".into(),
            token: Some(3),
        };
        let busy = Answer::Fail {
            error: ErrorWord::Busy,
            node: None,
        };
        assert!(outcome_of(&release, &busy, Init::default(), line).is_err());
    }

    #[test]
    fn a_native_outcome_becomes_a_line_that_reads_back() {
        for outcome in [
            Outcome::Ok {
                token: Some(9),
                node: Some(1),
            },
            Outcome::Fail {
                error: ErrorWord::Busy,
                node: None,
            },
            Outcome::Info(ErrorWord::Timeout),
        ] {
            let line = answer_line(3, &outcome);
            let Ok(Line::Answer { id: 3, answer }) = read_line(&line, false) else {
                panic!("{line} did not read back");
            };
            assert_eq!(
                outcome_of(&acquire(), &answer, Init::default(), &line),
                Ok(outcome)
            );
        }
    }
}
