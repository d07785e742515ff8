//! Removing members by name from JSON text at any depth, in any object or array, without
//! building values: one strict pass that reads every member name as any RFC 8259 reader would
//! (escapes decoded, surrogate pairs joined), then, only when something is to go, a second pass
//! that copies the text without those members. Numbers, strings and everything kept are copied
//! as they were written (table metadata is never re-serialised).
//!
//! Strict on purpose: a text this walker refuses (a lone surrogate, invalid UTF-8, a control
//! character in a string, a comment, a trailing comma, a byte order mark, trailing bytes,
//! nesting past `MAX_DEPTH`) is one a laxer reader might still find a member in that this walker
//! did not see, so its callers refuse it rather than pass it on.

use std::borrow::Cow;

use thiserror::Error;

/// The deepest nesting of objects and arrays the walker reads (serde_json's own limit).
pub const MAX_DEPTH: usize = 128;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum WalkError {
    #[error("not JSON at byte {at}: {what}")]
    Invalid { at: usize, what: &'static str },
    #[error("JSON nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// What one walk over a text found.
#[derive(Debug, PartialEq, Eq)]
pub struct Walked<'a> {
    /// The text without the named members (borrowed when nothing went).
    pub text: Cow<'a, [u8]>,
    /// How many members went.
    pub removed: usize,
}

/// How many members `named` picks out anywhere in `text`; an error when `text` is not one JSON
/// value the walker reads whole.
pub fn count_named(text: &[u8], named: impl Fn(&str) -> bool) -> Result<usize, WalkError> {
    let mut walker = Walker::new(text, &named, false);
    walker.document()?;
    Ok(walker.removed)
}

/// `text` without every member `named` picks out, at any depth; an error when `text` is not one
/// JSON value the walker reads whole. Removal keeps the text valid JSON (commas mended; the
/// rewritten text has no insignificant whitespace).
pub fn without_named(text: &[u8], named: impl Fn(&str) -> bool) -> Result<Walked<'_>, WalkError> {
    let removed = count_named(text, &named)?;
    if removed == 0 {
        return Ok(Walked {
            text: Cow::Borrowed(text),
            removed,
        });
    }
    let mut walker = Walker::new(text, &named, true);
    walker.document()?;
    Ok(Walked {
        text: Cow::Owned(walker.out),
        removed,
    })
}

/// The bytes that end a plain run inside a string: a quote, a backslash, a control character.
static ENDS_A_RUN: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

struct Walker<'a, F> {
    text: &'a [u8],
    at: usize,
    named: &'a F,
    /// Whether to write what is kept (the second pass).
    writing: bool,
    out: Vec<u8>,
    removed: usize,
    /// A member name with escapes, decoded.
    name: String,
}

impl<'a, F: Fn(&str) -> bool> Walker<'a, F> {
    fn new(text: &'a [u8], named: &'a F, writing: bool) -> Self {
        Walker {
            text,
            at: 0,
            named,
            writing,
            out: if writing {
                Vec::with_capacity(text.len())
            } else {
                Vec::new()
            },
            removed: 0,
            name: String::new(),
        }
    }

    fn invalid<T>(&self, what: &'static str) -> Result<T, WalkError> {
        Err(WalkError::Invalid { at: self.at, what })
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8, what: &'static str) -> Result<(), WalkError> {
        if self.peek() != Some(byte) {
            return self.invalid(what);
        }
        self.at += 1;
        Ok(())
    }

    fn document(&mut self) -> Result<(), WalkError> {
        self.space();
        self.value(0, true)?;
        self.space();
        if self.at != self.text.len() {
            return self.invalid("bytes after the JSON value");
        }
        Ok(())
    }

