//! The CSV format of histories, schema v1: [`Reader`], [`Writer`], [`read_str`], [`read_path`].
//!
//! The schema (columns, value conventions, the `info` and closed-interval rules) is
//! documented in `histories/README.md`.
//!
//! The reader is written by hand rather than on top of `csv::Reader`: every error must name
//! the line and the *character column* of the offending field, also inside multi-line
//! quoted fields, and `csv` exposes only the byte offset of each record. It accepts RFC 4180
//! CSV (`"` quoting with `""` for a quote, fields may span lines), `\n` or `\r\n` line ends,
//! and an optional final line end. It never panics: every malformed input is a
//! [`ParseError`]. The writer uses the `csv` crate, whose quoting the reader accepts.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use crate::error::{ParseError, ParseErrorKind};
use crate::op::{Op, OpType, Process};
use crate::pair::{Blame, Row, Validator};

/// Declares [`COLUMNS`] and [`HEADER`] from one list, so that the column names are
/// spelled once: the writer writes `COLUMNS`, the readers compare against it, and a test or
/// an error message that needs the header line takes `HEADER`.
macro_rules! schema_v1_columns {
    ($first:literal $(, $column:literal)* $(,)?) => {
        /// The column names of schema v1, in order.
        pub const COLUMNS: [&str; [$first $(, $column)*].len()] = [$first $(, $column)*];

        /// The header row of schema v1, exactly: [`COLUMNS`] joined by commas.
        pub const HEADER: &str = concat!($first $(, ",", $column)*);
    };
}

schema_v1_columns!(
    "index", "time_ns", "process", "type", "f", "key", "value", "token", "node", "error",
);

/// The most fields one record may have before the reader gives up on it.
pub const FIELDS_MAX: usize = 64;

/// The longest field, in bytes, the reader accepts.
pub const FIELD_BYTES_MAX: usize = 1 << 20;

/// Reads a whole history from a string.
pub fn read_str(text: &str) -> Result<Vec<Op>, ParseError> {
    Reader::new(text.as_bytes()).collect()
}

/// Reads a whole history from a file.
pub fn read_path(path: &Path) -> Result<Vec<Op>, ParseError> {
    let file = File::open(path).map_err(|e| ParseError {
        line: 1,
        column: 1,
        kind: ParseErrorKind::Io(format!("{}: {e}", path.display())),
    })?;
    Reader::new(file).collect()
}

/// Reads a file straight into paired operations and faults, one row at a time: each row
/// is validated and its cells interned straight into the pairing, so the history is never
/// held twice (as `read_path` and then `pair` would) and no cell is a `String` of its own.
pub fn read_paired_path(path: &Path) -> Result<crate::pair::Paired, ParseError> {
    if let Some(paired) = read_paired_fast(path) {
        return Ok(paired);
    }
    let file = File::open(path).map_err(|e| ParseError {
        line: 1,
        column: 1,
        kind: ParseErrorKind::Io(format!("{}: {e}", path.display())),
    })?;
    let mut pairing = crate::pair::Pairing::default();
    for op in Reader::new(file) {
        pairing.push_op(op?);
    }
    Ok(pairing.finish())
}

/// The fast path of [`read_paired_path`]: every row of [`visit_rows_fast`] interned
/// straight into the pairing.
fn read_paired_fast(path: &Path) -> Option<crate::pair::Paired> {
    let mut pairing = crate::pair::Pairing::default();
    visit_rows_fast(path, |row| {
        match row.process {
            Process::Client(_) => {
                let cells = crate::pair::Cells {
                    f: pairing.intern_str(row.f),
                    key: pairing.intern_str(row.key),
                    value: pairing.intern_str(row.value),
                    node: pairing.intern_str(row.node),
                    error: pairing.intern_str(row.error),
                };
                pairing.push(row.row(), cells);
            }
            Process::Nemesis => pairing.push_fault(row.to_op()),
        }
        true
    })?;
    Some(pairing.finish())
}

/// One row of a history file as [`visit_rows_fast`] hands it out: already checked
/// against every rule of schema v1 (the strict reader's validator), its text cells
/// borrowed from the reader's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RowView<'a> {
    /// The `index` column.
    pub index: u64,
    /// The `time_ns` column.
    pub time_ns: u64,
    /// The `process` column.
    pub process: Process,
    /// The `type` column.
    pub op_type: OpType,
    /// The `f` column.
    pub f: &'a str,
    /// The `key` column.
    pub key: &'a str,
    /// The `value` column.
    pub value: &'a str,
    /// The `token` column.
    pub token: Option<u64>,
    /// The `node` column.
    pub node: &'a str,
    /// The `error` column.
    pub error: &'a str,
}

