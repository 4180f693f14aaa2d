//! The `pagantic-sandbox` binary: the launcher pagantic starts a tool through, so that the tool
//! cannot reach what its `requires` does not grant; see `pagantic::tool::sandbox::launcher`.

use std::process::ExitCode;

use pagantic::tool::sandbox::launcher;

fn main() -> ExitCode {
    match launcher::main(std::env::args_os().skip(1)) {
        Ok(code) => code,
        Err(stop) => {
            eprintln!("{}: {}", launcher::NAME, stop.why);
            ExitCode::from(stop.code)
        }
    }
}
