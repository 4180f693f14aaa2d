//! The `pagantic-sandbox` program: sets a tool's limits up on itself, then starts the tool.
//!
//! `pagantic-sandbox [--no-network] [--contain] [--read DIR --write DIR] -- PROGRAM ARGS…`
//! 1. enters new namespaces: a network namespace (`--no-network`, its loopback brought up) and a
//!    PID namespace (`--contain`), directly when it may, else inside a new unprivileged user
//!    namespace that maps its own user and group to themselves;
//! 2. with `--read`/`--write`, restricts itself with Landlock: reading only the system's
//!    read-only paths, the program, DIR (the working directory) and the usual devices, writing
//!    only the temporary directory (and `/dev/null`-like devices);
//! 3. without `--contain`, becomes the program (`exec`); with it, starts itself as `--init`, the
//!    first process of the PID namespace, which starts the program, reaps every orphan, and exits
//!    with the program's status; the kernel then kills whatever is left in the namespace. The
//!    init process stays in the call's process group and dies with its parent, so stopping the
//!    call (killing the group) ends the namespace too.
//!
//! `--probe` tries each limit on itself and prints what this machine allows as JSON (see
//! [`Support`]). A limit that cannot be set up at a call ends the launcher with
//! [`SETUP_FAILED`] and a line on stderr: the tool never runs with less than was reported.

use std::ffi::OsString;
use std::process::ExitCode;

use super::Support;

/// How the launcher names itself on stderr: a line starting with it says why a limit could not be
/// set up.
pub const NAME: &str = "pagantic-sandbox";
/// Asks what this machine allows.
pub const PROBE: &str = "--probe";
/// Runs the program in a network namespace of its own.
pub const NO_NETWORK: &str = "--no-network";
/// Runs the program under an init process in a PID namespace of its own.
pub const CONTAIN: &str = "--contain";
/// The directory the program may read (besides the system's); with Landlock.
pub const READ: &str = "--read";
/// The directory the program may write; with Landlock.
pub const WRITE: &str = "--write";
/// The init process of a PID namespace (started by the launcher itself).
const INIT: &str = "--init";

/// The exit status of a launcher that could not set a limit up.
pub const SETUP_FAILED: u8 = 125;

/// What the launcher was asked to do.
#[derive(Debug, Default, PartialEq)]
struct Request {
    probe: bool,
    init: bool,
    no_network: bool,
    contain: bool,
    read: Option<OsString>,
    write: Option<OsString>,
    argv: Vec<OsString>,
}

/// Reads the launcher's arguments (those after its own name).
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Request, String> {
    let mut request = Request::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some(PROBE) => request.probe = true,
            Some(INIT) => request.init = true,
            Some(NO_NETWORK) => request.no_network = true,
            Some(CONTAIN) => request.contain = true,
            Some(READ) => request.read = Some(args.next().ok_or("--read needs a directory")?),
            Some(WRITE) => request.write = Some(args.next().ok_or("--write needs a directory")?),
            Some("--") => {
                request.argv = args.collect();
                break;
            }
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    if !request.probe && request.argv.is_empty() {
        return Err("no program to run (`-- PROGRAM ARGS…`)".into());
    }
    if request.read.is_some() != request.write.is_some() {
        return Err("--read and --write go together".into());
    }
    Ok(request)
}

/// Why the launcher stopped before the program ran, and its exit status: [`SETUP_FAILED`] when a
/// limit could not be set up, 127 or 126 when the program could not be started (as a shell).
#[derive(Debug)]
pub struct Stop {
    pub code: u8,
    pub why: String,
}

impl From<String> for Stop {
    fn from(why: String) -> Stop {
        Stop {
            code: SETUP_FAILED,
            why,
        }
    }
}

impl From<&str> for Stop {
    fn from(why: &str) -> Stop {
        Stop::from(why.to_string())
    }
}

