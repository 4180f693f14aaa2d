//! Sandboxes around the processes tools start (command tools and stdio MCP servers): what a
//! tool's `requires` does not grant, it cannot reach, where this machine can enforce it.
//!
//! Three limits, each decided per tool from what it is granted and what the machine supports
//! ([`Support`], probed once per session by running the launcher with `--probe`):
//! - **network**, unless granted: the tool runs in a network namespace of its own, with only a
//!   loopback interface (no route out; the host's loopback is not reachable either);
//! - **filesystem**, unless granted: Landlock lets it read only its working directory, its own
//!   program and the system's read-only paths, and write only a private temporary directory
//!   (`TMPDIR`), made for the call and removed after it;
//! - **processes**, always: the tool runs as a child of a small init process in a PID namespace of
//!   its own, so when the tool ends (or its call is stopped) the kernel kills everything it
//!   started, `setsid` and daemons included.
//!
//! None of this needs a daemon or root: where pagantic lacks the privilege to create namespaces,
//! the launcher creates an unprivileged user namespace first (if the kernel allows them). The
//! work is done by `pagantic-sandbox`, a small program installed beside `pagantic` ([`launcher`]):
//! it sets the limits up on itself, then starts the tool, so no code runs between `fork` and
//! `exec` here. What cannot be enforced is reported with why ([`Enforcement`]), never hidden: in
//! `pagantic tools`, in each tool call's event and record, and a policy's `require_sandbox` turns
//! it into a refusal. `PAGANTIC_SANDBOX=off` switches every limit off (each then reads "not
//! enforced: switched off").

pub mod launcher;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use crate::core::{Failure, FailureCode};

/// The launcher's file name, looked for beside the running program.
pub const LAUNCHER: &str = launcher::NAME;

/// The variable that switches the sandboxes off (`PAGANTIC_SANDBOX=off`).
pub const SWITCH: &str = "PAGANTIC_SANDBOX";

/// What a tool is granted by its `requires` (and its kind).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Grants {
    pub network: bool,
    pub filesystem: bool,
}

/// How one limit stands for one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The tool is granted it: nothing is restricted.
    Granted,
    /// Restricted on this machine.
    Enforced,
    /// It should be restricted, but cannot be here (the reason is in `why_not`).
    NotEnforced,
}

/// What is enforced around one tool's processes here, and why not where it is not.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Enforcement {
    pub network: Status,
    pub filesystem: Status,
    /// Containment of every process the tool starts (never granted away).
    pub processes: Status,
    /// For each limit not enforced, why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub why_not: BTreeMap<&'static str, String>,
}

impl Enforcement {
    /// The limits for a tool granted `grants`, on a machine that supports `support`.
    pub fn decide(grants: Grants, support: &Support) -> Enforcement {
        let mut why_not = BTreeMap::new();
        let mut status =
            |name: &'static str, granted: bool, can: &Result<(), String>| match (granted, can) {
                (true, _) => Status::Granted,
                (false, Ok(())) => Status::Enforced,
                (false, Err(why)) => {
                    why_not.insert(name, why.clone());
                    Status::NotEnforced
                }
            };
        let network = status("network", grants.network, &support.network);
        let filesystem = status("filesystem", grants.filesystem, &support.filesystem);
        let processes = status("processes", false, &support.processes);
        Enforcement {
            network,
            filesystem,
            processes,
            why_not,
        }
    }

    /// Each limit that should hold but cannot here, with why (`network: the kernel …`).
    pub fn gaps(&self) -> Vec<String> {
        self.why_not
            .iter()
            .map(|(limit, why)| format!("{limit}: {why}"))
            .collect()
    }

    /// One line for people: `network enforced, filesystem granted, processes not enforced (…)`.
    pub fn summary(&self) -> String {
        [
            ("network", self.network),
            ("filesystem", self.filesystem),
            ("processes", self.processes),
        ]
        .iter()
        .map(|(name, status)| match status {
            Status::Granted => format!("{name} granted"),
            Status::Enforced => format!("{name} enforced"),
            Status::NotEnforced => format!(
                "{name} NOT enforced ({})",
                self.why_not.get(name).map_or("", String::as_str)
            ),
        })
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// What this machine can enforce: each limit, or why it cannot be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Support {
    /// The launcher, when one is installed.
    #[serde(skip)]
    launcher: Option<PathBuf>,
    pub network: Result<(), String>,
    pub filesystem: Result<(), String>,
    pub processes: Result<(), String>,
}

