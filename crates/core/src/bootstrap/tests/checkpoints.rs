//! `checkpoints.json`: rank 0 lists the run's checkpoints and the `latest` marker at every
//! heartbeat and at the end, newest first, at most 100, every name JSON-escaped. Every case
//! runs the real script with bash.

use super::*;

/// A job that makes the checkpoints named in `CK_NAMES` (JSON list) in its checkpoint dir,
/// oldest first (each a minute older than the next), writes `latest` naming `CK_LATEST` when
/// set, removes the dir with `CK_REMOVE`, and with `CK_SLEEP` writes `made` and then sleeps.
const CK_PY: &str = r#"
import json, os, shutil, time
d = os.environ["THESEUS_CHECKPOINT_DIR"]
names = json.loads(os.environ.get("CK_NAMES", "[]"))
now = time.time()
for i, name in enumerate(os.fsencode(n) if isinstance(n, str) else bytes(n) for n in names):
    path = os.path.join(os.fsencode(d), name)
    os.makedirs(path, exist_ok=True)
    t = now - 60 * (len(names) - i)
    os.utime(path, (t, t))
if "CK_LATEST" in os.environ:
    with open(os.path.join(d, ".latest.tmp"), "w") as f:
        f.write(os.environ["CK_LATEST"] + "\n")
    os.rename(os.path.join(d, ".latest.tmp"), os.path.join(d, "latest"))
if os.environ.get("CK_REMOVE"):
    shutil.rmtree(d)
if os.environ.get("CK_SLEEP"):
    open(os.path.join(os.environ["THESEUS_RUN_DIR"], "made"), "w").close()
    time.sleep(float(os.environ["CK_SLEEP"]))
"#;

fn ckpt_dir(h: &Harness) -> PathBuf {
    h.tmp.path().join("shared/check points/proj/grp/job")
}

fn run_job(h: &Harness, env: &[(&str, &str)]) -> Value {
    std::fs::write(h.work.join("ck.py"), CK_PY).unwrap();
    let (_, out) = h.run(&h.input(&["python", "ck.py"]), env);
    assert!(out.status.success(), "{}", stderr(&out));
    h.metadata("checkpoints.json")
}

fn names(doc: &Value) -> Vec<String> {
    doc["checkpoints"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_owned()).collect()
}

/// `YYYY-MM-DDTHH:MM:SSZ` as a UTC time.
fn utc(text: &str) -> time::OffsetDateTime {
    let b = text.as_bytes();
    let shape = b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        });
    assert!(shape, "not RFC 3339 UTC: {text:?}");
    let n = |r: std::ops::Range<usize>| text[r].parse::<u32>().unwrap();
    let month = time::Month::try_from(n(5..7) as u8).unwrap();
    let date = time::Date::from_calendar_date(n(0..4) as i32, month, n(8..10) as u8).unwrap();
    let at = time::Time::from_hms(n(11..13) as u8, n(14..16) as u8, n(17..19) as u8).unwrap();
    time::PrimitiveDateTime::new(date, at).assume_utc()
}

#[test]
fn a_run_that_made_checkpoints_lists_them_newest_first_with_the_latest_marker() {
    let h = Harness::new();
    let doc = run_job(&h, &[("CK_NAMES", r#"["step_10", "step_20", "step_30"]"#), ("CK_LATEST", "step_20")]);
    assert_eq!(doc["dir"], Value::from(ckpt_dir(&h).to_str().unwrap()));
    assert_eq!(doc["latest"], "step_20");
    assert_eq!(names(&doc), ["step_30", "step_20", "step_10"], "newest first; `latest` is not a checkpoint");
    for c in doc["checkpoints"].as_array().unwrap() {
        utc(c["modified"].as_str().unwrap());
    }
    let written = utc(doc["written_at"].as_str().unwrap());
    // The job dated the newest checkpoint a minute back: UTC, not local time.
    let age = written - utc(doc["checkpoints"][0]["modified"].as_str().unwrap());
    assert!(age >= time::Duration::seconds(55) && age <= time::Duration::seconds(300), "{age}");
    let leftovers: Vec<_> = std::fs::read_dir(&h.run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn hostile_names_are_escaped_and_only_the_newest_100_are_kept() {
    let h = Harness::new();
    let mut names_in: Vec<Value> = (0..105).map(|i| Value::from(format!("step_{i:03}"))).collect();
    let hostile = ["it's \"quoted\"", "back\\slash", "new\nline", "tab\there", "héllo ✓", "$(touch pwned)"];
    names_in.extend(hostile.iter().map(|n| Value::from(*n)));
    // Bytes that are not UTF-8 (a name on Linux is any bytes but `/` and NUL).
    names_in.push(json!([b'b', b'a', b'd', 0xff, 0x01]));
    let doc = run_job(&h, &[("CK_NAMES", &Value::from(names_in).to_string()), ("CK_LATEST", "new\\line")]);
    let listed = names(&doc);
    assert_eq!(listed.len(), 100, "at most 100");
    assert_eq!(listed[0], "bad\u{ff}\u{1}", "bytes that are not UTF-8 as Latin-1 characters");
    assert_eq!(listed[1..7], hostile.iter().rev().map(|n| n.to_string()).collect::<Vec<_>>()[..]);
    assert_eq!(listed[7], "step_104");
    assert_eq!(listed[99], "step_012", "the oldest ones are left out");
    assert_eq!(doc["latest"], "new\\line");
    h.assert_no_injection();
    assert!(!h.work.join("pwned").exists());
}

#[test]
fn no_checkpoint_dir_lists_no_checkpoints() {
    let h = Harness::new();
    let doc = run_job(&h, &[("CK_NAMES", r#"["step_1"]"#), ("CK_LATEST", "step_1"), ("CK_REMOVE", "1")]);
    assert!(!ckpt_dir(&h).exists());
    assert_eq!(doc["checkpoints"], json!([]));
    assert_eq!(doc["latest"], Value::Null);
    assert_eq!(doc["dir"], Value::from(ckpt_dir(&h).to_str().unwrap()));
}

/// The heartbeat rewrites it while the job runs: a checkpoint made now is listed before the end.
#[test]
fn the_heartbeat_lists_checkpoints_while_the_job_runs() {
    let h = Harness::new();
    std::fs::write(h.work.join("ck.py"), CK_PY).unwrap();
    let env = [
        ("CK_NAMES", r#"["step_5"]"#),
        ("CK_LATEST", "step_5"),
        ("CK_SLEEP", "60"),
        ("THESEUS_HEARTBEAT_SECONDS", "0.2"),
    ];
    let (_, mut child) = h.spawn(&h.input(&["python", "ck.py"]), &env);
    let deadline = Instant::now() + Duration::from_secs(30);
    let listed = loop {
        let doc = std::fs::read_to_string(h.run.join("checkpoints.json")).ok();
        let doc: Option<Value> = doc.and_then(|t| serde_json::from_str(&t).ok());
        if let Some(doc) = doc.filter(|d| d["latest"] == "step_5") {
            break doc;
        }
        assert!(Instant::now() < deadline, "no heartbeat listed the checkpoint");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(child.try_wait().unwrap().is_none(), "listed while the job runs");
    assert_eq!(names(&listed), ["step_5"]);
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert_eq!(names(&h.metadata("checkpoints.json")), ["step_5"], "written at the end too");
}