impl RowView<'_> {
    /// What the validator and the pairing read.
    fn row(&self) -> Row<'_> {
        Row {
            index: self.index,
            time_ns: self.time_ns,
            process: self.process,
            op_type: self.op_type,
            f: self.f,
            key: self.key,
            token: self.token,
        }
    }

    /// The row as an [`Op`] of its own.
    pub fn to_op(&self) -> Op {
        Op {
            index: self.index,
            time_ns: self.time_ns,
            process: self.process,
            op_type: self.op_type,
            f: self.f.to_owned(),
            key: self.key.to_owned(),
            value: self.value.to_owned(),
            token: self.token,
            node: self.node.to_owned(),
            error: self.error.to_owned(),
        }
    }
}

/// Reads a history file with the fast reader and hands each row, validated, to `visit`,
/// in file order. With no `"` in a row there is no quoting to undo, so a row is a line
/// and its fields are what lies between commas: the reader finds line ends with `memchr`
/// in blocks of [`FAST_BLOCK_BYTES`], checks each line's UTF-8 once and splits it in
/// place (no `Op`, no `String` per cell).
///
/// It accepts only what the strict [`Reader`] accepts: every row goes through the same
/// validator, and anything the two might read differently (a `"` anywhere, a blank line,
/// a lone `\r`, bad UTF-8, an overlong field or line, any bad field or rule) makes it give
/// up with `None`, as does `visit` returning `false`. `Some(())` means that every row was
/// read, valid and visited, and that [`read_paired_path`] reads the file to the same rows.
/// On `None` the caller reads the file with [`read_paired_path`], whose strict reader
/// reports the first error with its line and character column (computed only then).
pub fn visit_rows_fast(path: &Path, mut visit: impl FnMut(&RowView<'_>) -> bool) -> Option<()> {
    if has_unusual_end(path)? {
        return None;
    }
    let mut file = File::open(path).ok()?;
    let mut buffer = vec![0u8; FAST_BLOCK_BYTES];
    // The unread bytes are `buffer[start..end]`.
    let (mut start, mut end, mut eof) = (0usize, 0usize, false);
    let mut validator = Validator::default();
    let mut line = 0u64;
    // Whether a `\r` was read: only then do lines need looking at for one.
    let mut carriage_returns = false;
    loop {
        let range = match memchr::memchr(b'\n', &buffer[start..end]) {
            Some(length) => {
                start += length + 1;
                start - length - 1..start - 1
            }
            None if !eof => {
                // No whole line left: keep the partial one and read more behind it.
                buffer.copy_within(start..end, 0);
                (start, end) = (0, end - start);
                if end == buffer.len() {
                    if buffer.len() >= FAST_LINE_BYTES_MAX {
                        return None;
                    }
                    buffer.resize(buffer.len() * 2, 0);
                }
                match file.read(&mut buffer[end..]).ok()? {
                    0 => eof = true,
                    read => {
                        let new = &buffer[end..end + read];
                        if memchr::memchr(b'"', new).is_some() {
                            return None;
                        }
                        carriage_returns |= memchr::memchr(b'\r', new).is_some();
                        end += read;
                    }
                }
                continue;
            }
            // The last line, without a line end.
            None if start < end => {
                let last = start..end;
                start = end;
                last
            }
            None => break,
        };
        line += 1;
        let fields = line_fields(&buffer[range], carriage_returns)?;
        if line == 1 {
            if fields != COLUMNS {
                return None;
            }
            continue;
        }
        let row = fast_row(&fields)?;
        validator.check(&row.row()).ok()?;
        if !visit(&row) {
            return None;
        }
    }
    // An empty file has no header: the strict reader says so.
    (line > 0).then_some(())
}

/// How many bytes [`visit_rows_fast`] reads at a time.
pub const FAST_BLOCK_BYTES: usize = 1 << 20;

/// The longest line [`visit_rows_fast`] reads (longer: the strict reader reads the file).
const FAST_LINE_BYTES_MAX: usize = 1 << 24;

/// The ten fields of a line (without its `\n`) as text; `None` on anything the strict
/// reader might reject or read otherwise (a `"`, a `\r` other than the line end's, bad
/// UTF-8, an overlong field, other than ten fields).
// Inlined into the reading loop: returned by value, the ten fields were copied through
// `memmove` for every line (perf: 4 % of a 1M-op check).
#[inline(always)]
fn line_fields(line: &[u8], carriage_returns: bool) -> Option<[&str; 10]> {
    let line = strip_cr(line);
    // Quotes were looked for block by block; carriage returns only in a file that has one.
    if carriage_returns && memchr::memchr(b'\r', line).is_some() {
        return None;
    }
    let mut ends = [0usize; 10];
    if comma_positions(line, &mut ends) != Some(9) {
        return None;
    }
    ends[9] = line.len();
    // A `,` is never part of a multi-byte character, so the fields of a valid line are
    // valid, and a line with a bad field is not.
    let text = std::str::from_utf8(line).ok()?;
    let mut fields: [&str; 10] = [""; 10];
    let mut start = 0;
    for (field, &end) in fields.iter_mut().zip(&ends) {
        *field = text.get(start..end)?;
        if field.len() > FIELD_BYTES_MAX {
            return None;
        }
        start = end + 1;
    }
    Some(fields)
}

/// Writes the positions of the commas of `line` into `ends`, in order, and returns how
/// many there are; `None` when there are more than `ends` holds. Eight bytes at a time:
/// a byte-at-a-time loop was a fifth of the reading time.
fn comma_positions(line: &[u8], ends: &mut [usize]) -> Option<usize> {
    const LOW: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    const COMMAS: u64 = 0x2C2C_2C2C_2C2C_2C2C;
    let mut commas = 0;
    let mut chunks = line.chunks_exact(8);
    for (n, chunk) in chunks.by_ref().enumerate() {
        let bytes = <[u8; 8]>::try_from(chunk).expect("chunks_exact gives 8 bytes");
        // The high bit of each byte that equals `,` (exact: no carry crosses a byte).
        let x = u64::from_le_bytes(bytes) ^ COMMAS;
        let mut found = !(((x & LOW) + LOW) | x | LOW);
        while found != 0 {
            *ends.get_mut(commas)? = n * 8 + found.trailing_zeros() as usize / 8;
            commas += 1;
            found &= found - 1;
        }
    }
    let base = line.len() - chunks.remainder().len();
    for (i, &byte) in chunks.remainder().iter().enumerate() {
        if byte == b',' {
            *ends.get_mut(commas)? = base + i;
            commas += 1;
        }
    }
    Some(commas)
}

/// Whether the file ends in an empty line, which the `csv` crate would skip in silence,
/// or in a `\r` with no `\n` after it, which the strict reader keeps in the last cell.
fn has_unusual_end(path: &Path) -> Option<bool> {
    use std::io::{Seek, SeekFrom};
    let mut file = File::open(path).ok()?;
    let length = file.metadata().ok()?.len();
    let tail_length = length.min(3);
    file.seek(SeekFrom::Start(length - tail_length)).ok()?;
    let mut tail = Vec::with_capacity(3);
    file.read_to_end(&mut tail).ok()?;
    Some(tail.ends_with(b"\n\n") || tail.ends_with(b"\n\r\n") || tail.ends_with(b"\r"))
}

/// A field without the `\r` of a `\r\n` line end (only the last field can have one).
fn strip_cr(field: &[u8]) -> &[u8] {
    field.strip_suffix(b"\r").unwrap_or(field)
}

/// The numbers and names of a line's fields; `None` on any the strict reader rejects.
#[inline(always)]
fn fast_row<'a>(fields: &[&'a str; 10]) -> Option<RowView<'a>> {
    let token = match fields[7] {
        "" => None,
        t => Some(parse_u64(t)?),
    };
    Some(RowView {
        index: parse_u64(fields[0])?,
        time_ns: parse_u64(fields[1])?,
        process: parse_process(fields[2])?,
        op_type: parse_type(fields[3])?,
        f: fields[4],
        key: fields[5],
        value: fields[6],
        token,
        node: fields[8],
        error: fields[9],
    })
}

