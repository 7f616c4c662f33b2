//! Exec protocol tests: v4 and v5 channels against a real process.
