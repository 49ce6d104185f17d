//! The history's vocabulary, defined once: op names ([`OpName`]), error words
//! ([`ErrorWord`]), fault verbs with their pairs ([`FaultVerb`]), the fault spans they
//! make ([`fault_spans`]), and the names of the checks that judge a history
//! ([`CheckName`]).
//!
//! Every crate that writes or reads a history spells these words through this module: the
//! harness records them, the checkers and the report read them. Before it existed the
//! timeline paired `skew` with `unskew` while the harness ended a skew with `reset-clock`,
//! so every clock fault was drawn as never ended.
//!
//! ```
//! use history::vocab::{CheckName, ErrorWord, FaultVerb, OpName};
//!
//! assert_eq!(OpName::Acquire.as_str(), "acquire");
//! assert_eq!(CheckName::LeaseSafety.to_string(), "lease safety");
//! assert_eq!("gave-up".parse::<ErrorWord>(), Ok(ErrorWord::GaveUp));
//! assert_eq!(FaultVerb::Skew.ending(), Some(FaultVerb::ResetClock));
//! assert_eq!(FaultVerb::Strobe.ending(), Some(FaultVerb::ResetClock));
//! assert!(FaultVerb::ResetClock.ends_fault());
//! assert_eq!(FaultVerb::Recover.ending(), None); // a marker, not a fault
//! ```

use std::fmt;
use std::str::FromStr;

use crate::Op;

/// A word the vocabulary does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {word:?}")]
pub struct UnknownWord {
    /// `op name`, `error word`, `fault verb` or `check name`.
    pub what: &'static str,
    /// The word.
    pub word: String,
}