/// One field of a record as read, with the position of its first character.
#[derive(Debug)]
struct RawField {
    bytes: Vec<u8>,
    line: u64,
    column: u64,
}

/// One record: its fields and the position just past its last character.
#[derive(Debug)]
struct RawRecord {
    fields: Vec<RawField>,
    end_line: u64,
    end_column: u64,
}

/// A streaming history reader over any [`io::Read`]: an iterator of ops.
///
/// It checks the header, each row's fields, and the history rules of schema v1 (those of
/// [`mod@crate::pair`]) as it goes, and yields `Err` once, at the first problem, then `None`.
pub struct Reader<R> {
    source: R,
    buffer: Box<[u8]>,
    start: usize,
    end: usize,
    eof: bool,
    /// The position of the next byte: 1-based line and character column.
    line: u64,
    column: u64,
    header_read: bool,
    done: bool,
    validator: Validator,
}

impl<R: Read> Reader<R> {
    /// A reader over `source`. It buffers internally: pass a plain `File`.
    pub fn new(source: R) -> Self {
        Reader {
            source,
            buffer: vec![0; 64 * 1024].into_boxed_slice(),
            start: 0,
            end: 0,
            eof: false,
            line: 1,
            column: 1,
            header_read: false,
            done: false,
            validator: Validator::default(),
        }
    }

