//! Kubernetes resource quantities ("500m", "64Gi", "1e3", "2") parsed to milli-units.

/// A quantity string that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity `{0}`")]
pub struct QuantityError(pub String);

/// Parses a quantity to thousandths of the base unit, rounding up like the apiserver
/// (`"100n"` of CPU is 1m).
pub fn parse_milli(input: &str) -> Result<i128, QuantityError> {
    let err = || QuantityError(input.to_owned());
    let s = input.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let num_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(num_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(err());
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // The value is mantissa * 10^(exp10) * 2^(exp2), with the mantissa an integer.
    let mantissa: i128 = format!("{int_part}{frac_part}").parse().map_err(|_| err())?;
    let mut exp10: i32 = -(frac_part.len() as i32);
    let mut exp2: u32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other => {
            let exp = other.strip_prefix(['e', 'E']).ok_or_else(err)?;
            let exp: i32 = exp.parse().map_err(|_| err())?;
            exp10 += exp;
        }
    }
    // Milli-units: one more factor of 10^3.
    exp10 += 3;
    let mut value = mantissa.checked_mul(1i128.checked_shl(exp2).ok_or_else(err)?).ok_or_else(err)?;
    if exp10 >= 0 {
        let factor = 10i128.checked_pow(exp10 as u32).ok_or_else(err)?;
        value = value.checked_mul(factor).ok_or_else(err)?;
    } else {
        let divisor = 10i128.checked_pow((-exp10) as u32).ok_or_else(err)?;
        value = (value + divisor - 1) / divisor;
    }
    Ok(if negative { -value } else { value })
}

/// Renders milli-units back as a quantity: whole units when exact, else `<n>m`.
pub fn format_milli(milli: i128) -> String {
    if milli % 1000 == 0 { (milli / 1000).to_string() } else { format!("{milli}m") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        let cases = [
            ("2", 2000),
            ("500m", 500),
            ("0.5", 500),
            ("1.5Gi", 1536 * 1024 * 1024 * 1000),
            ("64Gi", 64 * (1i128 << 30) * 1000),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("128k", 128_000_000),
            ("100n", 1),
            ("8", 8000),
        ];
        for (input, want) in cases {
            assert_eq!(parse_milli(input), Ok(want), "{input}");
        }
        for bad in ["", "abc", "1.2.3", "5Xi", "m"] {
            assert!(parse_milli(bad).is_err(), "{bad}");
        }
        assert_eq!(format_milli(2500), "2500m");
        assert_eq!(format_milli(8000), "8");
    }
}