/// Declares a word enum with its spellings, `ALL`, `as_str`, `Display`, `FromStr`, serde
/// (as its spelling) and comparisons with text either way round.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident, $what:literal, { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every word, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The history's spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The word spelled `text`, if it is one.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownWord;

            fn from_str(text: &str) -> Result<Self, UnknownWord> {
                $name::parse(text).ok_or_else(|| UnknownWord { what: $what, word: text.to_owned() })
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.as_str()
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.as_str()
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self.as_str() == other.as_str()
            }
        }

        impl PartialEq<$name> for $crate::text::Text {
            fn eq(&self, other: &$name) -> bool {
                self.as_str() == other.as_str()
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

words!(
    /// The `f` of a client row.
    OpName, "op name", {
        /// Lock: take a key (value: `LEASE_MS` or `LEASE_MS WAIT_MS`).
        Acquire => "acquire",
        /// Lock: give a key back (token: the token released).
        Release => "release",
        /// Fenced resource (lock model) or register: write a value.
        Write => "write",
        /// Fenced resource or register: read a value.
        Read => "read",
        /// Register: compare and set (value `OLD NEW`).
        Cas => "cas",
        /// Key-value: read a key.
        Get => "get",
        /// Key-value: set a key.
        Put => "put",
        /// Key-value: append to a key.
        Append => "append",
        /// Multi-register: a transaction of reads and writes.
        Txn => "txn",
    }
);

words!(
    /// The `error` of a `fail` or `info` row.
    ErrorWord, "error word", {
        /// Acquire failed: the key was held at some instant inside the op.
        Busy => "busy",
        /// Release failed: the key was not held under that token.
        NotHolder => "not-holder",
        /// Write refused by the fenced resource: its token is older than one it accepted.
        StaleToken => "stale-token",
        /// No answer within the deadline: the outcome is unknown (`info`).
        Timeout => "timeout",
        /// Certainly not applied: no node could take the request.
        Unavailable => "unavailable",
        /// The request was malformed or over a bound; nothing was done.
        Invalid => "invalid",
        /// The client gave up mid-acquire and cancelled its request (`info`).
        GaveUp => "gave-up",
        /// The client closed its connection mid-acquire (`info`).
        Disconnected => "disconnected",
        /// Certainly not applied: the cluster had no leader (etcd's refusal).
        NoLeader => "no-leader",
        /// A request was sent and its outcome is unknown for a reason other than a deadline.
        Indeterminate => "indeterminate",
        /// The service forgot the client's session (idle past its timeout, or evicted) and
        /// answered nothing else: the op's outcome is unknown (`info`; an earlier attempt of
        /// it may have taken effect). Liveness rule S judges whether the session could have
        /// been idle that long.
        SessionExpired => "session-expired",
        /// The harness itself failed to run the op (a bug or resource problem of the tester).
        Harness => "harness",
        /// Register: a cas whose compare did not match (Porcupine's etcd `:fail :cas`); the
        /// register model reads it as an observation, not as an op that did nothing.
        Mismatch => "mismatch",
    }
);

impl ErrorWord {
    /// True for the words of a client that left mid-acquire on purpose (`gave-up`,
    /// `disconnected`): the liveness checks expect its key to be grantable again soon.
    pub fn is_abandon(self) -> bool {
        matches!(self, ErrorWord::GaveUp | ErrorWord::Disconnected)
    }
}

words!(
    /// The `f` of a nemesis row: a fault verb, its pair, or the `recover` marker.
    FaultVerb, "fault verb", {
        /// SIGKILL nodes.
        Kill => "kill",
        /// Start killed nodes again from their data dirs (ends `kill`).
        Restart => "restart",
        /// SIGSTOP nodes.
        Pause => "pause",
        /// SIGCONT paused nodes (ends `pause`).
        Resume => "resume",
        /// Stall client processes, as a GC pause of a lock holder would.
        PauseClients => "pause-clients",
        /// Let stalled clients go on (ends `pause-clients`).
        ResumeClients => "resume-clients",
        /// Cut links between nodes (a grudge).
        Partition => "partition",
        /// Cut nothing (ends `partition`).
        Heal => "heal",
        /// Run nodes' lease clocks at another rate and/or jump them.
        Skew => "skew",
        /// Jump nodes' lease clocks back and forth.
        Strobe => "strobe",
        /// Run the lease clocks at the normal rate again (ends `skew` and `strobe`).
        ResetClock => "reset-clock",
        /// Hold messages on links (the proxy keeps them).
        Hold => "hold",
        /// Deliver held messages (ends `hold`).
        Release => "release",
        /// Delay messages on links (latency, jitter).
        Slow => "slow",
        /// Deliver at full speed again (ends `slow`).
        Unslow => "unslow",
        /// Drop, duplicate or reorder some messages on links.
        Flaky => "flaky",
        /// Deliver faithfully again (ends `flaky`).
        Unflaky => "unflaky",
        /// A node crashed by itself at a fault point of the simulator (`lockd::buggify`'s
        /// crash points), not by a nemesis.
        Crash => "crash",
        /// The simulator started a crashed node again (ends `crash`).
        Revive => "revive",
        /// A client-side fault point of the simulator fired (`lockd::buggify`): a client's
        /// answer was lost with its connection, or its connection was cut with a request in
        /// flight. The op in flight may take longer or leave its grant unread, which no node
        /// caused.
        ClientFault => "client-fault",
        /// Ends `client-fault` (recorded at once: the fault acts on the ops in flight).
        ClientFaultEnd => "client-fault-end",
        /// A marker, not a fault: everything is healed and the recovery phase starts.
        Recover => "recover",
    }
);

impl FaultVerb {
    /// The verb that ends a fault this verb starts (`kill` -> `restart`, `skew` ->
    /// `reset-clock`, ...); `None` for ending verbs and the `recover` marker.
    pub fn ending(self) -> Option<FaultVerb> {
        use FaultVerb::*;
        match self {
            Kill => Some(Restart),
            Pause => Some(Resume),
            PauseClients => Some(ResumeClients),
            Partition => Some(Heal),
            Skew | Strobe => Some(ResetClock),
            Hold => Some(Release),
            Slow => Some(Unslow),
            Flaky => Some(Unflaky),
            Crash => Some(Revive),
            ClientFault => Some(ClientFaultEnd),
            Revive | Restart | Resume | ResumeClients | Heal | ResetClock | Release | Unslow
            | Unflaky | ClientFaultEnd | Recover => None,
        }
    }

    /// True for verbs that start a fault.
    pub fn starts_fault(self) -> bool {
        self.ending().is_some()
    }

    /// True for verbs that end a fault.
    pub fn ends_fault(self) -> bool {
        FaultVerb::ALL.iter().any(|v| v.ending() == Some(self))
    }
}

words!(
    /// The name of a check: how results.json, the JUnit report, the summaries and the
    /// timeline name one verdict on a run.
    ///
    /// The same event used to get three verdicts along three pipelines: each pipeline
    /// (`locksmith check`, `locksmith test` with its JUnit report, `locksmith sim`) spelled
    /// its check names itself, so the JUnit report of a run had two `liveness` cases, the
    /// checker's judgement of the history and the harness's recovery phase, which could
    /// disagree, and a reader looking a check up by name found whichever came first. A check
    /// named in two places must be spelled once: every crate that makes, finds or reports a
    /// check names it through this table. (The model's properties, "Election Safety" and
    /// the like, are sentences of their own and no check names.)
    CheckName, "check name", {
        /// The history is linearizable against its model (the checker).
        Linearizability => "linearizability",
        /// Tokens unique, strictly increasing in real time, fenced writes never stale (the
        /// checker).
        Fencing => "fencing",
        /// No two holders of one key within the drift bound (the checker).
        LeaseSafety => "lease safety",
        /// Recovery after the final heal, phantom locks released, waiters answered (the
        /// checker, from the history's nemesis rows).
        Liveness => "liveness",
        /// No node stopped on its own, and the run could finish (the harness).
        NodeHealth => "node health",
        /// The nodes' recorded traces replay through the model (the harness, `--trace`).
        TraceReplay => "trace replay",
        /// The client adapters of `--system exec` kept the JSON-lines protocol (the harness:
        /// a malformed line, an unknown id or an adapter that never answers is unknown).
        ClientProtocol => "client protocol",
        /// The recorded history reads back (the simulator, when it does not).
        History => "history",
        /// The run's own recovery phase: every client slot succeeded again after the final
        /// heal (the harness's JUnit report, beside a judged `liveness`).
        Recovery => "recovery",
        /// The JUnit case of a run with no check result at all: never a green report for a
        /// run that checked nothing.
        Checks => "checks",
        /// JUnit's case for a run whose teardown failed (processes, rules or the net left
        /// behind): not a verdict on the system, but never a silent pass.
        Teardown => "teardown",
    }
);

impl CheckName {
    /// What the check evaluates, in one line: the summary's and `locksmith check`'s text
    /// beside each verdict (issue 28: a valid run's summary listed only liveness, so a reader
    /// could not tell which checks had run).
    pub fn evaluates(self) -> &'static str {
        match self {
            CheckName::Linearizability => {
                "every client op, per key, against the model's sequential spec (info ops may or may not take effect)"
            }
            CheckName::Fencing => {
                "fencing tokens unique and increasing in real time; no write accepted under an older token"
            }
            CheckName::LeaseSafety => {
                "no two holders of one key with overlapping leases, beyond the drift bound"
            }
            CheckName::Liveness => {
                "after the final heal: every client recovers, a left client's key frees, waiters are answered"
            }
            CheckName::NodeHealth => "no node exited or panicked on its own during the run",
            CheckName::TraceReplay => "the nodes' traces, step by step, through the model's checks",
            CheckName::ClientProtocol => {
                "every adapter line parsed, answered a known request once, within its deadline"
            }
            CheckName::History => "the recorded history reads back and pairs",
            CheckName::Recovery => "the run's recovery phase: every client slot succeeded again",
            CheckName::Checks => "that the run produced check results at all",
            CheckName::Teardown => "that the run left no process, rule or net behind",
        }
    }
}

/// The `value` of an acquire invoke: `LEASE_MS` for a try-acquire, `LEASE_MS WAIT_MS` (two
/// integers, one space) for an acquire that waits up to `WAIT_MS` for a held key.
///
/// ```
/// use history::vocab::AcquireValue;
///
/// assert_eq!(AcquireValue::parse("5000"), Some(AcquireValue { lease_ms: 5000, wait_ms: None }));
/// let waits = AcquireValue { lease_ms: 20000, wait_ms: Some(800) };
/// assert_eq!(waits.to_string(), "20000 800");
/// assert_eq!(AcquireValue::parse("20000 800"), Some(waits));
/// assert_eq!(AcquireValue::parse("20000  800"), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AcquireValue {
    /// The lease asked for, ms.
    pub lease_ms: u64,
    /// How long the acquire waits for a held key, ms; `None` for a try-acquire.
    pub wait_ms: Option<u64>,
}

