//! What an agent remembers between the rounds of its tool loop, and how `memory: N` trims it.
//!
//! The system prompt and the task (the messages this turn's prompt renders) are pinned: a model
//! that loses its task answers something else. What can be trimmed is the conversation around
//! them: a chat's earlier turns (before the task) and the loop's own rounds (after it). Trimming
//! drops the oldest whole exchanges first — an assistant message that calls tools goes together
//! with the tool results that answer it, so no request ever holds a result without its call or
//! a call without its results — and always keeps the latest exchange, even when it alone is
//! longer than N messages.

use std::ops::Range;

use crate::core::{Message, Role};

/// An agent's messages: pinned ones and trimmable ones, in the order a request sends them.
#[derive(Debug, Clone)]
pub struct Memory {
    system: Vec<Message>,
    history: Vec<Message>,
    task: Vec<Message>,
    rounds: Vec<Message>,
    /// Most trimmable messages kept; None keeps all.
    limit: Option<usize>,
}

impl Memory {
    /// Memory for one turn: `prompt` is what the step's prompt renders (system messages first,
    /// then the task), `history` a chat's earlier turns.
    pub fn new(prompt: Vec<Message>, history: Vec<Message>, limit: Option<usize>) -> Self {
        let pinned = prompt.iter().take_while(|m| m.role == Role::System).count();
        let mut system = prompt;
        let task = system.split_off(pinned);
        let mut memory = Memory {
            system,
            history,
            task,
            rounds: Vec::new(),
            limit,
        };
        memory.trim();
        memory
    }

    /// Every message, in order: system, earlier turns, the task, the rounds so far.
    pub fn messages(&self) -> Vec<Message> {
        [&self.system, &self.history, &self.task, &self.rounds]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// The loop's messages so far (after the task).
    pub fn rounds(&self) -> &[Message] {
        &self.rounds
    }

    /// Adds a message of this turn's loop (trim after a whole exchange is in).
    pub fn push(&mut self, message: Message) {
        self.rounds.push(message);
    }

    /// Drops the oldest whole exchanges until at most `limit` trimmable messages are left (or
    /// only the latest exchange is).
    pub fn trim(&mut self) {
        let Some(limit) = self.limit else { return };
        let newest_first = exchanges(&self.rounds, false)
            .into_iter()
            .rev()
            .map(|r| (true, r))
            .chain(
                exchanges(&self.history, true)
                    .into_iter()
                    .rev()
                    .map(|r| (false, r)),
            );
        let (mut kept, mut rounds_from, mut history_from) =
            (0, self.rounds.len(), self.history.len());
        for (in_rounds, range) in newest_first {
            if kept > 0 && kept + range.len() > limit {
                break;
            }
            kept += range.len();
            if in_rounds {
                rounds_from = range.start;
            } else {
                history_from = range.start;
            }
        }
        if rounds_from > 0 {
            // Everything before the oldest kept round goes, the earlier turns included.
            history_from = self.history.len();
        }
        self.rounds.drain(..rounds_from);
        self.history.drain(..history_from);
    }
}

/// The exchanges of a run of messages, oldest first: an assistant message that calls tools with
/// the tool results after it, or any other single message; `by_turn` (a chat's earlier turns)
/// also keeps each user message with the replies that follow it.
fn exchanges(messages: &[Message], by_turn: bool) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let continues = message.role == Role::Tool || (by_turn && message.role != Role::User);
        match out.last_mut() {
            Some(last) if continues => last.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ToolCall;

    fn call(id: &str) -> Message {
        Message {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "calc".into(),
                arguments: serde_json::json!({}),
            }],
            ..Message::assistant("")
        }
    }

    fn contents(memory: &Memory) -> Vec<String> {
        memory
            .messages()
            .iter()
            .map(|m| match (&m.role, m.tool_calls.first(), &m.tool_call_id) {
                (_, Some(c), _) => format!("call {}", c.id),
                (_, _, Some(id)) => format!("result {id}"),
                _ => m.content.clone(),
            })
            .collect()
    }

    fn task() -> Vec<Message> {
        vec![Message::system("sys"), Message::user("task")]
    }

    #[test]
    fn the_system_prompt_and_the_task_survive_any_trim() {
        let mut memory = Memory::new(task(), Vec::new(), Some(2));
        for id in ["a", "b", "c"] {
            memory.push(call(id));
            memory.push(Message::tool_result(id.to_string(), "1"));
            memory.trim();
        }
        assert_eq!(contents(&memory), ["sys", "task", "call c", "result c"]);
    }

    #[test]
    fn tool_calls_are_never_separated_from_their_results() {
        let mut memory = Memory::new(task(), Vec::new(), Some(2));
        memory.push(call("a"));
        memory.push(Message::tool_result("a".to_string(), "1"));
        memory.push(Message {
            tool_calls: vec![
                ToolCall {
                    id: "b".into(),
                    name: "calc".into(),
                    arguments: serde_json::json!({}),
                },
                ToolCall {
                    id: "c".into(),
                    name: "calc".into(),
                    arguments: serde_json::json!({}),
                },
            ],
            ..Message::assistant("")
        });
        memory.push(Message::tool_result("b".to_string(), "2"));
        memory.push(Message::tool_result("c".to_string(), "3"));
        memory.trim();
        // The latest exchange is three messages, over the limit of two: it is kept whole, and
        // the one before it goes.
        assert_eq!(
            contents(&memory),
            ["sys", "task", "call b", "result b", "result c"]
        );
    }

    #[test]
    fn earlier_turns_go_before_this_turn_s_rounds() {
        let history = vec![
            Message::user("q1"),
            Message::assistant("a1"),
            Message::user("q2"),
            Message::assistant("a2"),
        ];
        let memory = Memory::new(task(), history.clone(), Some(3));
        assert_eq!(contents(&memory), ["sys", "q2", "a2", "task"]);
        let mut memory = Memory::new(task(), history, Some(3));
        memory.push(call("a"));
        memory.push(Message::tool_result("a".to_string(), "1"));
        memory.trim();
        assert_eq!(contents(&memory), ["sys", "task", "call a", "result a"]);
        memory.push(Message::assistant("thinking"));
        memory.push(Message::user("nudge"));
        memory.trim();
        assert_eq!(contents(&memory), ["sys", "task", "thinking", "nudge"]);
    }

    #[test]
    fn without_a_limit_everything_is_kept() {
        let mut memory = Memory::new(task(), vec![Message::user("q1")], None);
        memory.push(call("a"));
        memory.push(Message::tool_result("a".to_string(), "1"));
        memory.trim();
        assert_eq!(
            contents(&memory),
            ["sys", "q1", "task", "call a", "result a"]
        );
    }
}
