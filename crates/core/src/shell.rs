//! Shell quoting. Every value that enters a shell script goes through [`quote`]; nothing builds
//! shell text by pasting raw values.

use std::borrow::Cow;

/// Quotes `s` as one POSIX shell word. Safe words are returned as they are; anything else is put
/// in single quotes with embedded single quotes written as `'\''`. Newlines, `$`, backticks and
/// unicode need nothing special inside single quotes.
pub fn quote(s: &str) -> Cow<'_, str> {
    let safe = !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%^".contains(&b));
    if safe { Cow::Borrowed(s) } else { Cow::Owned(format!("'{}'", s.replace('\'', r"'\''"))) }
}

/// Quotes every word and joins them with spaces.
pub fn join<I, S>(words: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    words.into_iter().map(|w| quote(w.as_ref()).into_owned()).collect::<Vec<_>>().join(" ")
}

/// Whether `name` is a valid environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Splits a command line into words the way a POSIX shell would, without expansions:
/// single quotes, double quotes (with `\"`, `\\`, `\$` and `` \` `` escapes) and backslashes.
pub fn split(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\' | '$' | '`')) => cur.push(x),
                            Some('\n') => {}
                            Some(x) => {
                                cur.push('\\');
                                cur.push(x);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(x) => cur.push(x),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') => {}
                    Some(x) => cur.push(x),
                    None => return Err("trailing backslash".into()),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_leaves_safe_words_and_wraps_the_rest() {
        assert_eq!(quote("abc-1.2/x"), "abc-1.2/x");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }

    #[test]
    fn split_handles_quotes_and_escapes() {
        assert_eq!(split("python train.py --lr 3").unwrap(), ["python", "train.py", "--lr", "3"]);
        assert_eq!(split(r#"a 'b c' "d \"e\"" f\ g"#).unwrap(), ["a", "b c", r#"d "e""#, "f g"]);
        assert_eq!(split("  ").unwrap(), Vec::<String>::new());
        assert!(split("'open").is_err());
    }

    #[test]
    fn env_names() {
        assert!(is_env_name("WANDB_API_KEY"));
        assert!(is_env_name("_x1"));
        assert!(!is_env_name("1X"));
        assert!(!is_env_name("A-B"));
        assert!(!is_env_name(""));
    }
}
