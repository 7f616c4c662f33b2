//! The dashboard in headless Chromium against real runs (the page elements of the contract):
//! on the local host a long job that prints a line each time the test drops a trigger file, a
//! completed job and a failed one; on the Kubernetes simulator a long job the same way and one
//! that can never fit. The list shows them with their states (and a pending run's reason), the
//! filters narrow it, a 120-run ledger pages and a new run appears without a reload; a run page
//! streams a line printed after it opened and an ended run's page shows its whole history;
//! cancel from the page (button, dialog, yes) ends the job, as `theseus status` then says; a
//! fresh context without the token is refused; a hostile log line, checkpoint name or run name
//! stays text. Screenshots of each page are written to `<target>/ui-screenshots/` (with
//! `THESEUSTEST_UI_DOCS=1` the runs and run pages are copied to `docs/ui-runs.png` and
//! `docs/ui-run.png` for the README).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::cdp::Page;
use super::{CancelOnDrop, UiServer, screenshot_dir, submit, wait_state};
use crate::TestContext;

/// How long the page may take to show what the test waits for (a hang bound, not a timing goal).
const SHOWN_WITHIN: Duration = Duration::from_secs(60);

/// A line that would run script if the page put it into the DOM as HTML.
const HOSTILE: &str = "<img src=x onerror=\"document.body.dataset.pwned='1'\">";

/// The code dir: `trigger.py DIR` prints `started`, the hostile line, then `line N after the
/// trigger` once `DIR/go-N` exists; `done.py` completes with a W&B link; `fail.py` fails.
fn jobs(trigger: &Path) -> tempfile::TempDir {
    let code = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(code.path().join(name), text).unwrap();
    write(
        "trigger.py",
        &format!(
            "import os, sys, time\nd = sys.argv[1]\nprint('started', flush=True)\nprint({HOSTILE:?}, flush=True)\n\
             i = 1\nwhile True:\n    if os.path.exists(os.path.join(d, 'go-%d' % i)):\n        \
             print('line %d after the trigger' % i, flush=True)\n        i += 1\n    time.sleep(0.05)\n"
        ),
    );
    // Two checkpoints, one with a hostile name, and the latest marker naming the other.
    write(
        "done.py",
        &format!(
            "import os\nd = os.environ['THESEUS_CHECKPOINT_DIR']\nos.makedirs(os.path.join(d, {HOSTILE:?}), exist_ok=True)\n\
             os.makedirs(os.path.join(d, 'step-100'), exist_ok=True)\nopen(os.path.join(d, 'latest'), 'w').write('step-100\\n')\n\
             print('all done: https://wandb.ai/team/proj/runs/abc123', flush=True)\n"
        ),
    );
    write("fail.py", "import sys\nprint('about to fail', flush=True)\nsys.exit(3)\n");
    let trigger = trigger.display();
    write("trigger.yaml", &format!("entrypoint: python trigger.py {trigger}\nrequest: {{chip: cpu}}\n"));
    write("done.yaml", "entrypoint: python done.py\nrequest: {chip: cpu}\n");
    write("fail.yaml", "entrypoint: python fail.py\nrequest: {chip: cpu}\n");
    code
}

/// `document.querySelector(selector)`'s text (`null` when missing), as JS.
fn text_of(selector: &str) -> String {
    format!("(document.querySelector({}) || {{}}).textContent", serde_json::to_string(selector).unwrap())
}

/// The text of `selector` once it is shown (`null` while missing or hidden), as JS.
fn shown_text(selector: &str) -> String {
    let sel = serde_json::to_string(selector).unwrap();
    format!(
        "(() => {{ const e = document.querySelector({sel}); return e && !e.hidden && e.offsetParent !== null ? e.textContent : null; }})()"
    )
}

/// Waits until `body[data-page=page]` has rendered its first data.
fn wait_ready(page: &Page, name: &str) {
    let cond =
        format!("document.body && document.body.dataset.page === '{name}' && document.body.dataset.ready === '1'");
    page.wait_until(&format!("the {name} page to be ready"), &cond, SHOWN_WITHIN).unwrap();
}

