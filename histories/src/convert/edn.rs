//! A reader for the subset of EDN that Jepsen and Porcupine histories use.
//!
//! Supported: maps `{}` (a key twice is an error, as in Clojure), vectors `[]`, lists `()`
//! and sets `#{}` (the last two read as vectors, a set's elements sorted), keywords `:a/b`,
//! strings with the escapes `\" \\ \n \t \r \b \f \uXXXX`, integers
//! (optionally signed), `nil`, `true`, `false`, other symbols and non-integer numbers (kept
//! as text), `;` comments, commas as whitespace, and `#tag` prefixes (Jepsen prints ops as
//! `#jepsen.history.Op{...}`), which are dropped. Not supported, and reported as errors:
//! characters (`\a`) and `#_` discards. Nesting is bounded by [`DEPTH_MAX`].

use super::{ConvertError, ConvertErrorKind};

/// The deepest nesting of collections accepted.
pub const DEPTH_MAX: usize = 32;

/// An EDN value of the supported subset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// `nil`.
    Nil,
    /// `true` or `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A string, unescaped.
    Str(String),
    /// A keyword, without its colon.
    Keyword(String),
    /// A symbol other than `nil`, `true`, `false`.
    Symbol(String),
    /// A vector or a list.
    Vector(Vec<Value>),
    /// A map, in the order written.
    Map(Vec<(Value, Value)>),
}

impl Value {
    /// The value as one CSV cell: `nil` is empty, strings and keywords are their text,
    /// vectors are their elements joined by spaces (`[1 2]` is `1 2`, `["n1" :n2]` is
    /// `n1 n2`, a `nil` element is `nil`), nested collections and maps are written back as
    /// EDN, a map's entries sorted (a set's elements are sorted when read), so that equal
    /// values give one cell.
    pub fn to_cell(&self) -> String {
        match self {
            Value::Nil => String::new(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Str(s) | Value::Keyword(s) | Value::Symbol(s) => s.clone(),
            Value::Vector(items) => items
                .iter()
                .map(|item| match item {
                    Value::Vector(_) | Value::Map(_) | Value::Nil => item.to_nested(),
                    scalar => scalar.to_cell(),
                })
                .collect::<Vec<_>>()
                .join(" "),
            Value::Map(_) => self.to_nested(),
        }
    }

    /// EDN-like text for a value nested in another.
    fn to_nested(&self) -> String {
        match self {
            Value::Vector(items) => {
                let inner: Vec<String> = items.iter().map(Value::to_nested).collect();
                format!("[{}]", inner.join(" "))
            }
            Value::Map(entries) => {
                // Sorted: equal maps print in any order (a small map in insertion order),
                // and they must be one value.
                let mut inner: Vec<String> = entries
                    .iter()
                    .map(|(k, v)| format!("{} {}", k.to_nested(), v.to_nested()))
                    .collect();
                inner.sort_unstable();
                format!("{{{}}}", inner.join(", "))
            }
            Value::Nil => "nil".to_owned(),
            Value::Keyword(k) => format!(":{k}"),
            Value::Str(s) => format!("{s:?}"),
            other => other.to_cell(),
        }
    }

    /// The map entry under keyword `key`, if this is a map that has one.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let Value::Map(entries) = self else {
            return None;
        };
        entries.iter().find_map(|(k, v)| match k {
            Value::Keyword(name) if name == key => Some(v),
            _ => None,
        })
    }
}

/// Parses every top-level value of `text`, each with the 1-based line it starts on.
pub fn parse_all(text: &str) -> Result<Vec<(u64, Value)>, ConvertError> {
    let mut parser = Parser {
        chars: text.chars().peekable(),
        line: 1,
    };
    let mut values = Vec::new();
    loop {
        parser.skip_space();
        if parser.chars.peek().is_none() {
            return Ok(values);
        }
        let line = parser.line;
        values.push((line, parser.value(0)?));
    }
}

