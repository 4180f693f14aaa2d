//! What building and encoding a batch's spans costs through the generated OTLP message types
//! (`opentelemetry-proto`, encoded by prost) instead of the trace module's own encoder, for
//! `benches/tracing_generated.sh`: reads an export request pagantic sent (OTLP protobuf, as a
//! collector received it), then ROUNDS times fills a new request with the same spans, each
//! string and id a fresh allocation as filling one from a run's events would make, encodes it
//! and drops it. Counted by callgrind at two ROUNDS, the difference is what the generated types
//! take for those spans, with no queue, no thread and no socket: a part of what export with
//! them would cost, to set beside the whole of what export costs today.
//!
//!     cargo run --locked --example otlp_generated_types -- REQUEST ROUNDS

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [request, rounds] = args.as_slice() else {
        return Err("usage: otlp_generated_types REQUEST ROUNDS".into());
    };
    let rounds: u32 = rounds.parse()?;
    let sent = ExportTraceServiceRequest::decode(std::fs::read(request)?.as_slice())?;
    let spans: usize = sent
        .resource_spans
        .iter()
        .flat_map(|resource| &resource.scope_spans)
        .map(|scope| scope.spans.len())
        .sum();
    let mut bytes = 0;
    for _ in 0..rounds {
        // A fresh message whose every string, id and list is allocated anew, as one filled
        // from events is; encoded into a buffer of its own size, as an export request is.
        let built = sent.clone();
        bytes += built.encode_to_vec().len();
    }
    println!("{spans} spans a round, {rounds} rounds, {bytes} bytes encoded");
    Ok(())
}