/// The run ids the run table shows, in order.
fn listed(page: &Page) -> Vec<String> {
    let ids = page.eval("[...document.querySelectorAll('table#runs tbody tr[data-run-id]')].map(r => r.dataset.runId)");
    serde_json::from_value(ids.unwrap()).unwrap()
}

/// Sets a filter `<select>` as a user picking an option does (value, then input and change).
fn pick(page: &Page, select: &str, value: &str) {
    let js = format!(
        "(() => {{ const s = document.querySelector('{select}'); s.value = {v}; \
         s.dispatchEvent(new Event('input', {{bubbles: true}})); s.dispatchEvent(new Event('change', {{bubbles: true}})); \
         return s.value; }})()",
        v = serde_json::to_string(value).unwrap()
    );
    assert_eq!(page.eval(&js).unwrap(), value, "{select} offers no option {value:?}");
}

/// A row's cell text.
fn cell(page: &Page, run: &str, class: &str) -> Value {
    page.eval(&text_of(&format!("table#runs tbody tr[data-run-id='{run}'] td.{class}"))).unwrap()
}

fn shoot(page: &Page, name: &str) {
    let path = screenshot_dir().join(name);
    page.screenshot(&path).unwrap();
    eprintln!("screenshot: {}", path.display());
    if std::env::var("THESEUSTEST_UI_DOCS").is_ok_and(|v| v == "1") {
        let docs = match name {
            "runs.png" => Some("ui-runs.png"),
            "run.png" => Some("ui-run.png"),
            _ => None,
        };
        if let Some(docs) = docs {
            std::fs::copy(&path, crate::repo_root().join("docs").join(docs)).unwrap();
        }
    }
}

/// The run page of `run` streams what the job prints after it opened: drop `go-N`, see its line.
fn streams_trigger_line(page: &Page, trigger: &Path, n: u32) {
    let want = format!("line {n} after the trigger");
    let has = format!(
        "[...document.querySelectorAll('#log .log-line')].some(l => l.textContent.trim().endsWith({}))",
        serde_json::to_string(&want).unwrap()
    );
    assert_eq!(page.eval(&has).unwrap(), false, "{want} before its trigger");
    std::fs::write(trigger.join(format!("go-{n}")), "").unwrap();
    page.wait_until(&format!("`{want}` to stream in"), &has, SHOWN_WITHIN).unwrap();
}

/// Cancels from the page: the button, the dialog, yes; then the page and `theseus status` agree.
fn cancel_from_page(ctx: &TestContext, page: &Page, run: &str) {
    assert_eq!(page.eval(&shown_text("#log-end")).unwrap(), Value::Null, "a live stream shows an end");
    page.click("button#cancel-button").unwrap();
    page.wait_until("the confirm dialog", "document.querySelector('dialog#confirm-cancel').open", SHOWN_WITHIN)
        .unwrap();
    page.click("button#confirm-cancel-yes").unwrap();
    page.wait_until("the cancel's result", &text_of("#action-result"), SHOWN_WITHIN).unwrap();
    page.wait_until(
        "the page's state to be cancelled",
        &format!("{} === 'cancelled'", text_of("#run-state")),
        SHOWN_WITHIN,
    )
    .unwrap();
    wait_state(ctx, run, "cancelled");
    assert_eq!(page.eval("document.querySelector('button#cancel-button').disabled").unwrap(), true);
    // The open stream ends, and says how.
    let end = page.wait_until("the stream's end", &shown_text("#log-end"), SHOWN_WITHIN).unwrap();
    assert!(end.as_str().unwrap().contains("cancelled"), "{end}");
}

