//! Kubernetes resource quantities (`8`, `500m`, `64Gi`, `1.5`, `2e3`, `64G`): parsed to check the
//! config before anything reaches a cluster, and to compare values (queue capacity, requests).
//!
//! The grammar is the apiserver's: an optional sign, a decimal number, then one optional suffix:
//! binary (`Ki` .. `Ei`), decimal (`n`, `u`, `m`, `k`, `M`, `G`, `T`, `P`, `E`) or a decimal
//! exponent (`e3`, `E-2`).

use std::cmp::Ordering;
use std::fmt;

/// A parsed quantity: the text as written and its value in base units (cores, bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct Quantity {
    text: String,
    value: f64,
}

/// A value that is not a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {text:?}")]
pub struct InvalidQuantity {
    /// The value as written.
    pub text: String,
}

impl Quantity {
    /// Parses `text`.
    ///
    /// # Errors
    /// [`InvalidQuantity`] naming the text when it is not a quantity (`64Gx`, `""`, `1.2.3`).
    pub fn parse(text: &str) -> Result<Quantity, InvalidQuantity> {
        let fail = || InvalidQuantity { text: text.to_owned() };
        let (number, rest) = split_number(text).ok_or_else(fail)?;
        let multiplier = suffix_multiplier(rest).ok_or_else(fail)?;
        let number: f64 = number.parse().map_err(|_| fail())?;
        let value = number * multiplier;
        if !value.is_finite() {
            return Err(fail());
        }
        Ok(Quantity { text: text.to_owned(), value })
    }

    /// The value in base units (cores for CPU, bytes for memory, a count for devices).
    pub fn value(&self) -> f64 {
        self.value
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Quantity) -> Option<Ordering> {
        self.value.partial_cmp(&other.value)
    }
}

/// Splits `[+-]digits[.digits]` (or `[+-].digits`) off the front of `text`.
fn split_number(text: &str) -> Option<(&str, &str)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    if matches!(bytes.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let int_start = i;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - int_start;
    let mut frac_digits = 0;
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        let frac_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        frac_digits = i - frac_start;
    }
    if int_digits == 0 && frac_digits == 0 {
        return None;
    }
    Some(text.split_at(i))
}

/// The factor of a suffix, or `None` when it is not one.
fn suffix_multiplier(suffix: &str) -> Option<f64> {
    const KI: f64 = 1024.0;
    Some(match suffix {
        "" => 1.0,
        "Ki" => KI,
        "Mi" => KI.powi(2),
        "Gi" => KI.powi(3),
        "Ti" => KI.powi(4),
        "Pi" => KI.powi(5),
        "Ei" => KI.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            10f64.powi(exponent.parse::<i32>().ok()?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_suffixes() {
        for (text, value) in [
            ("8", 8.0),
            ("500m", 0.5),
            ("64Gi", 64.0 * 1024.0 * 1024.0 * 1024.0),
            ("1.5", 1.5),
            ("2e3", 2000.0),
            ("64G", 64e9),
            (".5", 0.5),
            ("1Ki", 1024.0),
        ] {
            assert_eq!(Quantity::parse(text).unwrap().value(), value, "{text}");
        }
    }

    #[test]
    fn rejects_garbage_and_names_it() {
        for text in ["64Gx", "", "Gi", "1.2.3", "1e", "1 Gi", "abc", "1gi"] {
            let err = Quantity::parse(text).unwrap_err();
            assert_eq!(err.to_string(), format!("invalid quantity {text:?}"));
        }
    }

    #[test]
    fn compares_by_value() {
        let q = |s| Quantity::parse(s).unwrap();
        assert!(q("1Gi") > q("1G"));
        assert!(q("500m") < q("1"));
        assert_eq!(q("1000m").partial_cmp(&q("1")), Some(Ordering::Equal));
    }
}
