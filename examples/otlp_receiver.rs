//! A stand-in OTLP/HTTP collector for `benches/tracing.sh`: listens on a loopback port of its
//! own (written to PORT_FILE once it listens), takes every POST to `/v1/traces` whole and
//! answers 200 with an empty body, as a collector that accepted everything does, keeping
//! nothing. It runs on one thread, like the integration tests' receiver, so on a small machine
//! the benchmark's slowdown is pagantic's cost more than the receiver's.
//!
//!     cargo run --locked --example otlp_receiver -- PORT_FILE

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::routing::post;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [port_file] = args.as_slice() else {
        return Err("usage: otlp_receiver PORT_FILE".into());
    };
    let take = |_request: Bytes| async {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/x-protobuf")],
        )
    };
    let router = Router::new().route("/v1/traces", post(take));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    // Written whole, then renamed, so a reader never sees a part of the number.
    let partial = format!("{port_file}.partial");
    std::fs::write(&partial, port.to_string())?;
    std::fs::rename(&partial, port_file)?;
    axum::serve(listener, router).await?;
    Ok(())
}