#[test]
fn local_runs_in_the_browser_list_stream_cancel_and_refuse_without_the_token() {
    let test = "local_runs_in_the_browser_list_stream_cancel_and_refuse_without_the_token";
    let Some(chromium) = super::chromium(test) else { return };
    let ctx = TestContext::new();
    let trigger = tempfile::tempdir().unwrap();
    let code = jobs(trigger.path());
    let done = submit(&ctx, code.path(), "done.yaml", "ui-done", &[]);
    let failed = submit(&ctx, code.path(), "fail.yaml", "ui-fail", &["-p", "team-b"]);
    let long = submit(&ctx, code.path(), "trigger.yaml", "ui-long", &[]);
    let _cleanup = CancelOnDrop(&ctx, vec![long.clone()]);
    wait_state(&ctx, &done, "completed");
    wait_state(&ctx, &failed, "failed");
    wait_state(&ctx, &long, "running");
    let ui = UiServer::start(&ctx, &[]);
    let page = chromium.page().unwrap();

    // The list: every run with its state; the token leaves the address bar.
    page.navigate(&ui.url).unwrap();
    wait_ready(&page, "runs");
    page.wait_until(
        "the three runs",
        "document.querySelectorAll('table#runs tbody tr[data-run-id]').length === 3",
        SHOWN_WITHIN,
    )
    .unwrap();
    let mut shown = listed(&page);
    shown.sort();
    let mut want = vec![done.clone(), failed.clone(), long.clone()];
    want.sort();
    assert_eq!(shown, want);
    for (run, state) in [(&done, "completed"), (&failed, "failed"), (&long, "running")] {
        assert_eq!(cell(&page, run, "state").as_str().map(str::trim), Some(state), "{run}");
        assert_eq!(cell(&page, run, "host").as_str().map(str::trim), Some("local"), "{run}");
    }
    assert_eq!(page.eval(&text_of("#counts [data-state=failed] .count")).unwrap().as_str().map(str::trim), Some("1"));
    assert_eq!(page.eval("location.search.includes('token=')").unwrap(), false, "the token stays in the address bar");
    shoot(&page, "runs.png");

    // Filters narrow it, and live in the address (a filtered view is a link).
    pick(&page, "#filter-state", "failed");
    page.wait_until("only the failed run", &format!("JSON.stringify({}) === '[\"{failed}\"]'", ids_js()), SHOWN_WITHIN)
        .unwrap();
    assert_eq!(page.eval("new URLSearchParams(location.search).get('state')").unwrap(), "failed");
    pick(&page, "#filter-state", "");
    pick(&page, "#filter-project", "team-b");
    page.wait_until("only team-b's run", &format!("JSON.stringify({}) === '[\"{failed}\"]'", ids_js()), SHOWN_WITHIN)
        .unwrap();
    pick(&page, "#filter-project", "");
    page.wait_until("all three again", &format!("{}.length === 3", ids_js()), SHOWN_WITHIN).unwrap();

    // A running run's page streams a line printed after it opened; the hostile line is text.
    page.click(&format!("table#runs tbody tr[data-run-id='{long}'] td.name a")).unwrap();
    wait_ready(&page, "run");
    assert_eq!(page.eval("location.pathname").unwrap(), format!("/runs/{long}"));
    assert_eq!(page.eval(&text_of("#run-state")).unwrap().as_str().map(str::trim), Some("running"));
    page.wait_until(
        "the job's first lines",
        "[...document.querySelectorAll('#log .log-line')].some(l => l.textContent.trim().endsWith('started'))",
        SHOWN_WITHIN,
    )
    .unwrap();
    streams_trigger_line(&page, trigger.path(), 1);
    let hostile = page
        .eval(&format!(
            "[...document.querySelectorAll('#log .log-line')].some(l => l.textContent.includes({}))",
            serde_json::to_string(HOSTILE).unwrap()
        ))
        .unwrap();
    assert_eq!(hostile, true, "the hostile line is shown as its text");
    assert_eq!(page.eval("document.querySelectorAll('#log img').length").unwrap(), 0, "the log made an <img>");
    assert_eq!(page.eval("document.body.dataset.pwned === undefined").unwrap(), true, "the log ran script");
    let status_cmd = page.eval(&text_of("#commands code[data-command=status]")).unwrap();
    assert_eq!(status_cmd.as_str().map(str::trim), Some(format!("theseus status {long}").as_str()));
    // Its copy button puts the command on the clipboard (granted, as a click in a user's browser
    // is) and says so.
    chromium.grant_clipboard(&ui.base).unwrap();
    page.emulate_focus().unwrap();
    page.click("#commands .command:has(code[data-command=status]) button.copy").unwrap();
    page.wait_until(
        "the copy button to say copied",
        "[...document.querySelectorAll('#commands button.copy')].some(b => b.textContent === 'copied')",
        SHOWN_WITHIN,
    )
    .unwrap();
    let pasted = page.eval("navigator.clipboard.readText()").unwrap();
    assert_eq!(pasted.as_str(), Some(format!("theseus status {long}").as_str()), "the clipboard");
    shoot(&page, "run.png");
    streams_trigger_line(&page, trigger.path(), 2);

    // Cancel from the page ends the job.
    cancel_from_page(&ctx, &page, &long);

    // An ended run's page: its whole history, the end, no cancel; a W&B link where one was printed.
    page.navigate(&format!("{}/runs/{failed}", ui.base)).unwrap();
    wait_ready(&page, "run");
    let end = page.wait_until("the end of the failed run's log", &shown_text("#log-end"), SHOWN_WITHIN).unwrap();
    assert!(end.as_str().unwrap().contains("failed"), "{end}");
    let lines = page.eval("[...document.querySelectorAll('#log .log-line')].map(l => l.textContent)").unwrap();
    assert!(lines.to_string().contains("about to fail"), "{lines}");
    assert_eq!(page.eval("document.querySelector('button#cancel-button').disabled").unwrap(), true);
    page.navigate(&format!("{}/runs/{done}", ui.base)).unwrap();
    wait_ready(&page, "run");
    page.wait_until("the W&B link", "(document.querySelector('a#wandb-link') || {}).href", SHOWN_WITHIN).unwrap();
    assert_eq!(
        page.eval("document.querySelector('a#wandb-link').href").unwrap(),
        "https://wandb.ai/team/proj/runs/abc123"
    );
    // Its checkpoints, the latest marked; a hostile checkpoint name is text too.
    let checkpoint = |name: &str| {
        format!(
            "document.querySelector('table#checkpoints tbody tr[data-checkpoint=\"' + CSS.escape({}) + '\"]')",
            serde_json::to_string(name).unwrap()
        )
    };
    page.wait_until("the checkpoints", &checkpoint("step-100"), SHOWN_WITHIN).unwrap();
    assert_eq!(page.eval(&format!("{}.classList.contains('latest')", checkpoint("step-100"))).unwrap(), true);
    assert_eq!(page.eval(&format!("{}.classList.contains('latest')", checkpoint(HOSTILE))).unwrap(), false);
    assert_eq!(
        page.eval("document.querySelectorAll('img:not(.brand img)').length").unwrap(),
        0,
        "a checkpoint name made an <img>"
    );
    assert_eq!(page.eval("document.body.dataset.pwned === undefined").unwrap(), true);
    assert_eq!(page.eval("!!document.querySelector('#metadata pre')").unwrap(), true, "the run's metadata.json");
    page.eval("document.querySelector('table#checkpoints').scrollIntoView({block: 'center'})").unwrap();
    shoot(&page, "run-ended.png");

    // The capacity page, through the nav.
    page.click("a#nav-capacity").unwrap();
    wait_ready(&page, "capacity");
    assert_eq!(page.eval("!!document.querySelector('#capacity .host[data-host=local] .availability')").unwrap(), true);
    shoot(&page, "capacity.png");

    // The cookie the page got authorises GETs, never a POST: a cross-site form cannot cancel.
    let post = format!("fetch('/api/runs/{done}/cancel', {{method: 'POST'}}).then(r => r.status)");
    assert_eq!(page.eval(&post).unwrap(), 401);

    // A fresh context without the token: refused, for the page and the API.
    let stranger = chromium.incognito_page().unwrap();
    for (path, says) in [("/", "needs the token"), ("/api/runs", "\"error\""), ("/assets/app.js", "needs the token")] {
        stranger.navigate(&format!("{}{path}", ui.base)).unwrap();
        let status = stranger.eval("performance.getEntriesByType('navigation')[0].responseStatus").unwrap();
        assert_eq!(status, 401, "{path} without the token");
        let body = stranger.eval("document.body ? document.body.innerText : ''").unwrap();
        assert!(body.as_str().unwrap().contains(says), "{path}: {body}");
        assert!(!body.as_str().unwrap().contains(&ui.token), "{path} shows the token");
        if path == "/" {
            shoot(&stranger, "refusal.png");
        }
    }
    eprintln!("{test}: screenshots in {}", screenshot_dir().display());
}

