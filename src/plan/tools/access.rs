//! What a tool may reach and who must say yes to it: the fields every tool kind shares
//! (`requires`, `approval`), flattened into each kind's config, and the closed list of
//! capabilities a policy grants (`allowed_capabilities`).
//!
//! A tool's requirements are what it declares plus what its kind always needs (a command starts
//! a process, `read_file` reads files): `validate` and `run` refuse a plan whose policy does not
//! grant them all. `approval: required` holds each call until it is approved (see
//! `orchestrate::tools::Approvals`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::orchestrate::tools::Approval;
use crate::tool::Grants;

/// What a tool may reach beyond its arguments; a policy's `allowed_capabilities` grants them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// Reads or writes files.
    Filesystem,
    /// Reaches other machines.
    Network,
    /// Starts programs (every command tool does).
    Process,
    /// Reads environment variables (a command tool that passes `env` through does).
    Environment,
}

impl Capability {
    /// Its name in a plan or policy.
    pub fn name(self) -> &'static str {
        match self {
            Capability::Filesystem => "filesystem",
            Capability::Network => "network",
            Capability::Process => "process",
            Capability::Environment => "environment",
        }
    }
}

/// The fields every tool kind has: flatten it into the kind's config (`#[serde(flatten)] pub
/// access: ToolAccess`) and return it from `ToolKind::access`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub struct ToolAccess {
    /// What the tool reaches besides its arguments: `filesystem`, `network`, `process`, `environment`. A policy with `allowed_capabilities` must grant each, or `validate` and `run` refuse the plan. A command tool always requires `process` (and `environment` when it passes `env` through), `read_file` `filesystem`; list what else it needs (a command that fetches a URL: `network`).
    #[serde(default)]
    pub requires: Vec<Capability>,
    /// `required`: every call waits for approval. In `chat` you confirm each call at the terminal (its arguments shown); elsewhere, and in a chat whose input is not a terminal, the call fails with TOOL_APPROVAL_REQUIRED unless `--approve NAME` names the tool. Default `auto`.
    #[serde(default)]
    pub approval: Approval,
}

/// No requirement, no approval: what a kind without these fields has.
pub static NO_ACCESS: ToolAccess = ToolAccess {
    requires: Vec::new(),
    approval: Approval::Auto,
};

impl ToolAccess {
    /// Everything the tool needs: what it declares and what its kind `implied`, each once, in
    /// the list's order.
    pub fn required(&self, implied: &[Capability]) -> Vec<Capability> {
        let mut all: Vec<Capability> = implied.to_vec();
        all.extend(&self.requires);
        all.sort();
        all.dedup();
        all
    }

    /// What its sandbox lets it reach: the network and the filesystem when it requires them.
    pub fn grants(&self, implied: &[Capability]) -> Grants {
        let required = self.required(implied);
        Grants {
            network: required.contains(&Capability::Network),
            filesystem: required.contains(&Capability::Filesystem),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_requires_what_it_declares_and_what_its_kind_implies_once_each() {
        let access = ToolAccess {
            requires: vec![Capability::Network, Capability::Process],
            approval: Approval::Auto,
        };
        assert_eq!(
            access.required(&[Capability::Process, Capability::Environment]),
            [
                Capability::Network,
                Capability::Process,
                Capability::Environment
            ]
        );
        assert_eq!(NO_ACCESS.required(&[]), []);
    }
}
