//! Splits an inline command line into arguments as Redis's `sdssplitargs` does: spaces
//! separate arguments; `"..."` takes the escapes `\n \r \t \b \a \\ \" \xHH`; `'...'` takes
//! `\'`; a closing quote must be followed by a space or the end of the line.
//!
//! Hand-written: it is Redis's own small grammar, which no codec crate implements.

use bytes::Bytes;

/// Why a line does not split: the words of Redis's protocol error (the decoder makes the
/// `ProtocolError` of it).
type Refused = &'static str;

const UNBALANCED: Refused = "unbalanced quotes in request";

/// The arguments of `line` (without its line ending), at most `max_args` of them.
pub(crate) fn split(line: &[u8], max_args: usize) -> Result<Vec<Bytes>, Refused> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            return Ok(args);
        }
        if args.len() == max_args {
            return Err("invalid multibulk length");
        }
        let (arg, next) = match line[i] {
            b'"' => double_quoted(line, i + 1)?,
            b'\'' => single_quoted(line, i + 1)?,
            _ => {
                let end = line[i..]
                    .iter()
                    .position(|b| b.is_ascii_whitespace())
                    .map_or(line.len(), |p| i + p);
                (line[i..end].to_vec(), end)
            }
        };
        args.push(Bytes::from(arg));
        i = next;
    }
}

/// After a closing quote: the end of the line or a space, else the quotes are unbalanced.
fn after_quote(line: &[u8], i: usize) -> Result<usize, Refused> {
    match line.get(i) {
        None => Ok(i),
        Some(b) if b.is_ascii_whitespace() => Ok(i),
        Some(_) => Err(UNBALANCED),
    }
}

fn double_quoted(line: &[u8], mut i: usize) -> Result<(Vec<u8>, usize), Refused> {
    let mut arg = Vec::new();
    loop {
        match line.get(i) {
            None => return Err(UNBALANCED),
            Some(b'"') => return Ok((arg, after_quote(line, i + 1)?)),
            Some(b'\\') if line.get(i + 1) == Some(&b'x') => {
                let hex = line
                    .get(i + 2..i + 4)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
                match hex {
                    Some(byte) => {
                        arg.push(byte);
                        i += 4;
                    }
                    _ => {
                        arg.push(b'\\');
                        i += 1;
                    }
                }
            }
            Some(b'\\') if i + 1 < line.len() => {
                arg.push(match line[i + 1] {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => other,
                });
                i += 2;
            }
            Some(&b) => {
                arg.push(b);
                i += 1;
            }
        }
    }
}

fn single_quoted(line: &[u8], mut i: usize) -> Result<(Vec<u8>, usize), Refused> {
    let mut arg = Vec::new();
    loop {
        match line.get(i) {
            None => return Err(UNBALANCED),
            Some(b'\'') => return Ok((arg, after_quote(line, i + 1)?)),
            Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                arg.push(b'\'');
                i += 2;
            }
            Some(&b) => {
                arg.push(b);
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(line: &str) -> Result<Vec<String>, Refused> {
        split(line.as_bytes(), 16).map(|v| {
            v.iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect()
        })
    }

    #[test]
    fn splits_like_redis() {
        assert_eq!(strs("  PING  ").unwrap(), vec!["PING"]);
        assert_eq!(
            strs(r#"set "a b\n\x41" 'c\'d' e"#).unwrap(),
            vec!["set", "a b\nA", "c'd", "e"]
        );
        assert_eq!(strs("").unwrap(), Vec::<String>::new());
        assert_eq!(strs(r#""abc"#), Err(UNBALANCED));
        assert_eq!(strs(r#""abc"x"#), Err(UNBALANCED));
        assert_eq!(strs("'abc"), Err(UNBALANCED));
        assert_eq!(split(b"a b c", 2), Err("invalid multibulk length"));
    }
}