/// Like [`parse_all`], but a top-level vector or list is opened: each of its items comes
/// with the line it starts on (a Jepsen history is often one vector of op maps, and an
/// error must name the op's own line, not the line of the opening bracket).
pub fn parse_items(text: &str) -> Result<Vec<(u64, Value)>, ConvertError> {
    let mut parser = Parser {
        chars: text.chars().peekable(),
        line: 1,
    };
    let mut values = Vec::new();
    loop {
        parser.skip_space();
        let close = match parser.chars.peek() {
            None => return Ok(values),
            Some('[') => ']',
            Some('(') => ')',
            Some(_) => {
                let line = parser.line;
                values.push((line, parser.value(0)?));
                continue;
            }
        };
        parser.bump();
        loop {
            parser.skip_space();
            match parser.chars.peek() {
                None => {
                    return Err(
                        parser.error(format!("unexpected end of input, expected `{close}`"))
                    );
                }
                Some(&c) if c == close => {
                    parser.bump();
                    break;
                }
                Some(_) => {
                    let line = parser.line;
                    values.push((line, parser.value(1)?));
                }
            }
        }
    }
}

struct Parser<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: u64,
}

impl Parser<'_> {
    fn error(&self, reason: impl Into<String>) -> ConvertError {
        ConvertError {
            line: self.line,
            kind: ConvertErrorKind::Syntax(reason.into()),
        }
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next();
        if c == Some('\n') {
            self.line += 1;
        }
        c
    }

    fn skip_space(&mut self) {
        while let Some(&c) = self.chars.peek() {
            if c == ';' {
                while self.chars.peek().is_some_and(|&c| c != '\n') {
                    self.bump();
                }
            } else if c.is_whitespace() || c == ',' {
                self.bump();
            } else {
                return;
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, ConvertError> {
        if depth > DEPTH_MAX {
            return Err(self.error(format!("nested deeper than {DEPTH_MAX}")));
        }
        self.skip_space();
        let Some(&c) = self.chars.peek() else {
            return Err(self.error("unexpected end of input, expected a value"));
        };
        match c {
            '{' => {
                self.bump();
                let items = self.items('}', depth)?;
                if items.len() % 2 != 0 {
                    return Err(self.error("map with an odd number of forms"));
                }
                let mut entries: Vec<(Value, Value)> = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    // Clojure's reader refuses a key twice; either value may be the meant one.
                    if entries.iter().any(|(seen, _)| *seen == k) {
                        let key = Value::Vector(vec![k]).to_nested();
                        let key = &key[1..key.len() - 1];
                        return Err(self.error(format!("duplicate key `{key}` in a map")));
                    }
                    entries.push((k, v));
                }
                Ok(Value::Map(entries))
            }
            '[' | '(' => {
                self.bump();
                let close = if c == '[' { ']' } else { ')' };
                Ok(Value::Vector(self.items(close, depth)?))
            }
            '"' => {
                self.bump();
                self.string()
            }
            '#' => {
                self.bump();
                match self.chars.peek() {
                    Some('{') => {
                        self.bump();
                        // A set has no order: Clojure prints equal sets in any order, so
                        // its elements are kept sorted, and equal sets read the same.
                        let mut items = self.items('}', depth)?;
                        items.sort_by_cached_key(Value::to_nested);
                        Ok(Value::Vector(items))
                    }
                    Some(&c) if c.is_alphabetic() => {
                        self.token();
                        self.value(depth + 1)
                    }
                    _ => {
                        Err(self
                            .error("unsupported `#` form (only `#tag` prefixes and `#{}` sets)"))
                    }
                }
            }
            ':' => {
                self.bump();
                let name = self.token();
                if name.is_empty() {
                    return Err(self.error("empty keyword"));
                }
                Ok(Value::Keyword(name))
            }
            '}' | ']' | ')' => Err(self.error(format!("unexpected `{c}`"))),
            '\\' => Err(self.error("characters (`\\c`) are not supported")),
            _ => self.atom(),
        }
    }

    /// Reads values up to the closing delimiter `close`, which it consumes.
    fn items(&mut self, close: char, depth: usize) -> Result<Vec<Value>, ConvertError> {
        let mut items = Vec::new();
        loop {
            self.skip_space();
            match self.chars.peek() {
                None => {
                    return Err(self.error(format!("unexpected end of input, expected `{close}`")));
                }
                Some(&c) if c == close => {
                    self.bump();
                    return Ok(items);
                }
                Some(_) => items.push(self.value(depth + 1)?),
            }
        }
    }

    fn string(&mut self) -> Result<Value, ConvertError> {
        let mut s = String::new();
        loop {
            match self.bump() {
                None => return Err(self.error("unterminated string")),
                Some('"') => return Ok(Value::Str(s)),
                Some('\\') => match self.bump() {
                    Some('"') => s.push('"'),
                    Some('\\') => s.push('\\'),
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some('r') => s.push('\r'),
                    Some('b') => s.push('\u{8}'),
                    Some('f') => s.push('\u{c}'),
                    Some('u') => s.push(self.unicode_escape()?),
                    Some(other) => {
                        return Err(self.error(format!("unsupported escape `\\{other}`")));
                    }
                    None => return Err(self.error("unterminated string")),
                },
                Some(c) => s.push(c),
            }
        }
    }

    /// The character of a `\uXXXX` escape, its `\u` already read: four hex digits.
    fn unicode_escape(&mut self) -> Result<char, ConvertError> {
        let mut code = 0u32;
        for _ in 0..4 {
            let digit = self.bump().and_then(|c| c.to_digit(16));
            let Some(digit) = digit else {
                return Err(self.error("`\\u` is not followed by four hex digits"));
            };
            code = code * 16 + digit;
        }
        char::from_u32(code)
            .ok_or_else(|| self.error(format!("`\\u{code:04x}` is no character (a surrogate)")))
    }

    /// Reads the characters of a symbol, keyword name or number.
    fn token(&mut self) -> String {
        let mut s = String::new();
        while let Some(&c) = self.chars.peek() {
            if c.is_whitespace() || matches!(c, ',' | '{' | '}' | '[' | ']' | '(' | ')' | '"' | ';')
            {
                break;
            }
            s.push(c);
            self.bump();
        }
        s
    }

    fn atom(&mut self) -> Result<Value, ConvertError> {
        let token = self.token();
        let digits = token.strip_prefix(['-', '+']).unwrap_or(&token);
        if digits.starts_with(|c: char| c.is_ascii_digit()) {
            let digits = token.strip_suffix('N').unwrap_or(&token);
            if let Ok(i) = digits.parse::<i64>() {
                return Ok(Value::Int(i));
            }
            // A float, a ratio (`1/10`) or an integer beyond 64 bits: kept as text, so a
            // field that needs an integer reports it.
            return Ok(Value::Symbol(token));
        }
        match token.as_str() {
            "" => Err(self.error("unexpected character")),
            "nil" => Ok(Value::Nil),
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Ok(Value::Symbol(token)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_subset_jepsen_prints() {
        // Rule: convert module doc: the EDN subset of Jepsen and Porcupine histories.
        let text = "#jepsen.history.Op{:a nil, :b [1 -2 \"s\\\"q\"], :c #{:x}, :d 1.5} ; note\n{:e (true)}";
        let values = parse_all(text).unwrap();
        assert_eq!(values.len(), 2);
        assert_eq!(values[0].0, 1);
        assert_eq!(values[1].0, 2);
        let op = &values[0].1;
        assert_eq!(op.get("a"), Some(&Value::Nil));
        assert_eq!(op.get("b").unwrap().to_cell(), "1 -2 s\"q");
        assert_eq!(
            op.get("c"),
            Some(&Value::Vector(vec![Value::Keyword("x".into())]))
        );
        assert_eq!(op.get("d"), Some(&Value::Symbol("1.5".into())));
        assert_eq!(
            values[1].1.get("e"),
            Some(&Value::Vector(vec![Value::Bool(true)]))
        );
    }

    #[test]
    fn syntax_errors_name_their_line() {
        // Rule: convert module doc: errors name the source line.
        for (text, line) in [
            ("{:a 1}\n{:b", 2),
            ("{:a \"open\n\n", 3),
            ("{:a}", 1),
            ("\n\n]", 3),
            ("{:a \\c}", 1),
            ("{:a #_ 1}", 1),
        ] {
            let error = parse_all(text).unwrap_err();
            assert_eq!(error.line, line, "{text:?}: {error}");
        }
    }

    #[test]
    fn nesting_is_bounded() {
        // Rule: HELPERS.md "Bound everything": reaching a bound is reported, not a stack
        // overflow.
        let text = "[".repeat(10_000);
        let error = parse_all(&text).unwrap_err();
        assert!(error.to_string().contains("nested deeper than"), "{error}");
    }
}
