//! `theseus jobs|configure|run|checkpoints|restore`: the original theseus package's local
//! commands, which theseus (a dispatcher) does not replace. Both install a `theseus` program;
//! whichever comes first on `PATH`, these keep working: theseus runs the original's own CLI
//! (`theseus.cli`) with the project's Python, so a team moving over keeps `theseus configure`.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Result, bail};

/// Imports the original's CLI and runs it with the arguments after `-c`; a missing package is
/// one line saying what this command is and where it looked, exit 2.
const SHIM: &str = "import sys
try:
    import theseus.cli as cli
except ImportError as e:
    sys.stderr.write('theseus: `theseus %s` is a command of the original theseus package, which this '
                     'Python (%s) cannot import (%s); run it in the project that has the package\\n'
                     % (sys.argv[1] if len(sys.argv) > 1 else '', sys.executable, e))
    sys.exit(2)
sys.argv = ['theseus'] + sys.argv[1:]
cli.theseus()
";

/// Runs the original's `name` with `args`, replacing this process.
pub(crate) fn run(name: &str, args: &[String]) -> Result<ExitCode> {
    let cwd = std::env::current_dir()?;
    let mut cmd = python(&cwd);
    cmd.arg("-c").arg(SHIM).arg(name).args(args);
    let err = cmd.exec();
    bail!("cannot run the original theseus package's `{name}` ({:?}): {err}", cmd.get_program())
}

/// The project's Python: `uv run python` in the project that holds `dir` (a `pyproject.toml`
/// here or above) when uv is installed, else its `.venv`, else `python3`.
fn python(dir: &Path) -> Command {
    let project = dir.ancestors().find(|d| d.join("pyproject.toml").is_file()).map(Path::to_path_buf);
    if let Some(project) = &project {
        if let Some(uv) = on_path("uv") {
            let mut cmd = Command::new(uv);
            cmd.args(["run", "--project"]).arg(project).arg("python");
            return cmd;
        }
        let venv = project.join(".venv/bin/python");
        if venv.is_file() {
            return Command::new(venv);
        }
    }
    Command::new("python3")
}

/// `name` on `PATH`, when it is there.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}