    fn error(&self, line: u64, column: u64, kind: ParseErrorKind) -> ParseError {
        ParseError { line, column, kind }
    }

    /// The next byte without consuming it; `None` at the end of the input.
    fn peek(&mut self) -> Result<Option<u8>, ParseError> {
        while self.start == self.end && !self.eof {
            match self.source.read(&mut self.buffer) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.start = 0;
                    self.end = n;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let kind = ParseErrorKind::Io(e.to_string());
                    return Err(self.error(self.line, self.column, kind));
                }
            }
        }
        Ok((self.start < self.end).then(|| self.buffer[self.start]))
    }

    /// Consumes the byte `peek` returned, advancing the position. UTF-8 continuation
    /// bytes do not advance the column, so columns count characters.
    fn bump(&mut self, byte: u8) {
        self.start += 1;
        if byte == b'\n' {
            self.line += 1;
            self.column = 1;
        } else if byte & 0xC0 != 0x80 {
            self.column += 1;
        }
    }

    /// Reads one record; `None` at the end of the input.
    fn read_record(&mut self) -> Result<Option<RawRecord>, ParseError> {
        if self.peek()?.is_none() {
            return Ok(None);
        }
        let mut fields = Vec::new();
        loop {
            if fields.len() == FIELDS_MAX {
                let kind = ParseErrorKind::TooManyFields { max: FIELDS_MAX };
                return Err(self.error(self.line, self.column, kind));
            }
            let (field, more) = self.read_field()?;
            fields.push(field);
            if !more {
                break;
            }
        }
        Ok(Some(RawRecord {
            fields,
            end_line: self.line,
            end_column: self.column,
        }))
    }

    /// Reads one field; the flag says whether a `,` followed it (more fields in the record).
    /// A line end after the field is left unconsumed, so that the record's end position is
    /// the column of its last character plus one; [`Reader::finish_record`] consumes it.
    fn read_field(&mut self) -> Result<(RawField, bool), ParseError> {
        let mut field = RawField {
            bytes: Vec::new(),
            line: self.line,
            column: self.column,
        };
        if self.peek()? == Some(b'"') {
            self.bump(b'"');
            self.read_quoted(&mut field)?;
        } else {
            self.read_unquoted(&mut field)?;
        }
        // Now at `,`, a line end, or the end of the input.
        match self.peek()? {
            Some(b',') => {
                self.bump(b',');
                Ok((field, true))
            }
            _ => Ok((field, false)),
        }
    }

    fn push(&self, field: &mut RawField, byte: u8) -> Result<(), ParseError> {
        if field.bytes.len() == FIELD_BYTES_MAX {
            let kind = ParseErrorKind::FieldTooLong {
                max: FIELD_BYTES_MAX,
            };
            return Err(self.error(field.line, field.column, kind));
        }
        field.bytes.push(byte);
        Ok(())
    }

    /// Reads the rest of an unquoted field, up to (not including) `,`, a line end or EOF.
    fn read_unquoted(&mut self, field: &mut RawField) -> Result<(), ParseError> {
        while let Some(byte) = self.peek()? {
            match byte {
                b',' => return Ok(()),
                b'\n' => return Ok(()),
                b'\r' if self.at_crlf()? => return Ok(()),
                b'"' => {
                    let kind = ParseErrorKind::QuoteInUnquotedField;
                    return Err(self.error(self.line, self.column, kind));
                }
                _ => {
                    self.bump(byte);
                    self.push(field, byte)?;
                }
            }
        }
        Ok(())
    }

    /// Reads a quoted field after its opening quote, through its closing quote.
    fn read_quoted(&mut self, field: &mut RawField) -> Result<(), ParseError> {
        loop {
            let Some(byte) = self.peek()? else {
                let kind = ParseErrorKind::UnterminatedQuote;
                return Err(self.error(field.line, field.column, kind));
            };
            self.bump(byte);
            if byte != b'"' {
                self.push(field, byte)?;
                continue;
            }
            match self.peek()? {
                Some(b'"') => {
                    self.bump(b'"');
                    self.push(field, b'"')?;
                }
                None | Some(b',') | Some(b'\n') => return Ok(()),
                Some(b'\r') if self.at_crlf()? => return Ok(()),
                Some(other) => {
                    let found = self.char_at(other);
                    let kind = ParseErrorKind::AfterClosingQuote { found };
                    return Err(self.error(self.line, self.column, kind));
                }
            }
        }
    }

    /// Whether the input is at `\r\n`. Looks one byte past the `\r` without consuming
    /// anything: at a buffer boundary it shifts the rest of the buffer down first.
    fn at_crlf(&mut self) -> Result<bool, ParseError> {
        if self.start + 1 >= self.end && !self.eof {
            self.buffer.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            while self.end < 2 && !self.eof {
                match self.source.read(&mut self.buffer[self.end..]) {
                    Ok(0) => self.eof = true,
                    Ok(n) => self.end += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let kind = ParseErrorKind::Io(e.to_string());
                        return Err(self.error(self.line, self.column, kind));
                    }
                }
            }
        }
        Ok(self.start + 1 < self.end && self.buffer[self.start + 1] == b'\n')
    }

    /// The character starting with `byte` at the current position, for messages.
    fn char_at(&self, byte: u8) -> char {
        let rest = &self.buffer[self.start..self.end];
        let len = rest.len().min(4);
        (1..=len)
            .find_map(|n| std::str::from_utf8(&rest[..n]).ok())
            .and_then(|s| s.chars().next())
            .unwrap_or(if byte.is_ascii() {
                byte as char
            } else {
                char::REPLACEMENT_CHARACTER
            })
    }

    /// Consumes the line end after a record, if any.
    fn finish_record(&mut self) -> Result<(), ParseError> {
        match self.peek()? {
            Some(b'\n') => self.bump(b'\n'),
            Some(b'\r') => {
                self.bump(b'\r');
                if self.peek()? == Some(b'\n') {
                    self.bump(b'\n');
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn read_header(&mut self) -> Result<(), ParseError> {
        self.skip_byte_order_mark()?;
        let Some(record) = self.read_record()? else {
            return Err(self.error(1, 1, ParseErrorKind::EmptyInput));
        };
        self.finish_record()?;
        for (i, field) in record.fields.iter().enumerate() {
            let text = String::from_utf8_lossy(&field.bytes);
            let kind = match COLUMNS.get(i) {
                Some(&expected) if text == expected => continue,
                Some(&expected) => ParseErrorKind::WrongColumn {
                    expected,
                    found: text.into_owned(),
                },
                None => ParseErrorKind::ExtraColumn {
                    found: text.into_owned(),
                },
            };
            return Err(self.error(field.line, field.column, kind));
        }
        if let Some(&expected) = COLUMNS.get(record.fields.len()) {
            let kind = ParseErrorKind::MissingColumn { expected };
            return Err(self.error(record.end_line, record.end_column, kind));
        }
        Ok(())
    }

    /// Skips a UTF-8 byte order mark (`EF BB BF`) at the start of the input, which Excel
    /// and PowerShell write; the header's first column then starts at column 1. Only a
    /// whole mark in the first read is skipped: anything else goes on to the header's
    /// checks as it is.
    fn skip_byte_order_mark(&mut self) -> Result<(), ParseError> {
        const MARK: [u8; 3] = [0xEF, 0xBB, 0xBF];
        self.peek()?;
        if self.buffer[self.start..self.end].starts_with(&MARK) {
            self.start += MARK.len();
        }
        Ok(())
    }

    fn read_op(&mut self) -> Result<Option<Op>, ParseError> {
        if !self.header_read {
            self.read_header()?;
            self.header_read = true;
        }
        let Some(record) = self.read_record()? else {
            return Ok(None);
        };
        self.finish_record()?;
        let op = parse_row(&record)?;
        if let Err((violation, blame)) = self.validator.check(&Row::of(&op)) {
            let column_index = match blame {
                Blame::Index => 0,
                Blame::Time => 1,
                Blame::Type => 3,
                Blame::F => 4,
                Blame::Key => 5,
            };
            let field = &record.fields[column_index];
            let kind = ParseErrorKind::Violation(violation);
            return Err(self.error(field.line, field.column, kind));
        }
        Ok(Some(op))
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Op, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.read_op() {
            Ok(Some(op)) => Some(Ok(op)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Turns a record into an op, checking each field on its own (not the history rules).
fn parse_row(record: &RawRecord) -> Result<Op, ParseError> {
    let fields = &record.fields;
    let text = decode_fields(record)?;
    let number = |i: usize| -> Result<u64, ParseError> {
        parse_u64(&text[i]).ok_or_else(|| {
            let kind = ParseErrorKind::NotANumber {
                column: COLUMNS[i],
                found: text[i].clone(),
            };
            at(&fields[i], kind)
        })
    };
    let index = number(0)?;
    let time_ns = number(1)?;
    let process = parse_process(&text[2]).ok_or_else(|| {
        let kind = ParseErrorKind::BadProcess {
            found: text[2].clone(),
        };
        at(&fields[2], kind)
    })?;
    let op_type = parse_type(&text[3]).ok_or_else(|| {
        let kind = ParseErrorKind::UnknownType {
            found: text[3].clone(),
        };
        at(&fields[3], kind)
    })?;
    let token = if text[7].is_empty() {
        None
    } else {
        Some(number(7)?)
    };
    let [_, _, _, _, f, key, value, _, node, error] = text;
    Ok(Op {
        index,
        time_ns,
        process,
        op_type,
        f,
        key,
        value,
        token,
        node,
        error,
    })
}

/// Checks that a row has the header's 10 fields, each valid UTF-8, and returns them.
fn decode_fields(record: &RawRecord) -> Result<[String; 10], ParseError> {
    let fields = &record.fields;
    if fields.len() != COLUMNS.len() {
        let (line, column) = match fields.get(COLUMNS.len()) {
            Some(extra) => (extra.line, extra.column),
            None => (record.end_line, record.end_column),
        };
        let kind = ParseErrorKind::FieldCount {
            found: fields.len(),
        };
        return Err(ParseError { line, column, kind });
    }
    let mut text: [String; 10] = Default::default();
    for ((field, column), cell) in fields.iter().zip(COLUMNS).zip(&mut text) {
        *cell = String::from_utf8(field.bytes.clone())
            .map_err(|_| at(field, ParseErrorKind::InvalidUtf8 { column }))?;
    }
    Ok(text)
}

/// `nemesis` or a client id.
fn parse_process(text: &str) -> Option<Process> {
    match text {
        "nemesis" => Some(Process::Nemesis),
        other => parse_u64(other).map(Process::Client),
    }
}

/// `invoke`, `ok`, `fail` or `info`.
fn parse_type(text: &str) -> Option<OpType> {
    match text {
        "invoke" => Some(OpType::Invoke),
        "ok" => Some(OpType::Ok),
        "fail" => Some(OpType::Fail),
        "info" => Some(OpType::Info),
        _ => None,
    }
}

fn at(field: &RawField, kind: ParseErrorKind) -> ParseError {
    ParseError {
        line: field.line,
        column: field.column,
        kind,
    }
}

/// A non-negative integer of ASCII digits only (no sign, no spaces), that fits in a u64.
fn parse_u64(text: &str) -> Option<u64> {
    // Plain ASCII digits only (no sign, no space), and no overflow: what `str::parse`
    // accepts of those, in one pass.
    if text.is_empty() {
        return None;
    }
    text.bytes().try_fold(0u64, |n, byte| {
        let digit = byte.wrapping_sub(b'0');
        (digit < 10).then_some(())?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Options of a [`Writer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriterOptions {
    /// Flush after every row, so that a run that crashes keeps its history up to the last
    /// row written. Costs a write system call per row.
    pub flush_each_row: bool,
}

impl WriterOptions {
    /// Flush after every row (see [`WriterOptions::flush_each_row`]).
    pub fn flush_each_row() -> Self {
        WriterOptions {
            flush_each_row: true,
        }
    }
}

/// Writes a history as CSV schema v1 to any [`io::Write`], header first.
///
/// Ops are written as given by [`Writer::write`], or numbered by the writer itself with
/// [`Writer::write_op`]. The writer does not check history rules; a harness that records
/// through it produces ordered, dense indices by construction.
pub struct Writer<W: Write> {
    inner: ::csv::Writer<W>,
    next_index: u64,
    options: WriterOptions,
}

/// The history as CSV schema v1 bytes, header first (what `history.csv` holds). Writing to
/// memory fails only on a row the format cannot hold, which ends the bytes there.
pub fn to_bytes(ops: &[Op]) -> Vec<u8> {
    let Ok(mut writer) = Writer::new(Vec::new()) else {
        return Vec::new();
    };
    for op in ops {
        if writer.write(op).is_err() {
            break;
        }
    }
    writer.into_inner().unwrap_or_default()
}

/// A digest of the history's CSV bytes, to compare two runs (`LOCKSMITH_SIM_DIGESTS=1
/// locksmith sim` prints it per seed).
pub fn digest(ops: &[Op]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    to_bytes(ops).hash(&mut hasher);
    hasher.finish()
}

impl Writer<BufWriter<File>> {
    /// Creates (or truncates) the file at `path` and writes the header.
    pub fn create(path: &Path, options: WriterOptions) -> io::Result<Self> {
        let file = File::create(path)?;
        Writer::with_options(BufWriter::new(file), options)
    }
}

impl<W: Write> Writer<W> {
    /// A writer that buffers rows (call [`Writer::flush`] at the end); writes the header.
    pub fn new(sink: W) -> io::Result<Self> {
        Writer::with_options(sink, WriterOptions::default())
    }

    /// A writer with options; writes the header (and flushes it if `flush_each_row`).
    pub fn with_options(sink: W, options: WriterOptions) -> io::Result<Self> {
        let inner = ::csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(sink);
        let mut writer = Writer {
            inner,
            next_index: 0,
            options,
        };
        writer.inner.write_record(COLUMNS)?;
        writer.after_row()?;
        Ok(writer)
    }

    /// Writes `op` as it is; the next [`Writer::write_op`] numbers after `op.index`.
    pub fn write(&mut self, op: &Op) -> io::Result<()> {
        let index = op.index.to_string();
        let time_ns = op.time_ns.to_string();
        let process = op.process.to_string();
        let token = op.token.map(|t| t.to_string()).unwrap_or_default();
        let record: [&str; 10] = [
            &index,
            &time_ns,
            &process,
            op.op_type.as_str(),
            &op.f,
            &op.key,
            &op.value,
            &token,
            &op.node,
            &op.error,
        ];
        self.inner.write_record(record)?;
        self.next_index = op.index.saturating_add(1);
        self.after_row()
    }

    /// Sets `op.index` to the next index (0 first, then one more than the last row
    /// written), writes it, and returns the index given.
    pub fn write_op(&mut self, mut op: Op) -> io::Result<u64> {
        op.index = self.next_index;
        self.write(&op)?;
        Ok(op.index)
    }

    /// The index [`Writer::write_op`] gives next.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Flushes buffered rows to the sink.
    pub fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    /// Flushes and returns the sink.
    pub fn into_inner(self) -> io::Result<W> {
        self.inner.into_inner().map_err(|e| e.into_error())
    }

    fn after_row(&mut self) -> io::Result<()> {
        if self.options.flush_each_row {
            self.inner.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(rows: &[&str]) -> String {
        let mut text = format!("{HEADER}\n");
        for row in rows {
            text.push_str(row);
            text.push('\n');
        }
        text
    }

    #[test]
    fn a_header_alone_is_an_empty_history() {
        // Rule: DESIGN.md "Histories (CSV)": the header row, then one row per event.
        assert_eq!(read_str(&format!("{HEADER}\n")).unwrap(), vec![]);
        assert_eq!(read_str(HEADER).unwrap(), vec![]);
    }

    #[test]
    fn crlf_line_ends_and_a_missing_final_line_end_are_accepted() {
        // Rule: histories/README.md "Schema v1": lines end in \n or \r\n; the last line end
        // is optional.
        let text =
            format!("{HEADER}\r\n0,5,0,invoke,acquire,a,5000,,,\r\n1,9,0,ok,acquire,a,,3,n1,");
        let ops = read_str(&text).unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[1].token, Some(3));
        assert_eq!(ops[1].node, "n1");
        assert_eq!(ops[1].error, "");
    }

    #[test]
    fn quoted_fields_keep_commas_quotes_and_line_breaks() {
        // Rule: DESIGN.md "Histories (CSV)": fields with commas or quotes use standard CSV
        // quoting.
        let text = history(&["0,5,0,invoke,write,a,\"x,\"\"y\"\"\nz\r\",1,,"]);
        let ops = read_str(&text).unwrap();
        assert_eq!(ops[0].value, "x,\"y\"\nz\r");
    }

    #[test]
    fn the_reader_stops_after_its_first_error() {
        // Rule: csv module doc: the reader yields Err once, at the first problem, then None.
        let text = history(&["0,5,0,invoke,acquire,a,5000,,,", "x,6,0,ok,acquire,a,,1,,"]);
        let mut reader = Reader::new(text.as_bytes());
        assert!(reader.next().unwrap().is_ok());
        let error = reader.next().unwrap().unwrap_err();
        assert_eq!((error.line, error.column), (3, 1));
        assert!(reader.next().is_none());
    }

    #[test]
    fn commas_are_found_eight_bytes_at_a_time_as_one_at_a_time() {
        // The fast reader's splitter against the plain loop, on every length up to 40 and
        // commas at every position, with bytes that differ from `,` by one bit.
        for length in 0..40usize {
            for seed in 0..20u64 {
                let line: Vec<u8> = (0..length as u64)
                    .map(|i| match (i * 7 + seed * 13) % 5 {
                        0 => b',',
                        1 => b',' ^ (1 << ((i + seed) % 8)) as u8,
                        2 => 0xC3,
                        _ => b'a',
                    })
                    .collect();
                let expected: Vec<usize> = (0..length).filter(|&i| line[i] == b',').collect();
                let mut ends = [0usize; 64];
                let count = super::comma_positions(&line, &mut ends).unwrap();
                assert_eq!(&ends[..count], expected.as_slice(), "{line:?}");
                let mut short = [0usize; 2];
                let bounded = super::comma_positions(&line, &mut short);
                assert_eq!(bounded.is_none(), expected.len() > 2, "{line:?}");
            }
        }
    }

    #[test]
    fn numbers_are_plain_ascii_digits() {
        // Rule: histories/README.md "Schema v1": numbers are ASCII digits only, no sign.
        for bad in ["+1", " 1", "1 ", "١", "18446744073709551616", ""] {
            let text = history(&[&format!("{bad},5,0,invoke,acquire,a,5000,,,")]);
            let error = read_str(&text).unwrap_err();
            assert_eq!((error.line, error.column), (2, 1), "{bad:?}: {error}");
            assert!(matches!(
                error.kind,
                ParseErrorKind::NotANumber {
                    column: "index",
                    ..
                }
            ));
        }
        let max = history(&["0,18446744073709551615,0,invoke,acquire,a,5000,,,"]);
        assert_eq!(read_str(&max).unwrap()[0].time_ns, u64::MAX);
        // The one-pass parse is `str::parse` on plain digits.
        for text in [
            "0",
            "007",
            "42",
            "18446744073709551615",
            "18446744073709551616",
            "1a",
            "",
            "-1",
            "99999999999999999999",
        ] {
            let plain = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
            let expected = if plain {
                text.parse::<u64>().ok()
            } else {
                None
            };
            assert_eq!(parse_u64(text), expected, "{text:?}");
        }
    }

    #[test]
    fn an_overlong_field_is_reported_not_buffered() {
        // Rule: HELPERS.md "Bound everything": reaching a bound is reported.
        let long = "v".repeat(FIELD_BYTES_MAX + 1);
        let text = history(&[&format!("0,5,0,invoke,write,a,{long},1,,")]);
        let error = read_str(&text).unwrap_err();
        assert_eq!((error.line, error.column), (2, 22));
        assert_eq!(
            error.kind,
            ParseErrorKind::FieldTooLong {
                max: FIELD_BYTES_MAX
            }
        );
    }

    #[test]
    fn a_record_with_too_many_fields_is_cut_off_at_the_bound() {
        // Rule: HELPERS.md "Bound everything": reaching a bound is reported.
        let text = history(&[&",".repeat(FIELDS_MAX + 5)]);
        let error = read_str(&text).unwrap_err();
        assert_eq!(
            error.kind,
            ParseErrorKind::TooManyFields { max: FIELDS_MAX }
        );
        assert_eq!(error.line, 2);
    }

    #[test]
    fn a_failing_source_is_an_io_error_with_a_position() {
        // Rule: csv module doc: every problem is a ParseError, never a panic.
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("disk on fire"))
            }
        }
        let error = Reader::new(Broken).next().unwrap().unwrap_err();
        assert_eq!((error.line, error.column), (1, 1));
        assert_eq!(error.to_string(), "1:1: cannot read input: disk on fire");
    }

    #[test]
    fn read_path_names_a_missing_file() {
        // Rule: DESIGN.md "Histories (CSV)": errors say where and why.
        let error = read_path(Path::new("/nonexistent/history.csv")).unwrap_err();
        assert!(
            matches!(error.kind, ParseErrorKind::Io(ref m) if m.contains("/nonexistent/history.csv"))
        );
    }

    #[test]
    fn writer_quotes_only_what_needs_quoting() {
        // Rule: DESIGN.md "Histories (CSV)": empty cells are empty strings; fields with
        // commas or quotes use standard CSV quoting.
        let mut writer = Writer::new(Vec::new()).unwrap();
        let op = Op {
            index: 0,
            time_ns: 1,
            process: Process::Nemesis,
            op_type: OpType::Info,
            f: "partition".into(),
            key: String::new(),
            value: "n1 n2 | n3, \"n4\"".into(),
            token: None,
            node: String::new(),
            error: String::new(),
        };
        writer.write(&op).unwrap();
        let text = String::from_utf8(writer.into_inner().unwrap()).unwrap();
        assert_eq!(
            text,
            format!("{HEADER}\n0,1,nemesis,info,partition,,\"n1 n2 | n3, \"\"n4\"\"\",,,\n")
        );
        assert_eq!(read_str(&text).unwrap(), vec![op]);
    }
}
