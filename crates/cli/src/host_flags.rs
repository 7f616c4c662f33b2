//! The flags host types add to `submit`, `plan` and `repl` (`HostType::flags`, e.g.
//! `--tpu-spot`): added to the derived clap definition with the builder API, listed by
//! `--help` under a heading per type, and read back from the matches as core's
//! [`GivenFlag`]s, which `prepare::solve` applies to the hosts of their type.

use clap::{Arg, ArgAction, ArgMatches, Command, CommandFactory as _, FromArgMatches as _};
use theseus_core::config::{FlagSets, GivenFlag, HostTypes};

use crate::args::{self, Cli};

/// The subcommands that solve a job, which get the flags.
const SOLVING: &[&str] = &["submit", "plan", "repl"];

/// The clap id of a host type's flag (apart from the derived ones).
fn id(name: &str) -> String {
    format!("host-flag-{name}")
}

/// The whole command line: the derived definition plus every registered type's flags.
pub(crate) fn command(registry: &HostTypes) -> Command {
    let mut command = Cli::command();
    for sub in SOLVING {
        command = command.mut_subcommand(*sub, |mut c| {
            for (kind, flag) in registry.flags() {
                assert!(
                    !c.get_arguments().any(|a| a.get_long() == Some(flag.name)),
                    "host type `{kind}` declares flag --{}, which `{sub}` already has",
                    flag.name
                );
                let same_key: Vec<String> = registry
                    .flags()
                    .into_iter()
                    .filter(|(k, f)| *k == kind && f.name != flag.name && f.key() == flag.key())
                    .map(|(_, f)| id(f.name))
                    .collect();
                let arg = Arg::new(id(flag.name))
                    .long(flag.name)
                    .help(flag.help)
                    .help_heading(format!("Options of `{kind}` hosts"))
                    .conflicts_with_all(same_key);
                c = c.arg(match flag.sets {
                    FlagSets::Value { value_name, .. } => arg.value_name(value_name).action(ArgAction::Set),
                    FlagSets::Constant { .. } => arg.action(ArgAction::SetTrue),
                });
            }
            c
        });
    }
    command
}

/// Parses this process's arguments (exiting with clap's message on an error, as `parse`
/// does); the host-type flags given go into the solving command's arguments.
pub(crate) fn parse(registry: &HostTypes) -> Cli {
    let matches = command(registry).get_matches();
    from_matches(registry, &matches).unwrap_or_else(|e| e.exit())
}

/// The arguments of `matches`, with the host-type flags given.
fn from_matches(registry: &HostTypes, matches: &ArgMatches) -> Result<Cli, clap::Error> {
    let mut cli = Cli::from_arg_matches(matches)?;
    // Only the solving subcommands define the flags: asking another's matches for them is an
    // error that clap reports only with debug assertions (a release build answered "absent"
    // and then panicked in `get_flag`: every `theseus list` of a wheel exited 101).
    let Some((name, sub)) = matches.subcommand() else { return Ok(cli) };
    if !SOLVING.contains(&name) {
        return Ok(cli);
    }
    let flags = given(registry, sub);
    match &mut cli.command {
        args::Command::Submit(a) => a.job.host_flags = flags,
        args::Command::Plan(a) => a.host_flags = flags,
        args::Command::Repl(a) => a.host_flags = flags,
        _ => {}
    }
    Ok(cli)
}

