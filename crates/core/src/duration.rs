//! The one parser of durations typed by users (command line and config): plain seconds
//! (`20`, `0.5`) or a whole or decimal number with a unit (`90s`, `30m`, `1.5h`, `1d`).
//!
//! Every duration is finite, not negative and at most [`MAX`], so that no later conversion
//! (`Duration::from_secs_f64`, additions to `Instant`) can panic or overflow: `inf`, `NaN`,
//! `-1` and `1e30` are errors that say what is accepted.

use std::time::Duration;

/// The longest duration accepted: 366 days.
pub const MAX: Duration = Duration::from_secs(366 * 86_400);

/// What the accepted forms are, for error messages.
const FORMS: &str = "expected seconds (e.g. `20` or `0.5`) or a number with a unit ms, s, m, h or d (e.g. `30s`, `2h`)";

/// Parses a duration: seconds as a number, or a number followed by `s`, `m`, `h` or `d`.
///
/// # Errors
/// A message (without the input, which the caller names with its flag or key) when the text is
/// not one of the accepted forms, or is negative, not finite, or above [`MAX`].
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if text.starts_with('-') {
        return Err("a duration cannot be negative".into());
    }
    if number.is_empty() {
        return Err(FORMS.into());
    }
    let seconds_per_unit: f64 = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        other => return Err(format!("unknown unit {other:?}; {FORMS}")),
    };
    // Only digits with at most one `.` reach the float parser: no `inf`, `nan`, `1e30` or signs.
    if number == "." || number.matches('.').count() > 1 {
        return Err(FORMS.into());
    }
    let value: f64 = number.parse().map_err(|_| FORMS.to_owned())?;
    let seconds = value * seconds_per_unit;
    if !seconds.is_finite() || seconds > MAX.as_secs_f64() {
        return Err(format!("a duration can be at most {} days", MAX.as_secs() / 86_400));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_seconds_and_units() {
        assert_eq!(parse("20"), Ok(Duration::from_secs(20)));
        assert_eq!(parse("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse(" 90s "), Ok(Duration::from_secs(90)));
        assert_eq!(parse("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("366d"), Ok(MAX));
    }

    #[test]
    fn refuses_what_would_panic_or_overflow() {
        for bad in ["inf", "-inf", "NaN", "nan", "-1", "-0.5", "1e30", "1e3", "", "s", ".", "1.2.3", "5w", "h1", "+3"] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        let too_long = parse("367d").unwrap_err();
        assert!(too_long.contains("at most 366 days"), "{too_long}");
        assert!(parse(&"9".repeat(400)).unwrap_err().contains("at most"));
        assert!(parse("-1").unwrap_err().contains("negative"));
        assert!(parse("inf").unwrap_err().contains("30s"));
    }
}