impl AcquireValue {
    /// A try-acquire (`wait_ms` 0) or a waiting acquire.
    pub fn new(lease_ms: u64, wait_ms: u64) -> Self {
        AcquireValue {
            lease_ms,
            wait_ms: (wait_ms > 0).then_some(wait_ms),
        }
    }

    /// Parses `LEASE_MS` or `LEASE_MS WAIT_MS` (ASCII digits, one space); `None` otherwise.
    pub fn parse(text: &str) -> Option<AcquireValue> {
        let number = |t: &str| {
            (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse::<u64>().ok())
                .flatten()
        };
        match text.split_once(' ') {
            None => Some(AcquireValue {
                lease_ms: number(text)?,
                wait_ms: None,
            }),
            Some((lease, wait)) => Some(AcquireValue {
                lease_ms: number(lease)?,
                wait_ms: Some(number(wait)?),
            }),
        }
    }
}

impl fmt::Display for AcquireValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.wait_ms {
            None => write!(f, "{}", self.lease_ms),
            Some(wait) => write!(f, "{} {wait}", self.lease_ms),
        }
    }
}

/// One fault in time: from its first row to the last row of its ending verb.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSpan {
    /// The verb that started it (a lone ending verb or an unknown verb starts nothing; an
    /// unknown verb is kept as a point span with `verb` `None`).
    pub verb: Option<FaultVerb>,
    /// The starting row (an index into the slice given to [`fault_spans`]).
    pub start: usize,
    /// The ending row, `None` when it never ended.
    pub end: Option<usize>,
    /// When it started, ns.
    pub start_ns: u64,
    /// When it ended, ns; `None` when it never ended (active to the end of the history).
    pub end_ns: Option<u64>,
}