    /// One value; `live` unless it is inside a member being removed (then nothing in it is
    /// counted or written).
    fn value(&mut self, depth: usize, live: bool) -> Result<(), WalkError> {
        let start = self.at;
        match self.peek() {
            Some(b'{') => return self.object(depth + 1, live),
            Some(b'[') => return self.array(depth + 1, live),
            Some(b'"') => self.string()?,
            Some(b't') => self.literal(b"true")?,
            Some(b'f') => self.literal(b"false")?,
            Some(b'n') => self.literal(b"null")?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            _ => return self.invalid("a value was expected"),
        }
        if self.writing && live {
            self.out.extend_from_slice(&self.text[start..self.at]);
        }
        Ok(())
    }

    fn object(&mut self, depth: usize, live: bool) -> Result<(), WalkError> {
        if depth > MAX_DEPTH {
            return Err(WalkError::TooDeep);
        }
        let keep = self.writing && live;
        self.at += 1;
        if keep {
            self.out.push(b'{');
        }
        self.space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            if keep {
                self.out.push(b'}');
            }
            return Ok(());
        }
        let mut written = false;
        loop {
            if self.peek() != Some(b'"') {
                return self.invalid("a member name was expected");
            }
            let name_start = self.at;
            let gone = self.name_is_named()? && live;
            let name_end = self.at;
            self.space();
            self.expect(b':', "':' was expected after a member name")?;
            self.space();
            if gone {
                self.removed += 1;
            }
            if keep && !gone {
                if written {
                    self.out.push(b',');
                }
                written = true;
                self.out.extend_from_slice(&self.text[name_start..name_end]);
                self.out.push(b':');
            }
            self.value(depth, live && !gone)?;
            self.space();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.space();
                }
                Some(b'}') => {
                    self.at += 1;
                    break;
                }
                _ => return self.invalid("',' or '}' was expected"),
            }
        }
        if keep {
            self.out.push(b'}');
        }
        Ok(())
    }

    fn array(&mut self, depth: usize, live: bool) -> Result<(), WalkError> {
        if depth > MAX_DEPTH {
            return Err(WalkError::TooDeep);
        }
        let keep = self.writing && live;
        self.at += 1;
        if keep {
            self.out.push(b'[');
        }
        self.space();
        if self.peek() == Some(b']') {
            self.at += 1;
            if keep {
                self.out.push(b']');
            }
            return Ok(());
        }
        let mut first = true;
        loop {
            if keep && !std::mem::take(&mut first) {
                self.out.push(b',');
            }
            self.value(depth, live)?;
            self.space();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.space();
                }
                Some(b']') => {
                    self.at += 1;
                    break;
                }
                _ => return self.invalid("',' or ']' was expected"),
            }
        }
        if keep {
            self.out.push(b']');
        }
        Ok(())
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), WalkError> {
        if !self.text[self.at..].starts_with(word) {
            return self.invalid("not a JSON literal");
        }
        self.at += word.len();
        Ok(())
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        self.at - start
    }

    /// A number as RFC 8259 writes it; its magnitude is not the walker's business.
    fn number(&mut self) -> Result<(), WalkError> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return self.invalid("a digit was expected"),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return self.invalid("a digit was expected after '.'");
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            if self.digits() == 0 {
                return self.invalid("a digit was expected in the exponent");
            }
        }
        Ok(())
    }

    /// A string value: checked, not decoded.
    fn string(&mut self) -> Result<(), WalkError> {
        self.scan_string(false).map(|_| ())
    }

    /// Reads a member name, decoded, and tells whether it is one to remove.
    fn name_is_named(&mut self) -> Result<bool, WalkError> {
        let (start, escaped) = self.scan_string(true)?;
        let named = self.named;
        if escaped {
            return Ok(named(&self.name));
        }
        let text = self.text;
        match std::str::from_utf8(&text[start..self.at - 1]) {
            Ok(name) => Ok(named(name)),
            Err(_) => self.invalid("a name is not UTF-8"),
        }
    }

    /// Moves past a string, checking it: UTF-8, no control character, escapes well formed and
    /// surrogates paired. With `decode`, a string with escapes is decoded into `self.name`.
    /// Returns where its content starts and whether it had escapes.
    fn scan_string(&mut self, decode: bool) -> Result<(usize, bool), WalkError> {
        self.at += 1;
        let start = self.at;
        let mut escaped = false;
        let mut plain_from = start;
        if decode {
            self.name.clear();
        }
        loop {
            // The plain run up to the next quote, backslash or control character.
            let run = self.text[self.at..]
                .iter()
                .position(|&b| ENDS_A_RUN[usize::from(b)]);
            let Some(run) = run else {
                self.at = self.text.len();
                return self.invalid("a string is not closed");
            };
            self.at += run;
            match self.text[self.at] {
                b'"' => {
                    self.check_utf8(plain_from, self.at)?;
                    if decode && escaped {
                        self.push_plain(plain_from, self.at);
                    }
                    self.at += 1;
                    return Ok((start, escaped));
                }
                b'\\' => {
                    self.check_utf8(plain_from, self.at)?;
                    if decode {
                        self.push_plain(plain_from, self.at);
                    }
                    escaped = true;
                    self.at += 1;
                    let decoded = self.escape()?;
                    if decode {
                        self.name.push(decoded);
                    }
                    plain_from = self.at;
                }
                _ => return self.invalid("a control character in a string"),
            }
        }
    }

    fn check_utf8(&self, from: usize, to: usize) -> Result<(), WalkError> {
        let run = &self.text[from..to];
        if run.is_ascii() || std::str::from_utf8(run).is_ok() {
            return Ok(());
        }
        Err(WalkError::Invalid {
            at: from,
            what: "a string is not UTF-8",
        })
    }

    fn push_plain(&mut self, from: usize, to: usize) {
        // Checked as UTF-8 just before.
        if let Ok(plain) = std::str::from_utf8(&self.text[from..to]) {
            self.name.push_str(plain);
        }
    }

    /// The character an escape (after its backslash) stands for.
    fn escape(&mut self) -> Result<char, WalkError> {
        let Some(&byte) = self.text.get(self.at) else {
            return self.invalid("an escape is cut short");
        };
        self.at += 1;
        let simple = match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode_escape(),
            _ => return self.invalid("not a JSON escape"),
        };
        Ok(simple)
    }

    fn hex4(&mut self) -> Result<u32, WalkError> {
        let Some(digits) = self.text.get(self.at..self.at + 4) else {
            return self.invalid("a \\u escape is cut short");
        };
        let mut value = 0;
        for &digit in digits {
            let Some(d) = (digit as char).to_digit(16) else {
                return self.invalid("a \\u escape needs four hex digits");
            };
            value = value * 16 + d;
        }
        self.at += 4;
        Ok(value)
    }

    fn unicode_escape(&mut self) -> Result<char, WalkError> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if !self.text[self.at..].starts_with(b"\\u") {
                    return self.invalid("a lone leading surrogate");
                }
                self.at += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return self.invalid("a leading surrogate without its trailing one");
                }
                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            }
            0xDC00..=0xDFFF => return self.invalid("a lone trailing surrogate"),
            code => code,
        };
        char::from_u32(code).map_or_else(|| self.invalid("not a character"), Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str) -> bool {
        name.eq_ignore_ascii_case("token")
    }

    fn without(text: &str) -> (String, usize) {
        let walked = without_named(text.as_bytes(), secret).unwrap();
        (
            String::from_utf8(walked.text.into_owned()).unwrap(),
            walked.removed,
        )
    }

    #[test]
    fn a_text_without_the_name_comes_back_as_it_was_written() {
        let text = "{ \"a\" : [1, 2.50, -0e+7, {\"b\": \"x\\ny\"}], \"c\":null }";
        let walked = without_named(text.as_bytes(), secret).unwrap();
        assert!(matches!(walked.text, Cow::Borrowed(_)));
        assert_eq!(walked.removed, 0);
    }

    #[test]
    fn members_go_at_every_depth_in_objects_and_arrays() {
        let (out, removed) = without(
            r#"{"token":1,"a":{"b":[{"TOKEN":"t","keep":1},[[{"c":{"token":{"x":"y"}}}]]]},"z":2}"#,
        );
        assert_eq!(out, r#"{"a":{"b":[{"keep":1},[[{"c":{}}]]]},"z":2}"#);
        assert_eq!(removed, 3);
    }

    #[test]
    fn what_is_inside_a_removed_member_is_not_counted_again() {
        assert_eq!(
            without(r#"{"token":{"token":1,"a":[{"token":2}]}}"#),
            ("{}".to_owned(), 1)
        );
    }

    #[test]
    fn commas_are_mended_wherever_the_member_was() {
        assert_eq!(without(r#"{"token":1,"a":2}"#).0, r#"{"a":2}"#);
        assert_eq!(without(r#"{"a":1,"token":2}"#).0, r#"{"a":1}"#);
        assert_eq!(without(r#"{"a":1,"token":2,"b":3}"#).0, r#"{"a":1,"b":3}"#);
        assert_eq!(without(r#"{"token":1,"token":2}"#).0, "{}");
        assert_eq!(
            without(r#"[{"token":1},{"token":2,"a":3}]"#).0,
            r#"[{},{"a":3}]"#
        );
    }

    #[test]
    fn a_name_is_read_with_its_escapes_decoded() {
        let (out, removed) = without(r#"{"to\u006ben":1,"t\u006F\u006bEN":2,"\"token":3}"#);
        assert_eq!(out, r#"{"\"token":3}"#);
        assert_eq!(removed, 2);
        let named = |n: &str| n == "\u{1F600}x";
        assert_eq!(count_named(br#"{"\ud83d\ude00x":1}"#, named), Ok(1));
    }

    #[test]
    fn numbers_and_strings_are_copied_as_written() {
        let (out, _) = without(r#"{"token":0,"n":1e400,"m":12345678901234567890123,"s":"\u00e9"}"#);
        assert_eq!(
            out,
            r#"{"n":1e400,"m":12345678901234567890123,"s":"\u00e9"}"#
        );
    }

    #[test]
    fn what_a_lax_reader_might_read_otherwise_is_refused() {
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        let ok_deep = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(count_named(ok_deep.as_bytes(), secret), Ok(0));
        for bad in [
            br#"{"x":"\ud800"}"#.to_vec(),
            br#"{"\udc00token":1}"#.to_vec(),
            br#"{"x":"\ud800\u0041"}"#.to_vec(),
            b"{\"x\":\"a\x01b\"}".to_vec(),
            b"{\"x\":\"\xff\"}".to_vec(),
            b"\xef\xbb\xbf{}".to_vec(),
            br#"{"a":1,}"#.to_vec(),
            br#"[1,]"#.to_vec(),
            br#"{"a":1}/* c */"#.to_vec(),
            br#"{'token':1}"#.to_vec(),
            br#"{"a":NaN}"#.to_vec(),
            br#"{"a":01}"#.to_vec(),
            br#"{"a":1.}"#.to_vec(),
            br#"{"a":"\x"}"#.to_vec(),
            br#"{"a":1}{"token":2}"#.to_vec(),
            br#"{"a" 1}"#.to_vec(),
            br#"{"a":tru}"#.to_vec(),
            b"".to_vec(),
            deep.into_bytes(),
        ] {
            assert!(
                count_named(&bad, secret).is_err(),
                "read: {}",
                String::from_utf8_lossy(&bad)
            );
        }
    }

    #[test]
    fn any_json_value_is_walked_not_only_objects() {
        assert_eq!(without(r#"[{"token":1}]"#).0, "[{}]");
        assert_eq!(without(" \"token\" ").1, 0);
        assert_eq!(without("12").1, 0);
    }
}
