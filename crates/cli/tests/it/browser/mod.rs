//! The dashboard (`theseus ui`) driven in a real browser: headless Chromium through a small
//! Chrome DevTools Protocol driver ([`cdp`]), against real runs on the local host and the
//! simulator ([`ui`]). Chromium comes from `THESEUSTEST_CHROMIUM` (`cargo xtask test` installs
//! Debian's `chromium` and sets it); without it the tests say they did not run, and fail when
//! `THESEUSTEST_REQUIRE_ALL=1`. Screenshots go to `<target dir>/ui-screenshots/`.

pub(crate) mod cdp;
mod driver;

use std::path::PathBuf;

/// Headless Chromium for `test`, or `None` (after saying loudly that the test did not run).
pub(crate) fn chromium(test: &str) -> Option<cdp::Chromium> {
    let binary = match std::env::var("THESEUSTEST_CHROMIUM") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            let msg = format!(
                "{test}: NOT RUN: THESEUSTEST_CHROMIUM (a Chromium binary) is not set; `cargo xtask test` installs \
                 Debian's chromium and sets it"
            );
            if std::env::var("THESEUSTEST_REQUIRE_ALL").is_ok_and(|v| v == "1") {
                panic!("{msg}");
            }
            eprintln!("\n!!!!!!!! {msg} !!!!!!!!\n");
            return None;
        }
    };
    Some(cdp::Chromium::start(&binary).unwrap_or_else(|e| panic!("{test}: {e:#}")))
}

/// Where the screenshots are kept: `ui-screenshots/` in the target dir the tests were built in
/// (the artifacts CI keeps).
pub(crate) fn screenshot_dir() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_theseus"));
    // <target>/<profile>/theseus
    bin.parent().and_then(|p| p.parent()).expect("the binary sits in <target>/<profile>/").join("ui-screenshots")
}