impl Support {
    /// Nothing can be enforced, for `why`.
    pub fn none(why: &str) -> Support {
        Support {
            launcher: None,
            network: Err(why.to_string()),
            filesystem: Err(why.to_string()),
            processes: Err(why.to_string()),
        }
    }

    /// Everything can be enforced (what a test of the decisions above the launcher assumes).
    #[cfg(test)]
    pub fn everything() -> Support {
        Support {
            launcher: None,
            network: Ok(()),
            filesystem: Ok(()),
            processes: Ok(()),
        }
    }

    /// Asks the launcher beside the running program what this machine allows (it tries each
    /// limit on itself and says which worked); nothing when it is switched off, missing, or not
    /// on Linux.
    pub fn probe() -> Support {
        if std::env::var(SWITCH).is_ok_and(|value| value == "off") {
            return Support::none(&format!("switched off ({SWITCH}=off)"));
        }
        if !cfg!(target_os = "linux") {
            return Support::none("sandboxes need Linux");
        }
        let launcher = match std::env::current_exe() {
            Ok(program) => program.with_file_name(LAUNCHER),
            Err(error) => return Support::none(&format!("pagantic cannot find itself: {error}")),
        };
        if !launcher.is_file() {
            return Support::none(&format!(
                "`{LAUNCHER}` is not installed beside pagantic ({})",
                launcher.display()
            ));
        }
        let answer = std::process::Command::new(&launcher)
            .arg(launcher::PROBE)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .env_clear()
            .output();
        let said = match answer {
            Ok(output) => serde_json::from_slice::<Support>(&output.stdout).map_err(|_| {
                format!(
                    "`{LAUNCHER} {}` did not answer ({})",
                    launcher::PROBE,
                    output.status
                )
            }),
            Err(error) => Err(format!("`{LAUNCHER}` could not be started: {error}")),
        };
        match said {
            Ok(support) => Support {
                launcher: Some(launcher),
                ..support
            },
            Err(why) => Support::none(&why),
        }
    }
}

/// The machine's support, probed once, at the first tool that asks: one per session, held in
/// its resources.
#[derive(Debug, Default)]
pub struct Sandboxes {
    support: OnceLock<Support>,
}

impl Sandboxes {
    /// What this machine can enforce (probed at the first call).
    pub fn support(&self) -> &Support {
        self.support.get_or_init(Support::probe)
    }

    /// The sandbox of a tool granted `grants`.
    pub fn for_tool(&self, grants: Grants) -> Sandbox {
        let support = self.support();
        Sandbox {
            enforcement: Enforcement::decide(grants, support),
            launcher: support.launcher.clone(),
        }
    }
}

/// How one tool's processes are started: what is enforced, and the launcher that enforces it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sandbox {
    pub enforcement: Enforcement,
    launcher: Option<PathBuf>,
}

/// A command about to start under its sandbox, and the private temporary directory it may write
/// (removed when this is dropped, after the call).
pub struct Prepared {
    pub command: Command,
    pub temp: Option<tempfile::TempDir>,
}

impl Sandbox {
    /// No sandbox at all (unit tests of what runs inside one).
    pub fn none() -> Sandbox {
        Sandbox {
            enforcement: Enforcement::decide(Grants::default(), &Support::none("no sandbox")),
            launcher: None,
        }
    }

