//! The `pagantic` binary: everything lives in the library; see `pagantic::cli`.

fn main() -> std::process::ExitCode {
    pagantic::cli::main()
}
