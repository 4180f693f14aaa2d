//! Approving tool calls at the terminal: a chat's user is asked about each call of a tool marked
//! `approval: required` (its arguments shown) and answers on the chat's own input, between its
//! messages; only `y` or `yes` lets the call run. With input that is not a terminal nobody is
//! asked, and only the tools `--approve` names run.

use std::io::{self, IsTerminal, Write};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Mutex;
use tokio::sync::mpsc::Receiver;

use super::common::ApproveArgs;
use crate::core::text::terminal_safe;
use crate::core::{Failure, FailureCode};
use crate::orchestrate::tools::{ApprovalFuture, Approvals, AskApproval};

/// The lines typed, in turn: a chat's messages, and the answers to approval questions.
pub type TypedLines = Arc<Mutex<Receiver<io::Result<String>>>>;

/// The approvals of a chat reading `lines`: the tools `--approve` names, and the user asked
/// about the others when the input is a terminal.
pub fn at_terminal(approve: &ApproveArgs, lines: &TypedLines) -> Approvals {
    let ask = io::stdin().is_terminal().then(|| {
        Arc::new(AskAtTerminal {
            lines: Arc::clone(lines),
        }) as Arc<dyn AskApproval>
    });
    Approvals {
        ask,
        ..approve.approvals()
    }
}

/// The user at the terminal, asked about each call.
struct AskAtTerminal {
    lines: TypedLines,
}

impl AskApproval for AskAtTerminal {
    fn ask<'a>(&'a self, tool: &'a str, args: &'a Value) -> ApprovalFuture<'a> {
        Box::pin(async move {
            // One question at a time: a second call waits until the first is answered.
            let mut lines = self.lines.lock().await;
            let question = format!("  ? run {tool} {args} — allow? [y/N] ");
            let mut stderr = io::stderr();
            let _ = write!(stderr, "{}", terminal_safe(&question));
            let _ = stderr.flush();
            match lines.recv().await {
                Some(Ok(answer)) if is_yes(&answer) => Ok(()),
                _ => Err(Failure::new(
                    FailureCode::ToolApprovalDenied,
                    format!("you declined the call of tool `{tool}`"),
                )
                .retryable(false)),
            }
        })
    }
}

/// Whether an answer to a yes/no question is yes (`y` or `yes`, in any case).
fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// An asker reading `typed` as the user's answers, then the end of input.
    fn asker(typed: &[&str]) -> AskAtTerminal {
        let (sender, receiver) = tokio::sync::mpsc::channel(typed.len().max(1));
        for line in typed {
            sender
                .try_send(Ok((*line).to_string()))
                .expect("room for the line");
        }
        AskAtTerminal {
            lines: Arc::new(Mutex::new(receiver)),
        }
    }

    #[tokio::test]
    async fn only_yes_approves_a_call_and_anything_else_declines_it() {
        let args = json!({ "path": "notes.txt" });
        let said = asker(&["y", " YES ", "n", "", "sure"]);
        assert_eq!(said.ask("delete", &args).await, Ok(()));
        assert_eq!(said.ask("delete", &args).await, Ok(()));
        for _ in 0..3 {
            let refused = said.ask("delete", &args).await.expect_err("declined");
            assert_eq!(refused.code, FailureCode::ToolApprovalDenied);
            assert!(!refused.retryable);
        }
        // The end of input answers nothing: declined.
        assert!(said.ask("delete", &args).await.is_err());
    }
}