/// The launcher's `main`: the exit status, or why it stopped (printed by the caller).
pub fn main(args: impl IntoIterator<Item = OsString>) -> Result<ExitCode, Stop> {
    let request = parse(args)?;
    if request.probe {
        let support = linux::probe();
        let json = serde_json::to_string(&support).map_err(|error| error.to_string())?;
        println!("{json}");
        return Ok(ExitCode::SUCCESS);
    }
    if request.init {
        return linux::init(&request.argv);
    }
    linux::launch(&request)
}

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::OsString;
    use std::os::fd::AsRawFd;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::path::{Path, PathBuf};
    use std::process::{Command, ExitCode, ExitStatus};

    use landlock::{
        ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
        path_beneath_rules,
    };
    use nix::errno::Errno;
    use nix::sched::{CloneFlags, unshare};
    use nix::sys::signal::Signal;
    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto,
        socket,
    };
    use nix::sys::wait::{WaitStatus, waitpid};
    use nix::unistd::{Pid, User, getgid, getuid};

    use super::{Request, Stop, Support};

    /// The Landlock ABI whose file rights are handled: the newest the crate knows for files; an
    /// older kernel enforces what it has.
    const FILES_ABI: ABI = ABI::V5;

    /// What every program may read: the system's read-only trees (and `/proc`, `/sys`, which
    /// programs and their runtimes read about themselves).
    const SYSTEM_READ: &[&str] = &[
        "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/proc",
        "/sys",
    ];
    /// Devices every program may read and write (not the terminal: a tool that could open it
    /// could type into it).
    const DEVICES: &[&str] = &[
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
    ];

    pub(super) fn probe() -> Support {
        let network =
            enter(CloneFlags::CLONE_NEWNET).and_then(|()| loopback_up().map_err(|e| e.to_string()));
        let processes = enter(CloneFlags::CLONE_NEWPID);
        let filesystem = restrict(Path::new("/"), Path::new("/tmp"), None);
        Support {
            launcher: None,
            network,
            filesystem,
            processes,
        }
    }

    pub(super) fn launch(request: &Request) -> Result<ExitCode, Stop> {
        let (program, args) = request.argv.split_first().ok_or("no program to run")?;
        let mut flags = CloneFlags::empty();
        if request.no_network {
            flags |= CloneFlags::CLONE_NEWNET;
        }
        if request.contain {
            flags |= CloneFlags::CLONE_NEWPID;
        }
        if !flags.is_empty() {
            enter(flags)?;
        }
        if request.no_network {
            loopback_up().map_err(|error| format!("cannot bring the loopback up: {error}"))?;
        }
        // Found before Landlock applies: it may lie outside what the program may read.
        let itself = std::env::current_exe().map_err(|error| error.to_string())?;
        if let (Some(read), Some(write)) = (&request.read, &request.write) {
            let mut own = vec![itself.clone()];
            if let Ok(found) = which::which(program) {
                own.extend(program_files(&found));
            }
            restrict(Path::new(read), Path::new(write), Some(&own))?;
        }
        if request.contain {
            let status = Command::new(&itself)
                .arg(super::INIT)
                .arg("--")
                .args(&request.argv)
                .status()
                .map_err(|error| format!("cannot start the init process: {error}"))?;
            return Ok(pass_on(status));
        }
        let error = Command::new(program).args(args).exec();
        Err(start_failure(program, &error))
    }

    /// What a program needs to read besides the system's trees: its file (where it was found,
    /// and the file a symbolic link there names) and, for a shim (`~/.pyenv/shims/python3`) or
    /// a virtualenv's program (a `bin/` beside a `pyvenv.cfg`), the tree it belongs to, where its
    /// interpreter and libraries are. Any other installation's tree (`~/.local`, `~/.cargo`) may
    /// hold its user's secrets, so it is not opened: such a program needs `filesystem`; nor is a
    /// tree that is `/` or the user's home directory.
    fn program_files(found: &Path) -> Vec<PathBuf> {
        let home = User::from_uid(getuid()).ok().flatten().map(|user| user.dir);
        let files = [Some(found.to_path_buf()), std::fs::canonicalize(found).ok()];
        let mut readable = Vec::new();
        for file in files.into_iter().flatten() {
            let dir = file.parent().unwrap_or(Path::new("/"));
            let tree = dir.parent().filter(|tree| {
                let named = |name: &str| dir.file_name().is_some_and(|own| own == name);
                let installed =
                    named("shims") || (named("bin") && tree.join("pyvenv.cfg").is_file());
                installed && *tree != Path::new("/") && Some(*tree) != home.as_deref()
            });
            readable.extend(tree.map(Path::to_path_buf));
            readable.push(file);
        }
        readable
    }

    /// The first process of the PID namespace: starts the program, reaps every process that
    /// ends (orphans are handed to it), and exits with the program's status once it ends.
    // The program is reaped by `waitpid` with the orphans, not through its `Child`.
    #[allow(clippy::zombie_processes)]
    pub(super) fn init(argv: &[OsString]) -> Result<ExitCode, Stop> {
        // Dies with the launcher, so that whoever stops the call ends the namespace.
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| e.to_string())?;
        let (program, args) = argv.split_first().ok_or("no program to run")?;
        let child = Command::new(program)
            .args(args)
            .spawn()
            .map_err(|error| start_failure(program, &error))?;
        let pid = Pid::from_raw(i32::try_from(child.id()).map_err(|e| e.to_string())?);
        loop {
            match waitpid(Pid::from_raw(-1), None) {
                Ok(WaitStatus::Exited(ended, code)) if ended == pid => {
                    return Ok(ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX)));
                }
                Ok(WaitStatus::Signaled(ended, signal, _)) if ended == pid => {
                    return Ok(ExitCode::from(128 + signal as u8));
                }
                Ok(_) | Err(Errno::EINTR) => {}
                Err(error) => return Err(format!("init cannot wait: {error}").into()),
            }
        }
    }

    /// The init process's status as the launcher's: a program killed by a signal (which init
    /// reports as 128 + the signal) kills the launcher with it, as if it had been the program.
    fn pass_on(status: ExitStatus) -> ExitCode {
        let code = match (status.code(), status.signal()) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 1,
        };
        let fatal = [
            Signal::SIGKILL,
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
            Signal::SIGPIPE,
            Signal::SIGALRM,
            Signal::SIGUSR1,
            Signal::SIGUSR2,
        ];
        if let Some(signal) = code
            .checked_sub(128)
            .and_then(|n| Signal::try_from(n).ok())
            .filter(|signal| fatal.contains(signal))
        {
            let _ = nix::sys::signal::raise(signal);
        }
        ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
    }

    /// A program that could not be started: 127 when it was not found, else 126, as a shell.
    fn start_failure(program: &OsString, error: &std::io::Error) -> Stop {
        Stop {
            code: if error.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            },
            why: format!("cannot start `{}`: {error}", program.to_string_lossy()),
        }
    }

    /// Enters new namespaces of `flags`: directly when this process may, else inside a new user
    /// namespace in which it keeps its own user and group.
    fn enter(flags: CloneFlags) -> Result<(), String> {
        match unshare(flags) {
            Ok(()) => return Ok(()),
            Err(Errno::EPERM) => {}
            Err(error) => return Err(namespace_failure(error)),
        }
        let (uid, gid) = (getuid(), getgid());
        unshare(CloneFlags::CLONE_NEWUSER | flags).map_err(namespace_failure)?;
        let write = |file: &str, text: String| {
            std::fs::write(file, text).map_err(|error| format!("cannot write {file}: {error}"))
        };
        write("/proc/self/setgroups", "deny".into())?;
        write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        write("/proc/self/gid_map", format!("{gid} {gid} 1"))
    }

    fn namespace_failure(error: Errno) -> String {
        match error {
            Errno::EPERM | Errno::EACCES => {
                "the kernel does not let unprivileged users create namespaces (user namespaces are disabled or restricted)".into()
            }
            Errno::EINVAL | Errno::ENOSYS => "the kernel has no namespaces of this kind".into(),
            Errno::ENOSPC | Errno::EUSERS => "the limit on namespaces is reached".into(),
            other => format!("namespaces cannot be created: {other}"),
        }
    }

    /// Brings the loopback interface of a new network namespace up (it starts down), over a
    /// route netlink socket: one RTM_NEWLINK request for interface 1, acknowledged.
    fn loopback_up() -> Result<(), Errno> {
        const RTM_NEWLINK: u16 = 16;
        const NLM_F_REQUEST_ACK: u16 = 0x1 | 0x4;
        const NLMSG_ERROR: u16 = 2;
        const IFF_UP: u32 = 1;
        let socket = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )?;
        let mut message = Vec::with_capacity(32);
        message.extend_from_slice(&32u32.to_ne_bytes()); // nlmsg_len
        message.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
        message.extend_from_slice(&NLM_F_REQUEST_ACK.to_ne_bytes());
        message.extend_from_slice(&1u32.to_ne_bytes()); // nlmsg_seq
        message.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid
        message.extend_from_slice(&[0, 0, 0, 0]); // ifi_family, pad, ifi_type
        message.extend_from_slice(&1i32.to_ne_bytes()); // ifi_index: the loopback
        message.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_flags
        message.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_change
        sendto(
            socket.as_raw_fd(),
            &message,
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )?;
        let mut answer = [0u8; 256];
        let read = recv(socket.as_raw_fd(), &mut answer, MsgFlags::empty())?;
        // An acknowledgement is an NLMSG_ERROR message whose error is 0.
        let kind = answer.get(4..6).map(|b| u16::from_ne_bytes([b[0], b[1]]));
        let error = answer
            .get(16..20)
            .filter(|_| read >= 20)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
        match (kind, error) {
            (Some(NLMSG_ERROR), Some(0)) => Ok(()),
            (Some(NLMSG_ERROR), Some(code)) => Err(Errno::from_raw(-code)),
            _ => Err(Errno::EPROTO),
        }
    }

    /// Restricts this process (and what it starts) with Landlock: reads only under the system's
    /// read-only paths, `read` and the `own` files (the launcher, the program), writes only
    /// under `write` and to the usual devices.
    fn restrict(read: &Path, write: &Path, own: Option<&[PathBuf]>) -> Result<(), String> {
        let failed = |error: landlock::RulesetError| format!("Landlock refused the rules: {error}");
        let readable = AccessFs::from_read(FILES_ABI);
        let status = Ruleset::default()
            .handle_access(AccessFs::from_all(FILES_ABI))
            .map_err(failed)?
            .create()
            .map_err(failed)?
            .add_rules(path_beneath_rules(SYSTEM_READ, readable))
            .map_err(failed)?
            .add_rules(path_beneath_rules([read], readable))
            .map_err(failed)?
            .add_rules(path_beneath_rules(own.unwrap_or_default(), readable))
            .map_err(failed)?
            .add_rules(path_beneath_rules(DEVICES, AccessFs::from_file(FILES_ABI)))
            .map_err(failed)?
            .add_rules(path_beneath_rules([write], AccessFs::from_all(FILES_ABI)))
            .map_err(failed)?
            .restrict_self()
            .map_err(failed)?;
        match status.ruleset {
            RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => Ok(()),
            RulesetStatus::NotEnforced => Err("the kernel has no Landlock (Linux 5.13 or later, with Landlock enabled, is needed)".into()),
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod linux {
    use std::ffi::OsString;
    use std::process::ExitCode;

    use super::{Request, Stop, Support};

    pub(super) fn probe() -> Support {
        Support::none("sandboxes need Linux")
    }

    pub(super) fn launch(_: &Request) -> Result<ExitCode, Stop> {
        Err("sandboxes need Linux".into())
    }

    pub(super) fn init(_: &[OsString]) -> Result<ExitCode, Stop> {
        Err("sandboxes need Linux".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments_name_the_limits_and_the_program_after_the_separator() {
        let request = parse(args(&[
            "--no-network",
            "--contain",
            "--read",
            "/w",
            "--write",
            "/t",
            "--",
            "sh",
            "--contain",
        ]))
        .expect("parsed");
        assert!(request.no_network && request.contain && !request.probe);
        assert_eq!(request.read, Some("/w".into()));
        assert_eq!(request.argv, args(&["sh", "--contain"]));
        for bad in [
            &["--"][..],
            &["--read", "/w", "--", "sh"],
            &["--read"],
            &["--bogus", "--", "sh"],
        ] {
            assert!(parse(args(bad)).is_err(), "{bad:?}");
        }
        assert!(parse(args(&["--probe"])).expect("parsed").probe);
    }
}
