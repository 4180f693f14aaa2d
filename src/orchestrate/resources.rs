//! What the builds and runs of one session share besides its async runtime: the MCP servers'
//! client sessions (living on that runtime), the local models' loads, and the model files'
//! hashes. Each is made once by whoever owns the runtime — the session, or a command that reaches
//! MCP servers or model files without running a plan (`lock`, `tools`, `validate`) — and handed
//! down to the plan's build, its lockfile and the call cache; none is a global, so two sessions
//! in one process (tests) share nothing.

use std::sync::Arc;

use tokio::runtime::{Handle, Runtime};

use crate::core::{Failure, FailureCode};
use crate::inference::LocalLoads;
use crate::model_store::FileHashes;
use crate::tool::{McpServers, Sandboxes};

/// See the module docs; cheap to clone (each part is shared).
#[derive(Clone)]
pub struct Resources {
    /// The MCP servers reached, each with one client session for every tool that names it.
    pub mcp: Arc<McpServers>,
    /// The local models' loads, one per file and `max_batch`.
    pub loads: Arc<LocalLoads>,
    /// The model files hashed so far.
    pub hashes: Arc<FileHashes>,
    /// What this machine's tool sandboxes can enforce, probed at the first tool that asks.
    pub sandboxes: Arc<Sandboxes>,
}

impl Resources {
    /// Fresh resources whose MCP sessions live on `runtime` (a multi-threaded one).
    pub fn new(runtime: Handle) -> Self {
        Resources {
            mcp: Arc::new(McpServers::new(runtime)),
            loads: Arc::default(),
            hashes: Arc::default(),
            sandboxes: Arc::default(),
        }
    }
}

/// Starts the async runtime of the process: a session's, or a [`Standalone`]'s.
pub(super) fn start_runtime() -> Result<Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            Failure::new(
                FailureCode::ConfigFileError,
                format!("cannot start the async runtime: {e}"),
            )
        })
}

/// Resources on an async runtime of their own, for a command that opens no session but reaches
/// MCP servers or model files (`lock`, `tools`, `validate --locked`).
pub struct Standalone {
    resources: Resources,
    _runtime: Runtime,
}

impl Standalone {
    /// Starts the runtime, with fresh resources on it.
    pub fn start() -> Result<Standalone, Failure> {
        let runtime = start_runtime()?;
        Ok(Standalone {
            resources: Resources::new(runtime.handle().clone()),
            _runtime: runtime,
        })
    }

    pub fn resources(&self) -> &Resources {
        &self.resources
    }
}

/// Resources for unit tests, whose MCP sessions live on a runtime kept for the test binary.
#[cfg(test)]
pub(crate) fn for_tests() -> Resources {
    static RUNTIME: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the tests")
    });
    Resources::new(RUNTIME.handle().clone())
}
