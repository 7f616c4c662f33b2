//! The CDP driver itself ([`super::cdp`]), against a tiny HTTP server in the test: load, eval
//! (promises, exceptions), bounded waits, real clicks (missing and covered elements refused),
//! screenshots, a 401 page, cookies kept in the default context and absent from an incognito
//! one, and nothing left behind (process group, profile dir) once the browser is dropped.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::time::Duration;

const PAGE: &str = "<!doctype html><html><head><title>driver test</title></head><body>\
    <button id=b onclick=\"setTimeout(() => document.body.dataset.clicked = '1', 50)\">click</button>\
    <div style='position:relative'><button id=under>under</button>\
    <div style='position:absolute;inset:0;background:#fff'></div></div>\
    <pre id=cookie>COOKIE</pre></body></html>";

/// Serves `/` (sets a cookie, shows the Cookie header it got) and `/deny` (401) until the
/// process ends; returns the base URL.
fn serve() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        // A thread per connection: Chromium keeps idle (preconnected) sockets open.
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(stream));
        }
    });
    url
}

fn answer(stream: std::net::TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let (mut first, mut cookie) = (String::new(), String::new());
    let _ = reader.read_line(&mut first);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some(value) = line.strip_prefix("Cookie: ").or(line.strip_prefix("cookie: ")) {
            cookie = value.trim().to_owned();
        }
    }
    let (status, body) = if first.starts_with("GET /deny") {
        ("401 Unauthorized", "<!doctype html><p id=refused>refused</p>".to_owned())
    } else if first.starts_with("GET / ") {
        ("200 OK", PAGE.replace("COOKIE", &cookie))
    } else {
        ("404 Not Found", String::new())
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/html\r\nSet-Cookie: seen=1; Path=/\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

#[test]
fn the_driver_loads_evaluates_waits_clicks_and_screenshots() {
    let Some(chromium) = super::chromium("the_driver_loads_evaluates_waits_clicks_and_screenshots") else { return };
    let url = serve();
    let page = chromium.page().unwrap();
    page.navigate(&format!("{url}/")).unwrap();
    assert_eq!(page.eval("document.title").unwrap(), "driver test");
    assert_eq!(page.eval("new Promise(r => setTimeout(() => r(41 + 1), 20))").unwrap(), 42);
    let thrown = page.eval("(() => { throw new Error('boom') })()").unwrap_err().to_string();
    assert!(thrown.contains("boom"), "{thrown}");

    page.click("#b").unwrap();
    page.wait_until("the click's effect", "document.body.dataset.clicked === '1'", Duration::from_secs(10)).unwrap();
    let missing = page.click("#missing").unwrap_err().to_string();
    assert!(missing.contains("no element #missing"), "{missing}");
    let covered = page.click("#under").unwrap_err().to_string();
    assert!(covered.contains("covered"), "{covered}");
    let never = page.wait_until("a thing that never happens", "false", Duration::from_millis(300)).unwrap_err();
    assert!(never.to_string().contains("a thing that never happens"), "{never}");

    // Kept with the dashboard's screenshots: the driver's own view of a page.
    let shot = super::screenshot_dir().join("driver-test.png");
    let _ = std::fs::remove_file(&shot);
    page.screenshot(&shot).unwrap();
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 1000, "not a PNG: {} bytes", png.len());

    // A refusal is a page that loads, with its own body.
    page.navigate(&format!("{url}/deny")).unwrap();
    assert_eq!(page.eval("document.getElementById('refused').textContent").unwrap(), "refused");
}

#[test]
fn an_incognito_page_has_no_cookie_of_the_default_context() {
    let Some(chromium) = super::chromium("an_incognito_page_has_no_cookie_of_the_default_context") else { return };
    let url = serve();
    let cookie = "document.getElementById('cookie').textContent";
    let page = chromium.page().unwrap();
    page.navigate(&format!("{url}/")).unwrap();
    assert_eq!(page.eval(cookie).unwrap(), "", "the first visit carries no cookie");
    page.navigate(&format!("{url}/")).unwrap();
    assert_eq!(page.eval(cookie).unwrap(), "seen=1", "the default context keeps it");
    let other = chromium.page().unwrap();
    other.navigate(&format!("{url}/")).unwrap();
    assert_eq!(other.eval(cookie).unwrap(), "seen=1", "a second default page shares it");
    let fresh = chromium.incognito_page().unwrap();
    assert_ne!(fresh.target(), page.target());
    fresh.navigate(&format!("{url}/")).unwrap();
    assert_eq!(fresh.eval(cookie).unwrap(), "", "an incognito context starts without it");
}

#[test]
fn a_dropped_browser_leaves_no_process_and_no_profile() {
    let Some(chromium) = super::chromium("a_dropped_browser_leaves_no_process_and_no_profile") else { return };
    let page = chromium.page().unwrap();
    page.navigate("data:text/html,<p>hi</p>").unwrap();
    let (pid, profile) = (chromium.pid(), chromium.profile().to_owned());
    assert!(group_members(pid) > 1, "Chromium runs its helpers in its group");
    assert!(profile.join("DevToolsActivePort").exists());
    drop(page);
    drop(chromium);
    assert_eq!(group_members(pid), 0, "a process of Chromium's group outlived the driver");
    assert!(!profile.exists(), "{} was left behind", profile.display());
}

/// How many live processes are in process group `pgid` (from /proc/*/stat).
fn group_members(pgid: u32) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // pid (comm) state ppid pgrp ...: comm may hold spaces, so split after its ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid) && fields.first() != Some(&"Z") {
            n += 1;
        }
    }
    n
}

/// A binary that is not Chromium, or none: an error saying so, and no profile dir left.
#[test]
fn a_browser_that_does_not_start_is_a_clear_error_and_leaves_nothing() {
    let err = super::cdp::Chromium::start(std::path::Path::new("/bin/false")).err().unwrap();
    let err = format!("{err:#}");
    assert!(err.contains("did not start") && err.contains("exited"), "{err}");
    let profile = err.split("(its profile ").nth(1).and_then(|rest| rest.split(" is removed").next()).unwrap();
    assert!(profile.contains("theseus-chromium-") && !std::path::Path::new(profile).exists(), "{profile} left behind");
    let err = super::cdp::Chromium::start(std::path::Path::new("/nonexistent/chromium")).err().unwrap();
    assert!(format!("{err:#}").contains("cannot start /nonexistent/chromium"), "{err:#}");
}