    /// The command that starts `argv` under this sandbox, in `working_dir` (None: ours), with a
    /// cleared environment but for `env` (and `TMPDIR`, the private temporary directory, when
    /// the filesystem is restricted), in a process group of its own, killed when dropped.
    pub fn prepare(
        &self,
        argv: &[String],
        working_dir: Option<&Path>,
        env: impl Iterator<Item = (OsString, OsString)>,
    ) -> Result<Prepared, Failure> {
        let (program, args) = argv.split_first().ok_or_else(|| {
            Failure::new(
                FailureCode::ToolInvalidArguments,
                "the command's argv is empty: there is no program to run",
            )
        })?;
        let network = self.enforcement.network == Status::Enforced;
        let filesystem = self.enforcement.filesystem == Status::Enforced;
        let processes = self.enforcement.processes == Status::Enforced;
        let mut temp = None;
        let mut command = match &self.launcher {
            Some(launcher)
                if (network || filesystem || processes) && findable(program, working_dir) =>
            {
                let mut command = Command::new(launcher);
                if network {
                    command.arg(launcher::NO_NETWORK);
                }
                if processes {
                    command.arg(launcher::CONTAIN);
                }
                if filesystem {
                    let dir = tempfile::Builder::new()
                        .prefix("pagantic-tool-")
                        .tempdir()
                        .map_err(|error| {
                            Failure::new(
                                FailureCode::ToolExecutionFailed,
                                format!("cannot make the private temporary directory of `{program}`: {error}"),
                            )
                        })?;
                    // Absolute: the launcher starts in the working directory, where a relative
                    // path would name something else.
                    let read = std::path::absolute(working_dir.unwrap_or(Path::new("."))).map_err(
                        |error| {
                            Failure::new(
                                FailureCode::ToolExecutionFailed,
                                format!(
                                    "cannot find the working directory of `{program}`: {error}"
                                ),
                            )
                        },
                    )?;
                    command
                        .arg(launcher::READ)
                        .arg(&read)
                        .arg(launcher::WRITE)
                        .arg(dir.path());
                    temp = Some(dir);
                }
                command.arg("--").arg(program);
                command
            }
            _ => Command::new(program),
        };
        command
            .args(args)
            .env_clear()
            .envs(env)
            .process_group(0)
            .kill_on_drop(true);
        if let Some(dir) = &temp {
            command.env("TMPDIR", dir.path());
        }
        if let Some(dir) = working_dir {
            command.current_dir(dir);
        }
        Ok(Prepared { command, temp })
    }
}

/// Whether `program` can be found as the system would start it (on `PATH`, or from the working
/// directory when its name has a `/`). One that cannot is started directly, without the
/// launcher, so that its start fails as it would without a sandbox (and nothing runs).
fn findable(program: &str, working_dir: Option<&Path>) -> bool {
    let base = match working_dir {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().unwrap_or_default(),
    };
    which::which_in(program, std::env::var_os("PATH"), base).is_ok()
}

/// What a failure says when the launcher could not set a limit up (it exits with
/// [`launcher::SETUP_FAILED`] and says why on stderr): the call fails rather than run with less
/// than it reports.
pub fn setup_failure(program: &str, stderr: &str) -> Failure {
    Failure::new(
        FailureCode::ToolExecutionFailed,
        format!(
            "the sandbox of `{program}` could not be set up: {}",
            stderr.trim()
        ),
    )
    .with_help(format!(
        "`pagantic tools PLAN` shows what this machine enforces; {SWITCH}=off runs tools without sandboxes"
    ))
    .retryable(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn support(network: bool, filesystem: bool, processes: bool) -> Support {
        let can = |yes: bool| if yes { Ok(()) } else { Err("no".to_string()) };
        Support {
            launcher: None,
            network: can(network),
            filesystem: can(filesystem),
            processes: can(processes),
        }
    }

    #[test]
    fn a_limit_is_granted_enforced_or_not_enforced_with_its_reason() {
        let grants = Grants {
            network: true,
            filesystem: false,
        };
        let everything = Enforcement::decide(grants, &support(true, true, true));
        assert_eq!(
            (
                everything.network,
                everything.filesystem,
                everything.processes
            ),
            (Status::Granted, Status::Enforced, Status::Enforced)
        );
        assert!(everything.gaps().is_empty());
        let old = Enforcement::decide(Grants::default(), &support(false, true, false));
        assert_eq!(old.network, Status::NotEnforced);
        assert_eq!(old.gaps(), ["network: no", "processes: no"]);
        assert_eq!(
            old.summary(),
            "network NOT enforced (no), filesystem enforced, processes NOT enforced (no)"
        );
        assert_eq!(
            serde_json::to_value(&old).expect("serialised"),
            serde_json::json!({
                "network": "not_enforced", "filesystem": "enforced", "processes": "not_enforced",
                "why_not": { "network": "no", "processes": "no" },
            })
        );
    }

    #[test]
    fn without_a_launcher_the_program_starts_directly() {
        let prepared = Sandbox::none()
            .prepare(&["echo".to_string()], None, std::iter::empty())
            .expect("prepared");
        assert_eq!(prepared.command.as_std().get_program(), "echo");
        assert!(prepared.temp.is_none());
        assert!(
            Sandbox::none()
                .prepare(&[], None, std::iter::empty())
                .is_err()
        );
    }
}