/// The host-type flags of a solving subcommand's matches, in registry order.
fn given(registry: &HostTypes, matches: &ArgMatches) -> Vec<GivenFlag> {
    let mut out = Vec::new();
    for (kind, flag) in registry.flags() {
        let id = id(flag.name);
        if matches.try_get_one::<String>(&id).is_err() && matches.try_get_one::<bool>(&id).is_err() {
            continue;
        }
        let raw = match flag.sets {
            FlagSets::Value { .. } => match matches.get_one::<String>(&id) {
                Some(raw) => Some(raw.clone()),
                None => continue,
            },
            FlagSets::Constant { .. } if matches!(matches.try_get_one::<bool>(&id), Ok(Some(true))) => None,
            FlagSets::Constant { .. } => continue,
        };
        out.push(GivenFlag { kind, flag, raw });
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value};
    use theseus_core::config::{FlagConstant, HostFlag, HostKind, HostSettings, HostType};
    use theseus_core::keys::KeyError;

    use super::*;

    /// A type with a value flag and two constants of one key.
    struct Flagged;

    static FLAGS: &[HostFlag] = &[
        HostFlag { name: "flagged-size", help: "Size.", sets: FlagSets::Value { key: "size", value_name: "N" } },
        HostFlag {
            name: "flagged-fast",
            help: "Fast.",
            sets: FlagSets::Constant { key: "fast", value: FlagConstant::Bool(true) },
        },
        HostFlag {
            name: "flagged-slow",
            help: "Slow.",
            sets: FlagSets::Constant { key: "fast", value: FlagConstant::Bool(false) },
        },
    ];

    impl HostType for Flagged {
        fn kind(&self) -> HostKind {
            HostKind::named("flagged")
        }
        fn flags(&self) -> &'static [HostFlag] {
            FLAGS
        }
        fn parse(&self, _: Map<String, Value>, _: &str) -> Result<Box<dyn HostSettings>, KeyError> {
            unreachable!("not read")
        }
    }

    /// A type whose flag is one the commands already have.
    struct Clashing;

    impl HostType for Clashing {
        fn kind(&self) -> HostKind {
            HostKind::named("clashing")
        }
        fn flags(&self) -> &'static [HostFlag] {
            &[HostFlag { name: "replace", help: "No.", sets: FlagSets::Value { key: "k", value_name: "V" } }]
        }
        fn parse(&self, _: Map<String, Value>, _: &str) -> Result<Box<dyn HostSettings>, KeyError> {
            unreachable!("not read")
        }
    }

    #[test]
    #[should_panic(expected = "host type `clashing` declares flag --replace, which `submit` already has")]
    fn a_flag_that_clashes_with_a_commands_own_is_refused_at_once() {
        command(&HostTypes::new(&[&Clashing]));
    }

    #[test]
    #[should_panic(expected = "host type `flagged` declares flag --flagged-size, which `submit` already has")]
    fn two_types_with_one_flag_name_are_refused_at_once() {
        command(&HostTypes::new(&[&Flagged, &Flagged]));
    }

    fn parsed(args: &[&str]) -> Result<Cli, clap::Error> {
        let registry = HostTypes::new(&[&Flagged]);
        let matches = command(&registry).try_get_matches_from(args)?;
        from_matches(&registry, &matches)
    }

    fn given_to_plan(args: &[&str]) -> Vec<String> {
        match parsed(args).unwrap().command {
            args::Command::Plan(a) => a.host_flags.iter().map(GivenFlag::shown).collect(),
            other => panic!("not plan: {other:?}"),
        }
    }

    #[test]
    fn a_types_flags_reach_the_solving_commands_and_constants_of_one_key_exclude_each_other() {
        let registry = HostTypes::new(&[&Flagged]);
        command(&registry).debug_assert();
        assert_eq!(given_to_plan(&["theseus", "plan", "j", "e.yaml"]), Vec::<String>::new());
        assert_eq!(
            given_to_plan(&["theseus", "plan", "j", "e.yaml", "--flagged-fast", "--flagged-size", "8"]),
            ["--flagged-size 8", "--flagged-fast"]
        );
        let Ok(Cli { command: args::Command::Submit(submit), .. }) =
            parsed(&["theseus", "submit", "j", "e.yaml", "--flagged-slow"])
        else {
            panic!("submit parses")
        };
        assert_eq!(submit.job.host_flags.len(), 1);
        let Ok(Cli { command: args::Command::Repl(repl), .. }) = parsed(&["theseus", "repl", "--flagged-size", "2"])
        else {
            panic!("repl parses")
        };
        assert_eq!(repl.host_flags[0].raw.as_deref(), Some("2"));
        let both = parsed(&["theseus", "plan", "j", "e.yaml", "--flagged-fast", "--flagged-slow"]).err().unwrap();
        assert_eq!(both.kind(), clap::error::ErrorKind::ArgumentConflict, "{both}");
        let elsewhere = parsed(&["theseus", "status", "j", "--flagged-fast"]).err().unwrap();
        assert_eq!(elsewhere.kind(), clap::error::ErrorKind::UnknownArgument, "{elsewhere}");
        let help = command(&registry).find_subcommand_mut("plan").unwrap().render_long_help().to_string();
        assert!(help.contains("Options of `flagged` hosts") && help.contains("--flagged-size <N>"), "{help}");
    }
}