impl FaultSpan {
    /// True when the fault may have been active at some instant in `[from_ns, to_ns]`.
    pub fn overlaps(&self, from_ns: u64, to_ns: u64) -> bool {
        self.start_ns <= to_ns && self.end_ns.is_none_or(|end| end >= from_ns)
    }
}

/// The fault spans of nemesis rows (in history order), paired by [`FaultVerb::ending`].
///
/// A fault may be recorded as two rows (before and after it acted, same `f` and `value`):
/// the second row of a start is skipped, and the second row of an end moves the end to it.
/// An ending verb ends every open fault it pairs with (the harness's restart, resume and
/// reset-clock undo every node their family left faulty). Rows that are neither (the
/// `recover` marker, unknown verbs) are point spans, so an unknown verb still counts as a
/// fault in time. A lone ending verb makes no span.
pub fn fault_spans(rows: &[Op]) -> Vec<FaultSpan> {
    let mut spans: Vec<FaultSpan> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    // The spans the previous ending row closed, with its verb and value.
    let mut last_end: Option<(FaultVerb, &str, Vec<usize>)> = None;
    for (at, row) in rows.iter().enumerate() {
        let verb = FaultVerb::parse(&row.f);
        match verb {
            Some(v) if v.starts_fault() => {
                last_end = None;
                let repeat = open.iter().any(|s| {
                    let first = &rows[spans[*s].start];
                    first.f == row.f && first.value == row.value
                });
                if !repeat {
                    open.push(spans.len());
                    spans.push(FaultSpan {
                        verb,
                        start: at,
                        end: None,
                        start_ns: row.time_ns,
                        end_ns: None,
                    });
                }
            }
            Some(v) if v.ends_fault() => {
                if let Some((lv, lvalue, closed)) = &last_end
                    && *lv == v
                    && *lvalue == row.value
                {
                    for s in closed {
                        spans[*s].end = Some(at);
                        spans[*s].end_ns = Some(row.time_ns);
                    }
                    continue;
                }
                let (closed, still): (Vec<usize>, Vec<usize>) = open
                    .iter()
                    .partition(|s| spans[**s].verb.and_then(FaultVerb::ending) == Some(v));
                open = still;
                for s in &closed {
                    spans[*s].end = Some(at);
                    spans[*s].end_ns = Some(row.time_ns);
                }
                last_end = Some((v, row.value.as_str(), closed));
            }
            _ => {
                last_end = None;
                spans.push(FaultSpan {
                    verb,
                    start: at,
                    end: Some(at),
                    start_ns: row.time_ns,
                    end_ns: Some(row.time_ns),
                });
            }
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{OpType, Process};

    fn row(time_ns: u64, f: &str, value: &str) -> Op {
        Op {
            index: 0,
            time_ns,
            process: Process::Nemesis,
            op_type: OpType::Info,
            f: f.into(),
            key: String::new(),
            value: value.into(),
            token: None,
            node: String::new(),
            error: String::new(),
        }
    }

    #[test]
    fn every_word_round_trips_and_every_start_has_an_end() {
        for v in FaultVerb::ALL {
            assert_eq!(FaultVerb::parse(v.as_str()), Some(*v));
            if let Some(end) = v.ending() {
                assert!(end.ends_fault(), "{v} ends with {end}");
                assert!(!end.starts_fault());
            }
        }
        for w in ErrorWord::ALL {
            assert_eq!(w.as_str().parse::<ErrorWord>(), Ok(*w));
        }
        for o in OpName::ALL {
            assert_eq!(o.to_string().parse::<OpName>(), Ok(*o));
        }
        for c in CheckName::ALL {
            assert_eq!(CheckName::parse(c.as_str()), Some(*c));
        }
        assert_eq!(
            "unskew".parse::<FaultVerb>().unwrap_err().to_string(),
            "unknown fault verb \"unskew\""
        );
        assert!("busy" == ErrorWord::Busy);
        assert!(!FaultVerb::Recover.starts_fault() && !FaultVerb::Recover.ends_fault());
    }

    #[test]
    fn every_start_verb_makes_a_span_ended_by_its_pair() {
        // Issue 13: every fault kind's span is drawn; skew and strobe end with reset-clock.
        for start in FaultVerb::ALL.iter().filter(|v| v.starts_fault()) {
            let end = start.ending().unwrap();
            let rows = vec![
                row(10, start.as_str(), "n1"),
                row(11, start.as_str(), "n1"),
                row(50, end.as_str(), "n1"),
                row(52, end.as_str(), "n1"),
            ];
            let spans = fault_spans(&rows);
            assert_eq!(spans.len(), 1, "{start}: {spans:?}");
            assert_eq!((spans[0].start_ns, spans[0].end_ns), (10, Some(52)));
            assert_eq!(spans[0].verb, Some(*start));
        }
    }

    #[test]
    fn an_end_closes_every_open_fault_of_its_pair_and_nothing_else() {
        let rows = vec![
            row(1, "skew", "n1"),
            row(2, "strobe", "n2"),
            row(3, "kill", "n3"),
            row(4, "reset-clock", "n1 n2"),
            row(5, "recover", ""),
            row(6, "heal", ""),
        ];
        let spans = fault_spans(&rows);
        let ends: Vec<_> = spans.iter().map(|s| (s.start_ns, s.end_ns)).collect();
        assert_eq!(
            ends,
            vec![(1, Some(4)), (2, Some(4)), (3, None), (5, Some(5))]
        );
        assert!(
            spans[2].overlaps(100, 200),
            "a kill never ended stays active"
        );
        assert!(!spans[0].overlaps(5, 9));
    }
}