/// The run ids shown, as a JS expression.
fn ids_js() -> &'static str {
    "[...document.querySelectorAll('table#runs tbody tr[data-run-id]')].map(r => r.dataset.runId)"
}

#[test]
fn a_simulator_run_in_the_browser_streams_shows_its_pod_and_cancels() {
    let test = "a_simulator_run_in_the_browser_streams_shows_its_pod_and_cancels";
    let Some(chromium) = super::chromium(test) else { return };
    let ctx = TestContext::new();
    // Dropped last: the runs are cancelled while the simulator still answers.
    let _world = crate::volcano::SimWorld::start(&ctx);
    let trigger = tempfile::tempdir().unwrap();
    let code = jobs(trigger.path());
    let long =
        submit(&ctx, code.path(), "trigger.yaml", "ui-sim", &["--host", "k8s", "--cpu", "100m", "--mem", "128Mi"]);
    // A job that can never fit (8 GPUs in a pod, nodes of 4; the config claims 8 per node): pending,
    // with the scheduler's reason.
    let path = ctx.home().join(".theseus.yaml");
    let config = std::fs::read_to_string(&path).unwrap().replace("chips: {h100: 4}", "chips: {h100: 8}");
    std::fs::write(&path, config).unwrap();
    let huge = submit(&ctx, code.path(), "done.yaml", "ui-huge", &["--host", "k8s", "--chip", "h100", "-n", "8"]);
    let _cleanup = CancelOnDrop(&ctx, vec![long.clone(), huge.clone()]);
    wait_state(&ctx, &long, "running");
    wait_state(&ctx, &huge, "pending");
    let ui = UiServer::start(&ctx, &["--refresh", "1"]);
    let page = chromium.page().unwrap();
    page.navigate(&ui.url).unwrap();
    wait_ready(&page, "runs");
    page.wait_until("the simulator's run", &format!("{}.includes('{long}')", ids_js()), SHOWN_WITHIN).unwrap();
    // The pending run says why, in its row and on its page.
    assert_eq!(page.eval(&cell_js(&huge, "state")).unwrap(), "pending");
    let reason = page.wait_until("the pending run's reason", &cell_js(&huge, "reason"), SHOWN_WITHIN).unwrap();
    assert!(reason.as_str().unwrap().contains("Insufficient nvidia.com/gpu"), "{reason}");
    // The host, with its kind beside it.
    let host = cell(&page, &long, "host");
    assert!(host.as_str().is_some_and(|h| h.split_whitespace().next() == Some("k8s")), "{host}");
    assert_eq!(cell(&page, &long, "state").as_str().map(str::trim), Some("running"));
    shoot(&page, "runs-sim.png");

    page.navigate(&format!("{}/runs/{huge}", ui.base)).unwrap();
    wait_ready(&page, "run");
    let message = page.wait_until("the pending run's message", &text_of("#run-message"), SHOWN_WITHIN).unwrap();
    assert!(message.as_str().unwrap().contains("Insufficient nvidia.com/gpu"), "{message}");
    shoot(&page, "run-pending-sim.png");

    page.navigate(&format!("{}/runs/{long}", ui.base)).unwrap();
    wait_ready(&page, "run");
    page.wait_until("rank 0's row", "document.querySelector('table#ranks tbody tr[data-rank=\"0\"]')", SHOWN_WITHIN)
        .unwrap();
    let location = page.eval(&text_of("table#ranks tbody tr[data-rank=\"0\"] td.location")).unwrap();
    assert!(location.as_str().is_some_and(|l| !l.trim().is_empty()), "rank 0 shows no pod: {location}");
    page.wait_until(
        "the job's first lines",
        "[...document.querySelectorAll('#log .log-line')].some(l => l.textContent.includes('started'))",
        SHOWN_WITHIN,
    )
    .unwrap();
    streams_trigger_line(&page, trigger.path(), 1);
    assert_eq!(page.eval("document.querySelectorAll('#log img').length").unwrap(), 0, "the log made an <img>");
    // Its metadata.json, read from rank 0's running pod.
    page.wait_until("the run's metadata.json", "!!document.querySelector('#metadata pre')", SHOWN_WITHIN).unwrap();
    let metadata = page.eval(&text_of("#metadata pre")).unwrap();
    assert!(metadata.as_str().is_some_and(|m| m.contains("\"num_processes\"")), "{metadata}");
    shoot(&page, "run-sim.png");
    // The capacity page: the cluster's free GPUs and its queue's shares; the local host too.
    page.click("a#nav-capacity").unwrap();
    wait_ready(&page, "capacity");
    let k8s = "#capacity .host[data-host=k8s]";
    page.wait_until("the cluster's queues", &format!("document.querySelector('{k8s} .queues table tr')"), SHOWN_WITHIN)
        .unwrap();
    let queues = page.eval(&text_of(&format!("{k8s} .queues"))).unwrap();
    assert!(queues.as_str().unwrap().contains("default"), "the queue named: {queues}");
    let free = page.eval(&text_of(&format!("{k8s} .availability"))).unwrap();
    assert!(free.as_str().unwrap().contains("free"), "{free}");
    assert_eq!(page.eval("!!document.querySelector('#capacity .host[data-host=local]')").unwrap(), true);
    // The local host lists no GPUs: what is free there are CPU cores, not GPUs.
    let local = page.eval(&text_of("#capacity .host[data-host=local] .availability")).unwrap();
    let local = local.as_str().unwrap_or_default();
    assert!(local.contains("CPU core") && !local.contains("GPU"), "the local host's capacity: {local}");
    shoot(&page, "capacity-sim.png");
    page.navigate(&format!("{}/runs/{long}", ui.base)).unwrap();
    wait_ready(&page, "run");
    cancel_from_page(&ctx, &page, &long);
    // Ended, it has no running pod: the page asks again while a helper pod reads the files the
    // run left on the PVC, and shows the metadata.json of its end.
    page.wait_until(
        "the ended run's metadata.json from the PVC",
        "(document.querySelector('#metadata pre') || {}).textContent?.includes('\"status\": \"preempted\"')",
        SHOWN_WITHIN,
    )
    .unwrap();
    assert_eq!(page.eval("document.getElementById('files-note').hidden").unwrap(), true);
    // Its vcjob is deleted: the rank table is the one recorded at the cancel, on its pod.
    let rank0 = "table#ranks tbody tr[data-rank=\"0\"]";
    page.wait_until("rank 0's recorded end", &format!("document.querySelector('{rank0}')"), SHOWN_WITHIN).unwrap();
    let state = page.eval(&text_of(&format!("{rank0} td.state"))).unwrap();
    assert_eq!(state.as_str().map(str::trim), Some("cancelled"), "{state}");
    assert_eq!(page.eval(&text_of(&format!("{rank0} td.location"))).unwrap(), location, "the pod it ran in");
    shoot(&page, "run-ended-sim.png");
}

