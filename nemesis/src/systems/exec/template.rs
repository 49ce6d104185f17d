//! Command templates: `--node-cmd 'my-lockd --id {id} --listen {addr} ...'` and
//! `--client-cmd 'python3 my_client.py {addr}'`, their placeholders filled per node or per
//! client process.
//!
//! A filled template runs as `sh -c LINE`: the user's quoting, `$VARIABLES`, `~`, `;` and
//! pipes work as in a shell. The shell leads a process group of its own, and the harness
//! signals that group, so a kill or a pause reaches every process the line started. Every value put in for a placeholder is shell-quoted, so an
//! address or a path with a space stays one word. `{{` and `}}` stand for literal braces. A
//! placeholder the template's kind does not know is an error when the options are read,
//! before anything starts.

use std::collections::BTreeMap;
use std::process::Command;

use crate::Error;

/// The placeholders of `--node-cmd`, with what each becomes (PROTOCOL.md repeats them).
pub const NODE_PLACEHOLDERS: [(&str, &str); 8] = [
    ("id", "the node's id, 1..=n"),
    (
        "addr",
        "the address the node serves clients on, 127.0.0.1:PORT",
    ),
    ("peer_addr", "the address the node listens on for its peers"),
    (
        "peers",
        "every member's peer address, ID=ADDR,ID=ADDR,... (the node's own included)",
    ),
    (
        "peer_addrs",
        "the addresses this node dials its peers on, ID=ADDR,... (others only): through the per-link proxy, so partitions can cut each link",
    ),
    (
        "client_addrs",
        "every node's client address, in id order, comma-separated",
    ),
    ("dir", "the node's data directory, kept across restarts"),
    ("nodes", "the number of nodes"),
];

/// The placeholders of `--client-cmd`.
pub const CLIENT_PLACEHOLDERS: [(&str, &str); 5] = [
    (
        "addr",
        "the client address of the node this slot talks to first (node slot mod n + 1)",
    ),
    (
        "client_addrs",
        "every node's client address, in id order, comma-separated",
    ),
    ("node", "the id of that node"),
    (
        "process",
        "the history's process id of this adapter (a new one after every info)",
    ),
    ("slot", "the client slot, 0..concurrency"),
];

/// A parsed template: literal text and placeholder names, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    text: String,
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Placeholder(String),
}

impl Template {
    /// Parses `text`, whose placeholders must be among `known` (`what` names the flag in
    /// errors).
    pub fn parse(text: &str, known: &[(&str, &str)], what: &str) -> Result<Template, Error> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let name: String = chars.by_ref().take_while(|c| *c != '}').collect();
                    if !known.iter().any(|(k, _)| *k == name) {
                        let names: Vec<String> =
                            known.iter().map(|(k, _)| format!("{{{k}}}")).collect();
                        return Err(Error::BadArgument(format!(
                            "{what} {text:?}: unknown placeholder {{{name}}} (known: {}; {{{{ and }}}} for literal braces)",
                            names.join(" ")
                        )));
                    }
                    parts.push(Part::Text(std::mem::take(&mut literal)));
                    parts.push(Part::Placeholder(name));
                }
                '}' => {
                    return Err(Error::BadArgument(format!(
                        "{what} {text:?}: a lone }} (write }}}} for a literal brace)"
                    )));
                }
                c => literal.push(c),
            }
        }
        parts.push(Part::Text(literal));
        if text.trim().is_empty() {
            return Err(Error::BadArgument(format!("{what}: an empty command")));
        }
        Ok(Template {
            text: text.to_owned(),
            parts,
        })
    }

    /// The template as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True when the template uses placeholder `name`.
    pub fn uses(&self, name: &str) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Placeholder(n) if n == name))
    }

    /// The shell line with `values` put in, each shell-quoted. A placeholder without a
    /// value becomes an empty word.
    pub fn fill(&self, values: &BTreeMap<&str, String>) -> String {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Text(t) => t.clone(),
                Part::Placeholder(name) => {
                    shell_quote(values.get(name.as_str()).map_or("", String::as_str))
                }
            })
            .collect()
    }

    /// The command that runs the filled line: `sh -c LINE`.
    pub fn command(&self, values: &BTreeMap<&str, String>) -> Command {
        let mut command = Command::new("sh");
        command.arg("-c").arg(self.fill(values));
        command
    }
}

/// `value` as one shell word: bare when it has only safe characters, else single-quoted.
pub fn shell_quote(value: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c);
    if !value.is_empty() && value.chars().all(safe) {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_quoted() {
        let t = Template::parse(
            "my-lockd --id {id} --listen {addr} --data {dir} --json '{{}}'",
            &NODE_PLACEHOLDERS,
            "--node-cmd",
        )
        .expect("parses");
        let values = BTreeMap::from([
            ("id", "3".to_owned()),
            ("addr", "127.0.0.1:7203".to_owned()),
            ("dir", "/tmp/a dir/n3".to_owned()),
        ]);
        assert_eq!(
            t.fill(&values),
            "my-lockd --id 3 --listen 127.0.0.1:7203 --data '/tmp/a dir/n3' --json '{}'"
        );
        assert!(t.uses("addr") && !t.uses("peer_addrs"));
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn unknown_placeholders_and_lone_braces_are_refused() {
        let e = Template::parse("x {port}", &NODE_PLACEHOLDERS, "--node-cmd").expect_err("bad");
        assert!(e.to_string().contains("unknown placeholder {port}"), "{e}");
        assert!(Template::parse("x }", &NODE_PLACEHOLDERS, "--node-cmd").is_err());
        assert!(Template::parse("  ", &CLIENT_PLACEHOLDERS, "--client-cmd").is_err());
        assert!(Template::parse("c {process}", &CLIENT_PLACEHOLDERS, "--client-cmd").is_ok());
        assert!(Template::parse("c {id}", &CLIENT_PLACEHOLDERS, "--client-cmd").is_err());
    }
}