/// Adds `n` ended runs to the ledger of `ctx` (made by `theseus list`), the oldest first.
fn add_ended_runs(ctx: &TestContext, n: usize) {
    let out = ctx.run(&["list"]);
    assert!(out.status.success(), "{}", crate::text(&out.stderr));
    let db = ctx.home().join("state/theseus/ledger.sqlite3");
    let conn = rusqlite::Connection::open(&db).unwrap_or_else(|e| panic!("{}: {e}", db.display()));
    for i in 0..n {
        let run = format!("20250101-{i:06}-0000aa");
        let handle = serde_json::json!({"kind": "local", "host": "local", "id": run, "data": {
            "run_dir": format!("/nonexistent/{run}"), "work_dir": "/nonexistent", "log_file": "/nonexistent.log",
            "processes": 1}});
        let at = format!("2025-01-01T{:02}:{:02}:00Z", i / 60, i % 60);
        conn.execute(
            "INSERT INTO runs (run_id, name, project, grp, host, handle, submitted_at, updated_at, state, exit_code, kind) \
             VALUES (?1, ?2, 'general', 'default', 'local', ?3, ?4, ?4, 'completed', 0, 'job')",
            // The newest has a name `submit` would refuse (an edited or foreign ledger): still text.
            rusqlite::params![run, if i + 1 == n { HOSTILE.to_owned() } else { format!("old-{i}") }, handle.to_string(), at],
        )
        .unwrap();
    }
}

#[test]
fn the_run_list_pages_and_shows_a_new_run_without_a_reload() {
    let test = "the_run_list_pages_and_shows_a_new_run_without_a_reload";
    let Some(chromium) = super::chromium(test) else { return };
    let ctx = TestContext::new();
    add_ended_runs(&ctx, 120);
    let ui = UiServer::start(&ctx, &[]);
    let page = chromium.page().unwrap();
    page.navigate(&ui.url).unwrap();
    wait_ready(&page, "runs");
    let info = text_of("#page-info");
    assert_eq!(page.eval(&info).unwrap(), "1–50 of 120");
    assert_eq!(listed(&page).first().map(String::as_str), Some("20250101-000119-0000aa"), "newest first");
    assert_eq!(page.eval(&cell_js("20250101-000119-0000aa", "name")).unwrap(), HOSTILE);
    assert_eq!(page.eval("document.querySelectorAll('table#runs img').length").unwrap(), 0, "a name made an <img>");
    assert_eq!(page.eval("document.body.dataset.pwned === undefined").unwrap(), true, "a name ran script");
    page.click("button#next").unwrap();
    page.wait_until("the second page", &format!("{info} === '51–100 of 120'"), SHOWN_WITHIN).unwrap();
    assert_eq!(listed(&page).first().map(String::as_str), Some("20250101-000069-0000aa"));
    assert_eq!(page.eval("new URLSearchParams(location.search).get('offset')").unwrap(), "50");
    page.click("button#prev").unwrap();
    page.wait_until("the first page again", &format!("{info} === '1–50 of 120'"), SHOWN_WITHIN).unwrap();

    // A run submitted while the page is open shows up on it, the document never reloaded.
    page.eval("window.sameDocument = true").unwrap();
    let trigger = tempfile::tempdir().unwrap();
    let code = jobs(trigger.path());
    let done = submit(&ctx, code.path(), "done.yaml", "ui-new", &[]);
    page.wait_until("the new run at the top", &format!("{}[0] === '{done}'", ids_js()), SHOWN_WITHIN).unwrap();
    page.wait_until("the new total", &format!("{info} === '1–50 of 121'"), SHOWN_WITHIN).unwrap();
    wait_state(&ctx, &done, "completed");
    page.wait_until("its state to follow", &format!("{} === 'completed'", cell_js(&done, "state")), SHOWN_WITHIN)
        .unwrap();
    assert_eq!(page.eval("window.sameDocument === true").unwrap(), true, "the page reloaded");
}

/// A row's cell text (trimmed), as JS.
fn cell_js(run: &str, class: &str) -> String {
    format!("({}||'').trim()", text_of(&format!("table#runs tbody tr[data-run-id='{run}'] td.{class}")))
}
